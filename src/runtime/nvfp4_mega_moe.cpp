// nvfp4_mega_moe: validation, kernel selection and the one launch that covers every driven rank
// (docs/nvfp4_kernel.md).
#include "megamoe/nvfp4_mega_moe.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "core/buffer_plan_detail.hpp"
#include "core/environment.hpp"
#include "core/validate.hpp"
#include "jit/compiler.hpp"
#include "megamoe/error.hpp"
#include "megamoe/heuristics.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_select.hpp"
#include "runtime/launch_memo.hpp"
#include "runtime/module.hpp"
#include "runtime/nvfp4_mega_moe_kernels.hpp"

namespace megamoe {
namespace {

constexpr int kMaxRanks = 8;

// Mirror of megamoe::device::Nvfp4MoeArgs (kernels/megamoe/impls/sm90_nvfp4_mega_moe.cuh):
// same members, same order, same types.
struct KernelArgs {
  void* base[kMaxRanks];
  const void* w13[kMaxRanks];
  const void* w13_sf[kMaxRanks];
  const void* w2[kMaxRanks];
  const void* w2_sf[kMaxRanks];
  const float* alpha1[kMaxRanks];
  const float* alpha2[kMaxRanks];
  const float* fc2_scale[kMaxRanks];
  void* out[kMaxRanks];
  std::uint64_t out_pitch[kMaxRanks];
  int out_rows[kMaxRanks];
  std::uint64_t off_x, off_x_sf, off_x_global, off_topk_idx, off_topk_w, off_num_tokens;
  std::uint64_t off_route, off_fc2_pool, off_fc2_sf, off_combine, off_sync;
  std::uint64_t pitch_x, pitch_x_sf, pitch_fc2_pool, pitch_fc2_sf;
  std::uint64_t off_combine_sf, pitch_combine_sf;
  std::uint64_t off_token_f16;
  std::uint64_t sync_grid, sync_rank_barrier, sync_status;
  std::uint64_t timeout_ns;
  int pool_rows;
  int first_rank;
  int num_driven;
  int ctas_per_rank;
  float clamp;
  float oai_alpha, oai_limit;
  std::uint64_t sync_tile_choice;
  int tile_choice_alt, tile_choice_pct, tile_choice_min_gain;
};

std::uint64_t timeout_ns() {
  std::uint64_t ms = 60000;
  if (const char* v = std::getenv("MEGAMOE_PEER_TIMEOUT_MS")) {
    char* end = nullptr;
    const unsigned long long parsed = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0' || parsed == 0) {
      throw_invalid("MEGAMOE_PEER_TIMEOUT_MS", "must be a positive integer (milliseconds)", v);
    }
    ms = parsed;
  }
  return ms * 1000000ull;
}

// Offset of a field of the "sync" region that must hold at least `min_bytes`.
std::uint64_t field_offset(const SymmBufferPlan& plan, std::string_view name,
                           std::size_t min_bytes) {
  for (const BufferRegion& f : plan.sync_fields) {
    if (f.name != name) continue;
    if (f.bytes < min_bytes) {
      throw Unsupported("nvfp4_mega_moe: sync field '" + std::string(name) + "' holds " +
                        std::to_string(f.bytes) + " bytes, the kernel needs " +
                        std::to_string(min_bytes));
    }
    return f.offset;
  }
  throw Unsupported("nvfp4_mega_moe: the buffer plan has no sync field '" + std::string(name) +
                    "'");
}

// The loaded kernel for (config, BLOCK_M, version) in the current context (runtime::load_cached:
// a decode step does not re-hash the kernel sources each call), refused if the build spills.
CUfunction kernel_for(const MoEConfig& c, int block_m) {
  return runtime::load_cached(
      runtime::nvfp4_mega_moe_request(c, block_m), [](const jit::CompiledKernel& kernel) {
        if (kernel.local_bytes == 0 && kernel.spill_bytes == 0) return;
        const std::string what = "kernel build uses local memory (" +
                                 std::to_string(kernel.local_bytes) + " B) or spills (" +
                                 std::to_string(kernel.spill_bytes) + " B)";
        // Instrumented kernel trees (MEGAMOE_KERNEL_DIR with printf timelines) need local
        // memory; nothing measured with such a build is a result.
        const char* allow = std::getenv("MEGAMOE_ALLOW_LOCAL_MEMORY");
        if (allow == nullptr || std::string(allow) != "1") {
          throw Unsupported("nvfp4_mega_moe: " + what);
        }
        std::fprintf(stderr, "megamoe: MEGAMOE_ALLOW_LOCAL_MEMORY=1: running although the %s\n",
                     what.c_str());
      });
}

// What a call launches for one BLOCK_M: the loaded kernel and its launch shape.
struct PreparedKernel {
  CUfunction function = nullptr;
  runtime::Nvfp4LaunchShape shape;
};

struct PreparedKey {
  CUcontext context = nullptr;
  MoEConfig config;
  int block_m = 0;
  std::string environment;  // the MEGAMOE_* tuning variables the shape reads
  friend bool operator==(const PreparedKey&, const PreparedKey&) = default;
};

// kernel_for and the launch shape, remembered per (context, config, BLOCK_M, MEGAMOE_*
// variables): building the request's strings and the shape took ~1-2 us of every call's host
// time (bench_host_launch, run 251).
PreparedKernel prepared_kernel(const MoEConfig& c, int block_m, const std::string& environment) {
  CUcontext context = nullptr;
  MEGAMOE_CU(cuda::driver().cuCtxGetCurrent(&context));
  static runtime::LaunchMemo<PreparedKey, PreparedKernel> memo;
  return memo.get(PreparedKey{context, c, block_m, environment}, [&] {
    return PreparedKernel{kernel_for(c, block_m), runtime::nvfp4_launch_shape(c, block_m)};
  });
}

}  // namespace

void nvfp4_mega_moe(const SymmBuffer& buffer, std::span<const Nvfp4KernelWeights> weights,
                    std::span<const Nvfp4MoEOutputs> outputs, Stream stream,
                    std::int64_t max_tokens_across_ranks) {
  const Device device = cuda::current_gpu();
  const MoEConfig& c = buffer.plan.config;
  validate::validate_nvfp4_mega_moe(validate::buffer_facts(buffer, device), weights, outputs,
                                    nvfp4_kernel_weight_bytes(c), max_tokens_across_ranks);
  if (c.num_ranks > kMaxRanks) throw Unsupported("nvfp4_mega_moe: at most 8 ranks");

  // The driven ranks must be contiguous (all R for `local`, one for NCCL).
  std::vector<int> driven = buffer.memory->driven_ranks();
  std::sort(driven.begin(), driven.end());
  for (std::size_t i = 1; i < driven.size(); ++i) {
    if (driven[i] != driven[0] + static_cast<int>(i)) {
      throw Unsupported("nvfp4_mega_moe: driven ranks must be contiguous");
    }
  }

  // The count the BLOCK_M table reads. Without the caller's max_tokens_across_ranks, ranks in
  // other processes whose counts differ (ragged batches) may get other tables, hence other
  // kernels: each still passes every cross-rank barrier of a call once, in whichever of its
  // kernels runs the call (docs/nvfp4_kernel.md, "Tile choice on the device"), and the pools
  // hold any table's tiles (docs/api.md, "Ragged batches").
  std::int64_t tokens = std::max<std::int64_t>(1, max_tokens_across_ranks);
  for (const Nvfp4MoEOutputs& o : outputs) tokens = std::max(tokens, o.out.size(0));
  const int block_m = get_block_m_for_mega_moe(c, tokens);
  check_pools_fit(buffer.plan, tokens, block_m);
  // Tile choice on the device (two kernels, the second the wide one). Ranks in other processes
  // reach the same verdict from the same table.
  const std::optional<int> alt = get_device_choice_block_m_for_mega_moe(c, tokens);
  if (alt && (!buffer.plan.has("token_f16") ||
              worst_case_pool_rows(c, tokens, *alt) > buffer.plan.pool_rows)) {
    throw_invalid("MEGAMOE_TILE_CHOICE",
                  "must be what the buffer was planned with: the plan lacks the room of the "
                  "device's alternative BLOCK_M " +
                      std::to_string(*alt) + " at " + std::to_string(tokens) + " tokens per rank",
                  "buffer planned with the tile choice off");
  }
  const bool wide = alt.has_value() ||
                    runtime::nvfp4_kernel_version(c, block_m) == runtime::Nvfp4KernelVersion::wide;
  if (wide && !buffer.plan.has("token_f16")) {
    // Only MEGAMOE_NVFP4_KERNEL=wide set after planning gets here: the plan holds the region
    // wherever the default selection can pick the wide kernel.
    throw_invalid("MEGAMOE_NVFP4_KERNEL",
                  "=wide needs a buffer planned while it was set (the plan holds the wide "
                  "kernel's token chunks only where it can run)",
                  "buffer without \"token_f16\"");
  }
  if (wide && buffer.plan.pool_rows * (std::max(c.shape.hidden, c.shape.intermediate) / 16) >
                  std::numeric_limits<std::int32_t>::max()) {
    throw Unsupported("nvfp4_mega_moe: the wide kernel indexes pool rows x 16-k blocks in i32");
  }
  // A published unit carries its column index in 10 bits (nvfp4_pipe::kUnitFieldBits): FC1 has
  // intermediate / 32 columns, FC2 hidden / 64.
  if (c.shape.intermediate / 32 >= 1024 || c.shape.hidden / 64 >= 1024) {
    throw Unsupported(
        "nvfp4_mega_moe: intermediate must be below 32768 and hidden below 65536 (got " +
        std::to_string(c.shape.intermediate) + ", " + std::to_string(c.shape.hidden) + ")");
  }
  const std::string environment = megamoe_environment();
  const PreparedKernel kernel = prepared_kernel(c, block_m, environment);
  const PreparedKernel alt_kernel = alt ? prepared_kernel(c, *alt, environment) : PreparedKernel{};

  const SymmBufferPlan& plan = buffer.plan;
  KernelArgs a{};
  for (int r = 0; r < c.num_ranks; ++r) a.base[r] = buffer.memory->base(r);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const int r = outputs[i].rank;
    const Nvfp4KernelWeights& w = weights[i];
    a.w13[r] = w.w13.data;
    a.w13_sf[r] = w.w13_sf.data;
    a.w2[r] = w.w2.data;
    a.w2_sf[r] = w.w2_sf.data;
    a.alpha1[r] = w.fc1_alpha.ptr<const float>();
    a.alpha2[r] = w.fc2_alpha.ptr<const float>();
    a.fc2_scale[r] = w.fc2_input_scale.ptr<const float>();
    a.out[r] = outputs[i].out.data;
    a.out_pitch[r] = static_cast<std::uint64_t>(outputs[i].out.strides[0]);
    a.out_rows[r] = static_cast<int>(outputs[i].out.size(0));
  }
  a.off_x = plan.region("x").offset;
  a.off_x_sf = plan.region("x_sf").offset;
  a.off_x_global = plan.region("x_global").offset;
  a.off_topk_idx = plan.region("topk_idx").offset;
  a.off_topk_w = plan.region("topk_weights").offset;
  a.off_num_tokens = plan.region("num_tokens").offset;
  a.off_route = plan.region("route_list").offset;
  a.off_fc2_pool = plan.region("fc2_pool").offset;
  a.off_fc2_sf = plan.region("fc2_pool_sf").offset;
  a.off_combine = plan.region("combine").offset;
  a.off_sync = plan.region("sync").offset;
  a.pitch_x = plan.region("x").row_pitch;
  a.pitch_x_sf = plan.region("x_sf").row_pitch;
  a.pitch_fc2_pool = plan.region("fc2_pool").row_pitch;
  a.pitch_fc2_sf = plan.region("fc2_pool_sf").row_pitch;
  const auto slot_bytes = static_cast<std::size_t>(c.shape.hidden) * (c.fp8_combine ? 1 : 2);
  if (plan.region("combine").row_pitch != slot_bytes ||
      plan.region("topk_idx").row_pitch != static_cast<std::size_t>(4 * c.shape.top_k)) {
    throw Unsupported("nvfp4_mega_moe: combine / topk_idx rows must be dense in the plan");
  }
  if (plan.has("token_f16")) a.off_token_f16 = plan.region("token_f16").offset;
  if (c.fp8_combine) {
    a.off_combine_sf = plan.region("combine_sf").offset;
    a.pitch_combine_sf = plan.region("combine_sf").row_pitch;
  }
  a.sync_grid = field_offset(plan, "grid_barrier", 4);
  a.sync_rank_barrier = field_offset(plan, "rank_barrier", 64);  // two counters, 32 B apart
  a.sync_status = field_offset(plan, "status", 12);
  a.timeout_ns = timeout_ns();
  a.pool_rows = static_cast<int>(plan.pool_rows);
  a.first_rank = driven.front();
  a.num_driven = static_cast<int>(driven.size());
  const int sms = get_num_sms();
  a.ctas_per_rank = std::max(1, sms / a.num_driven);
  a.clamp = c.activation.clamp;
  a.oai_alpha = c.activation.oai_alpha;
  a.oai_limit = c.activation.oai_limit;
  a.sync_tile_choice = field_offset(plan, "tile_choice", 4);
  a.tile_choice_alt = alt ? *alt : 0;
  a.tile_choice_pct = tile_choice_percent();
  a.tile_choice_min_gain = alt ? tile_choice_min_gain_passes(c, block_m) : 0;

  auto launch = [&](const PreparedKernel& k) {
    runtime::LaunchConfig cfg;
    cfg.grid = {static_cast<unsigned>(a.ctas_per_rank * a.num_driven), 1, 1};
    cfg.block = {static_cast<unsigned>(k.shape.threads), 1, 1};
    cfg.dynamic_smem = k.shape.smem;
    cfg.stream = runtime::launch_stream(stream);
    // Launched while the previous kernel (the pre-dispatch, or the first of two) finishes; the
    // kernels wait for it (griddepcontrol.wait) before their first global access.
    cfg.pdl = runtime::use_pdl(cfg.stream);
    runtime::launch_kernel(k.function, cfg, a);
  };
  launch(kernel);
  // The wide kernel reads the first one's verdict and returns at once unless it was chosen.
  if (alt) launch(alt_kernel);
}

int nvfp4_tile_choice_of_last_call(const SymmBuffer& buffer, int rank) {
  if (rank < 0 || rank >= buffer.plan.config.num_ranks) {
    throw_invalid("rank", "must be in [0, num_ranks)", std::to_string(rank));
  }
  const std::uint64_t at =
      buffer.plan.region("sync").offset + field_offset(buffer.plan, "tile_choice", 4);
  std::int32_t v = 0;
  const auto src = reinterpret_cast<CUdeviceptr>(
      static_cast<const std::uint8_t*>(buffer.memory->base(rank)) + at);
  MEGAMOE_CU(cuda::driver().cuMemcpyDtoH(&v, src, sizeof v));
  return v;
}

}  // namespace megamoe
