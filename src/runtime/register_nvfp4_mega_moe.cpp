// Kernel requests of the SM90 NVFP4 MegaMoE family (see nvfp4_mega_moe_kernels.hpp).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <span>
#include <string>

#include "core/buffer_plan_detail.hpp"
#include "megamoe/error.hpp"
#include "megamoe/heuristics.hpp"
#include "runtime/nvfp4_mega_moe_kernels.hpp"

namespace megamoe::runtime {
namespace {

constexpr std::size_t kMaxDynamicSmem = 227 * 1024;  // sm_90 opt-in limit per block
// `pipelined` passed the whole GPU suite and is 1.3-1.6x faster than `simple`
// (bench/results/2026-11-29-device-run-2.md).
constexpr Nvfp4KernelVersion kDefaultVersion = Nvfp4KernelVersion::pipelined;
// 16 warps per CTA (bench/NOTES.md, v4).
constexpr int kDefaultKsplit = 4;

// The published-unit ring of the staged kernels: 16 slots of an 8-byte mbarrier and 16 bytes.
constexpr std::size_t kUnitRingBytes = 16 * (8 + 16);

// What every kernel's Smem struct ends with, and its size rounded as sizeof rounds it: phase 0's
// expert counts and tile prefix, the source ranks' token counts and the current tile's routes.
std::size_t with_plan_state(std::size_t bytes, const MoEConfig& c, int block_m) {
  const auto el = static_cast<std::size_t>(c.experts_per_rank());
  bytes += el * 4 + (el + 1) * 4                         // counts, tile prefix
           + 8 * 4                                       // source token counts
           + static_cast<std::size_t>(block_m) * 5 * 4;  // routes
  return (bytes + 15) / 16 * 16;
}

// Mirrors the kernels' Smem structs. `stages` < 0: `simple` (no stage ring; split-K partials of
// the KW - 1 upper slices and a 64 x NS result tile); 0: the pipelined kernel's register ring
// (placeholders of the stage and unit rings); > 0: that many weight stages of `stage_blocks`
// blocks per consumer warp.
// The pipelined kernel keeps `reduce_buffers` buffers of every slice's partials instead.
std::size_t smem_for(const MoEConfig& c, int block_m, int ns, int ksplit, int stages,
                     int stage_blocks = 1, int reduce_buffers = 1) {
  const auto kmax = static_cast<std::size_t>(std::max(c.shape.hidden, c.shape.intermediate));
  const auto n = static_cast<std::size_t>(ns);
  const auto kw = static_cast<std::size_t>(ksplit);
  const std::size_t stage_bytes = 4 * kw * static_cast<std::size_t>(stage_blocks) * 1152 + 16;
  // Stages (or a 16-byte token and one full / empty barrier), then the published-unit ring (one
  // slot without stages).
  const std::size_t ring = stages < 0 ? 0
                           : stages == 0
                               ? 16 + 2 * 8 + 8 + 16
                               : static_cast<std::size_t>(stages) * stage_bytes + kUnitRingBytes;
  const std::size_t ypair = stages < 0 ? 0 : (c.fp8_combine ? 128 * n * 4 : 4);
  const std::size_t slice = 4 * 32 * (n / 8) * 4 * 4;  // one K slice's partials, bytes
  const std::size_t reduce = stages < 0 ? (kw - 1) * slice + 64 * n * 4  // partials + tile
                                        : static_cast<std::size_t>(reduce_buffers) * kw * slice;
  return with_plan_state(ring + ypair  // weight stages + barriers, fp8_combine's y block
                             + n * (kmax + 8) * 2  // token tile, f16
                             + reduce,             // split-K exchange
                         c, block_m);
}

// Mirrors nvfp4_wide::Smem (kernels/megamoe/impls/sm90_nvfp4_mega_moe_wide.cuh): `stages` stages
// of 16 row groups x `stage_blocks` blocks (1152 B each) plus an ns-row token chunk, their full /
// empty barriers, the unit ring, `result_buffers` FC1 exchange buffers of 256 x ns f32 (0: one
// region of two 8-token groups per warp pair half, 16 x 128 f32), then the plan state.
std::size_t smem_for_wide(const MoEConfig& c, int block_m, int ns, int stages, int result_buffers,
                          int stage_blocks) {
  const auto n = static_cast<std::size_t>(ns);
  const auto blocks = static_cast<std::size_t>(stage_blocks);
  const std::size_t stage_bytes = 16 * blocks * 1152 + n * (blocks * 128 + 8) * 2;
  const std::size_t results =
      result_buffers == 0 ? 16 * 128 * 4 : static_cast<std::size_t>(result_buffers) * 256 * n * 4;
  return with_plan_state(static_cast<std::size_t>(stages) * (stage_bytes + 16)  // + barriers
                             + kUnitRingBytes + results,
                         c, block_m);
}

// A small integer from environment variable `name` among `allowed`; `fallback` when unset.
int env_choice(const char* name, std::initializer_list<int> allowed, int fallback,
               const char* rule) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  const std::string s(v);
  for (int x : allowed) {
    if (s == std::to_string(x)) return x;
  }
  throw_invalid(name, rule, s);
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

Nvfp4KernelVersion nvfp4_kernel_version(const MoEConfig& c, int block_m) {
  const char* v = std::getenv("MEGAMOE_NVFP4_KERNEL");
  if (v == nullptr || *v == '\0') {
    return wide_kernel_supported(c) && block_m >= kNvfp4WideMinBlockM ? Nvfp4KernelVersion::wide
                                                                      : kDefaultVersion;
  }
  const std::string s(v);
  if (s == "simple") return Nvfp4KernelVersion::simple;
  if (s == "pipelined") return Nvfp4KernelVersion::pipelined;
  if (s == "wide") return Nvfp4KernelVersion::wide;
  throw_invalid("MEGAMOE_NVFP4_KERNEL", "must be 'simple', 'pipelined' or 'wide'", s);
}

Nvfp4LaunchShape nvfp4_launch_shape(const MoEConfig& c, int block_m) {
  return nvfp4_launch_shape(c, block_m, nvfp4_kernel_version(c, block_m));
}

namespace {

// The wide kernel's shape (see the header): no K split, no register ring.
Nvfp4LaunchShape wide_launch_shape(const MoEConfig& c, int block_m) {
  if (!wide_kernel_supported(c)) {
    throw Unsupported(
        "nvfp4_mega_moe: the wide kernel needs H and I multiples of 256 (its token chunks; "
        "MEGAMOE_NVFP4_KERNEL=wide)");
  }
  Nvfp4LaunchShape l;
  l.ksplit = 1;
  l.ring = 0;
  l.threads = 16 * 32 + 32;
  l.token_subtile = std::min(block_m, 32);
  const int ns = l.token_subtile;
  // Blocks per row group and stage (a stage covers 128 x that many k): the widest of 4, 3, 2 that
  // both phases divide into and two stages of which fit, with FC1's small exchange region where
  // no exchange buffer fits beside them. Runs of 4 KB per row group and copy stream at ~1.3x
  // the rate of 2 KB runs (bench/NOTES.md, "wide").
  const auto fits_blocks = [&](int stages, int buffers, int blocks) {
    return smem_for_wide(c, block_m, ns, stages, buffers, blocks) <= kMaxDynamicSmem;
  };
  const auto usable = [&](int blocks) {
    return c.shape.hidden % (128 * blocks) == 0 && c.shape.intermediate % (128 * blocks) == 0 &&
           fits_blocks(2, 0, blocks);
  };
  const int widest = usable(4) ? 4 : usable(3) ? 3 : 2;
  l.stage_blocks = env_choice("MEGAMOE_NVFP4_STAGE_BLOCKS", {2, 3, 4}, widest,
                              "must be 2, 3 or 4 with the wide kernel");
  if (c.shape.hidden % (128 * l.stage_blocks) != 0 ||
      c.shape.intermediate % (128 * l.stage_blocks) != 0) {
    throw_invalid("MEGAMOE_NVFP4_STAGE_BLOCKS",
                  "H and I must be multiples of 128 x the blocks per stage (wide kernel)",
                  std::to_string(l.stage_blocks));
  }
  const auto fits = [&](int stages, int buffers) {
    return fits_blocks(stages, buffers, l.stage_blocks);
  };
  // The most stages that leave room for one exchange buffer; where two stages leave none, two
  // stages with the small exchange region.
  int best = 0;
  for (int st = 6; st >= 2 && best == 0; --st) {
    if (fits(st, 1)) best = st;
  }
  if (best == 0 && fits(2, 0)) best = 2;
  if (best == 0) {
    throw Unsupported("nvfp4_mega_moe: not even two wide-kernel stages fit in shared memory");
  }
  l.stages = env_choice("MEGAMOE_NVFP4_STAGES", {2, 3, 4, 5, 6}, best,
                        "must be 2..6 with the wide kernel");
  if (!fits(l.stages, 0)) {
    throw_invalid("MEGAMOE_NVFP4_STAGES", "must fit in shared memory (wide kernel)",
                  std::to_string(l.stages));
  }
  const int buffers = fits(l.stages, 2) ? 2 : fits(l.stages, 1) ? 1 : 0;
  l.reduce_buffers =
      env_choice("MEGAMOE_NVFP4_REDUCE_BUFFERS", {0, 1, 2}, buffers, "must be 0, 1 or 2");
  if (!fits(l.stages, l.reduce_buffers)) {
    throw_invalid("MEGAMOE_NVFP4_REDUCE_BUFFERS",
                  "must fit in shared memory beside the stages (wide kernel)",
                  std::to_string(l.reduce_buffers));
  }
  l.smem = smem_for_wide(c, block_m, ns, l.stages, l.reduce_buffers, l.stage_blocks);
  return l;
}

}  // namespace

Nvfp4LaunchShape nvfp4_launch_shape(const MoEConfig& c, int block_m, Nvfp4KernelVersion version) {
  if (version == Nvfp4KernelVersion::wide) return wide_launch_shape(c, block_m);
  Nvfp4LaunchShape l;
  const bool pipelined = version == Nvfp4KernelVersion::pipelined;
  if (pipelined) {
    l.ksplit = env_choice("MEGAMOE_NVFP4_KSPLIT", {2, 4}, kDefaultKsplit, "must be 2 or 4");
  }
  l.token_subtile = 0;
  const int ring_stages = pipelined ? 0 : -1;
  for (int ns : {16, 8}) {
    if (ns > block_m) continue;
    if (smem_for(c, block_m, ns, l.ksplit, ring_stages) <= kMaxDynamicSmem) {
      l.token_subtile = ns;
      break;
    }
  }
  if (l.token_subtile == 0) {
    throw Unsupported("nvfp4_mega_moe: H or I too large for the SM90 kernel's token tile (" +
                      std::to_string(std::max(c.shape.hidden, c.shape.intermediate)) + ")");
  }
  // Shared-memory stages when one block per consumer warp divides both phases, the kernel fits
  // the 96 registers a thread that the producer warp leaves, and at least 4 stages fit next to
  // the token tile (the deepest that fits, up to 8); else the register ring. 8-token tiles always
  // fit the registers; 16-token tiles only in the single-rank, bf16-combine kernel (the
  // multi-rank and FP8-combine builds spill: tests/cpu/test_nvfp4_kernel_compile.cpp compiles
  // each), and at H = 4096 four stages fit beside them (dsv4-flash T = 512: 8 % faster than the
  // ring, bench/NOTES.md), at H = 6144 none.
  // Two blocks per consumer warp and stage when both phases' block counts allow it: one wait,
  // one release and one ring step per two blocks (staged loop 158 -> 146 instructions per block,
  // bench/NOTES.md, v9); four when they allow it and two such stages fit (141 per block;
  // dsv4-flash T = 16 / 64 / 128 2-4 % faster with 2 stages of 4 than with 4 of 2, v13). The
  // register ring has no stages: one block (the value does not matter).
  if (pipelined) {
    const bool registers_fit = l.token_subtile == 8 || (c.num_ranks == 1 && !c.fp8_combine);
    const auto divides = [&](int step) {
      return (c.shape.hidden / 128) % step == 0 && (c.shape.intermediate / 128) % step == 0;
    };
    const bool divisible = divides(l.ksplit) && registers_fit;
    const auto fits_smem = [&](int stages, int blocks, int buffers) {
      return smem_for(c, block_m, l.token_subtile, l.ksplit, stages, blocks, buffers) <=
             kMaxDynamicSmem;
    };
    const bool two_stages_of_four = divisible && divides(4 * l.ksplit) && fits_smem(2, 4, 1);
    const int preferred_blocks = two_stages_of_four ? 4 : divides(2 * l.ksplit) ? 2 : 1;
    l.stage_blocks =
        env_choice("MEGAMOE_NVFP4_STAGE_BLOCKS", {1, 2, 4}, preferred_blocks, "must be 1, 2 or 4");
    if (l.stage_blocks > 1 && !divides(l.stage_blocks * l.ksplit)) {
      throw_invalid("MEGAMOE_NVFP4_STAGE_BLOCKS",
                    std::to_string(l.stage_blocks) +
                        " needs H / 128 and I / 128 divisible by that many times the K split",
                    std::to_string(l.stage_blocks));
    }
    const auto fits = [&](int st) { return fits_smem(st, l.stage_blocks, 1); };
    int best = 0;
    for (int blocks = 8; blocks >= 4 && best == 0 && divisible; blocks -= l.stage_blocks) {
      if (blocks / l.stage_blocks >= 2 && fits(blocks / l.stage_blocks)) {
        best = blocks / l.stage_blocks;
      }
    }
    l.stages = env_choice("MEGAMOE_NVFP4_STAGES", {0, 2, 3, 4, 5, 6, 7, 8}, best,
                          "must be 0 (register ring) or 2..8");
    if (l.stages > 0 && (!divisible || !fits(l.stages))) {
      throw_invalid("MEGAMOE_NVFP4_STAGES",
                    "needs H / 128 and I / 128 divisible by the K split, an 8-token sub-tile (or "
                    "16 tokens with one rank and bf16 combine) and the stages to fit in shared "
                    "memory next to it",
                    std::to_string(l.stages));
    }
    if (l.stages == 0) l.stage_blocks = 1;
    // Two split-K exchange buffers (one CTA barrier per unit instead of two, bench/NOTES.md v10)
    // when they fit beside the stages chosen above (stage depth comes first), except in the
    // FP8-combine kernel of 16-token tiles: at the register ring's 128-register cap its build
    // spills with them (tests/cpu/test_nvfp4_kernel_compile.cpp).
    const bool buffers_fit_registers = !(c.fp8_combine && l.token_subtile == 16);
    const auto fits_buffers = [&](int rb) {
      return (rb == 1 || buffers_fit_registers) && fits_smem(l.stages, l.stage_blocks, rb);
    };
    l.reduce_buffers = env_choice("MEGAMOE_NVFP4_REDUCE_BUFFERS", {1, 2}, fits_buffers(2) ? 2 : 1,
                                  "must be 1 or 2");
    if (!fits_buffers(l.reduce_buffers)) {
      throw_invalid("MEGAMOE_NVFP4_REDUCE_BUFFERS",
                    "2 must fit in shared memory beside the token tile and the stages (and is "
                    "not built for FP8 combine with 16-token tiles)",
                    std::to_string(l.reduce_buffers));
    }
  }
  l.threads = 128 * l.ksplit + (l.stages > 0 ? 32 : 0);
  l.smem = smem_for(c, block_m, l.token_subtile, l.ksplit, pipelined ? l.stages : -1,
                    l.stage_blocks, l.reduce_buffers);
  if (pipelined) {
    // Blocks of 128 k per warp and unit in each phase; a depth dividing both keeps every slot
    // busy across unit boundaries (the ring is aligned to each unit's start).
    const std::int64_t span = 128 * static_cast<std::int64_t>(l.ksplit);
    const std::int64_t fc1 = c.shape.hidden / span, fc2 = c.shape.intermediate / span;
    const bool even = c.shape.hidden % span == 0 && c.shape.intermediate % span == 0;
    // 16 warps have 128 registers each: deeper rings than 2 spill at the decode presets.
    static constexpr int kDepths4[] = {2}, kDepths2[] = {8, 6, 4};
    const std::span<const int> depths =
        l.ksplit == 4 ? std::span<const int>(kDepths4) : std::span<const int>(kDepths2);
    int best = depths.back();
    for (int d : depths) {
      if (even && fc1 > 0 && fc2 > 0 && fc1 % d == 0 && fc2 % d == 0) {
        best = d;
        break;
      }
    }
    l.ring = l.ksplit == 4 ? env_choice("MEGAMOE_NVFP4_RING", {2, 3, 4}, best,
                                        "must be 2, 3 or 4 with MEGAMOE_NVFP4_KSPLIT=4")
                           : env_choice("MEGAMOE_NVFP4_RING", {4, 5, 6, 7, 8}, best,
                                        "must be 4..8 with MEGAMOE_NVFP4_KSPLIT=2");
  }
  return l;
}

jit::KernelRequest nvfp4_mega_moe_request(const MoEConfig& c, int block_m) {
  return nvfp4_mega_moe_request(c, block_m, nvfp4_kernel_version(c, block_m));
}

jit::KernelRequest nvfp4_mega_moe_request(const MoEConfig& c, int block_m,
                                          Nvfp4KernelVersion version) {
  const Nvfp4LaunchShape l = nvfp4_launch_shape(c, block_m, version);
  std::string args = std::to_string(c.shape.hidden) + ", " + std::to_string(c.shape.intermediate) +
                     ", " + std::to_string(c.experts_per_rank()) + ", " +
                     std::to_string(c.shape.top_k) + ", " + std::to_string(c.num_ranks) + ", " +
                     std::to_string(block_m) + ", " + std::to_string(c.max_tokens_per_rank) + ", " +
                     std::to_string(l.token_subtile) + ", " +
                     std::to_string(activation_code(c.activation));
  jit::KernelRequest r;
  if (version == Nvfp4KernelVersion::wide) {
    args += ", " + std::to_string(l.stages) + ", " + std::to_string(l.reduce_buffers) + ", " +
            std::to_string(128 * l.stage_blocks) + ", " + (c.fp8_combine ? "1" : "0");
    r.name = "sm90_nvfp4_mega_moe_wide";
    r.source = "#include \"megamoe/impls/sm90_nvfp4_mega_moe_wide.cuh\"\n";
    r.entry = "megamoe::device::nvfp4_mega_moe_wide_kernel<" + args + ">";
    r.arch = "sm_90a";
    r.arguments =
        "H, I, E_local, K, R, BLOCK_M, T_max, NS, act, stages, result_buffers, chunk_k, "
        "fp8_combine = " +
        args;
    return r;
  }
  const bool pipelined = version == Nvfp4KernelVersion::pipelined;
  if (pipelined) {
    args += ", " + std::to_string(l.ring) + ", " + std::to_string(l.ksplit) + ", " +
            std::to_string(l.stages) + ", " + std::to_string(l.stage_blocks) + ", " +
            std::to_string(l.reduce_buffers) + ", " + (c.fp8_combine ? "1" : "0");
  } else if (c.fp8_combine) {
    throw Unsupported(
        "nvfp4_mega_moe: config.fp8_combine needs the pipelined kernel (MEGAMOE_NVFP4_KERNEL is "
        "'simple')");
  }
  r.name = pipelined ? "sm90_nvfp4_mega_moe_pipelined" : "sm90_nvfp4_mega_moe";
  r.source = pipelined ? "#include \"megamoe/impls/sm90_nvfp4_mega_moe_pipelined.cuh\"\n"
                       : "#include \"megamoe/impls/sm90_nvfp4_mega_moe.cuh\"\n";
  r.entry = std::string("megamoe::device::") +
            (pipelined ? "nvfp4_mega_moe_pipelined_kernel<" : "nvfp4_mega_moe_kernel<") + args +
            ">";
  r.arch = "sm_90a";
  r.arguments =
      std::string("H, I, E_local, K, R, BLOCK_M, T_max, NS, act") +
      (pipelined ? ", ring, ksplit, stages, stage_blocks, reduce_buffers, fp8_combine" : "") +
      " = " + args;
  return r;
}

std::vector<jit::KernelRequest> nvfp4_mega_moe_kernels(const MoEConfig& c) {
  std::vector<jit::KernelRequest> out;
  if (c.weight_format != Format::nvfp4 || c.act_format != Format::nvfp4 || c.side_lora) return out;
  for (int bm : reachable_block_ms(c)) out.push_back(nvfp4_mega_moe_request(c, bm));
  return out;
}

}  // namespace megamoe::runtime
