// Kernel requests of the SM90 NVFP4 MegaMoE family (see nvfp4_mega_moe_kernels.hpp).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "megamoe/error.hpp"
#include "megamoe/heuristics.hpp"
#include "runtime/nvfp4_mega_moe_kernels.hpp"

namespace megamoe::runtime {
namespace {

constexpr std::size_t kMaxDynamicSmem = 227 * 1024;  // sm_90 opt-in limit per block
// `pipelined` passed the whole GPU suite and is 1.3-1.6x faster than `simple`
// (bench/results/2026-11-29-device-run-2.md).
constexpr Nvfp4KernelVersion kDefaultVersion = Nvfp4KernelVersion::pipelined;

std::size_t smem_for(const MoEConfig& c, int block_m, int ns) {
  const auto kmax = static_cast<std::size_t>(std::max(c.shape.hidden, c.shape.intermediate));
  const auto el = static_cast<std::size_t>(c.experts_per_rank());
  const auto n = static_cast<std::size_t>(ns);
  const auto bm = static_cast<std::size_t>(block_m);
  const std::size_t bytes = n * (kmax + 8) * 2          // token tile, f16
                            + 4 * 32 * (n / 8) * 4 * 4  // split-K partials
                            + 64 * n * 4                // result tile
                            + el * 4 + (el + 1) * 4     // counts, tile prefix
                            + 8 * 4                     // source token counts
                            + bm * 5 * 4;               // routes
  return (bytes + 15) / 16 * 16;
}

int activation_code(const ActivationSpec& a) {
  switch (a.kind) {
    case ActivationKind::swiglu:
      return 0;
    case ActivationKind::geglu:
      return 1;
    case ActivationKind::swiglu_oai:
      return 2;
  }
  return 0;
}

}  // namespace

int nvfp4_token_subtile(const MoEConfig& c, int block_m) {
  for (int ns : {16, 8}) {
    if (ns > block_m) continue;
    if (smem_for(c, block_m, ns) <= kMaxDynamicSmem) return ns;
  }
  throw Unsupported("nvfp4_mega_moe: H or I too large for the SM90 kernel's token tile (" +
                    std::to_string(std::max(c.shape.hidden, c.shape.intermediate)) + ")");
}

std::size_t nvfp4_smem_bytes(const MoEConfig& c, int block_m) {
  return smem_for(c, block_m, nvfp4_token_subtile(c, block_m));
}

Nvfp4KernelVersion nvfp4_kernel_version() {
  const char* v = std::getenv("MEGAMOE_NVFP4_KERNEL");
  if (v == nullptr || *v == '\0') return kDefaultVersion;
  const std::string s(v);
  if (s == "simple") return Nvfp4KernelVersion::simple;
  if (s == "pipelined") return Nvfp4KernelVersion::pipelined;
  throw_invalid("MEGAMOE_NVFP4_KERNEL", "must be 'simple' or 'pipelined'", s);
}

int nvfp4_ring_depth(const MoEConfig& c) {
  if (const char* v = std::getenv("MEGAMOE_NVFP4_RING"); v != nullptr && *v != '\0') {
    const std::string s(v);
    if (s == "4" || s == "6" || s == "8") return s[0] - '0';
    throw_invalid("MEGAMOE_NVFP4_RING", "must be 4, 6 or 8", s);
  }
  // Blocks of 128 k per warp (two warps split K): a ring depth dividing both keeps every slot
  // busy across unit boundaries (the ring is aligned to each unit's start).
  const std::int64_t fc1 = c.shape.hidden / 256, fc2 = c.shape.intermediate / 256;
  const bool even = c.shape.hidden % 256 == 0 && c.shape.intermediate % 256 == 0;
  for (int depth : {8, 6}) {
    if (even && fc1 > 0 && fc2 > 0 && fc1 % depth == 0 && fc2 % depth == 0) return depth;
  }
  return 4;
}

jit::KernelRequest nvfp4_mega_moe_request(const MoEConfig& c, int block_m,
                                          Nvfp4KernelVersion version) {
  const int ns = nvfp4_token_subtile(c, block_m);
  std::string args = std::to_string(c.shape.hidden) + ", " + std::to_string(c.shape.intermediate) +
                     ", " + std::to_string(c.experts_per_rank()) + ", " +
                     std::to_string(c.shape.top_k) + ", " + std::to_string(c.num_ranks) + ", " +
                     std::to_string(block_m) + ", " + std::to_string(c.max_tokens_per_rank) + ", " +
                     std::to_string(ns) + ", " + std::to_string(activation_code(c.activation));
  jit::KernelRequest r;
  const bool pipelined = version == Nvfp4KernelVersion::pipelined;
  if (pipelined) args += ", " + std::to_string(nvfp4_ring_depth(c));
  r.name = pipelined ? "sm90_nvfp4_mega_moe_pipelined" : "sm90_nvfp4_mega_moe";
  r.source = pipelined ? "#include \"megamoe/impls/sm90_nvfp4_mega_moe_pipelined.cuh\"\n"
                       : "#include \"megamoe/impls/sm90_nvfp4_mega_moe.cuh\"\n";
  r.entry = std::string("megamoe::device::") +
            (pipelined ? "nvfp4_mega_moe_pipelined_kernel<" : "nvfp4_mega_moe_kernel<") + args +
            ">";
  r.arch = "sm_90a";
  r.arguments = std::string("H, I, E_local, K, R, BLOCK_M, T_max, NS, act") +
                (pipelined ? ", ring" : "") + " = " + args;
  return r;
}

std::vector<jit::KernelRequest> nvfp4_mega_moe_kernels(const MoEConfig& c) {
  std::vector<jit::KernelRequest> out;
  if (c.weight_format != Format::nvfp4 || c.act_format != Format::nvfp4 || c.side_lora) return out;
  for (int bm : reachable_block_ms(c)) out.push_back(nvfp4_mega_moe_request(c, bm));
  return out;
}

}  // namespace megamoe::runtime
