// Launcher of the pre-dispatch kernel (docs/pre_dispatch.md): validation, JIT source with the
// shape as template constants, one launch per driven rank with programmatic dependent launch.
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/validate.hpp"
#include "megamoe/error.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_select.hpp"
#include "runtime/launch_memo.hpp"
#include "runtime/module.hpp"
#include "runtime/pre_dispatch_kernel.hpp"

namespace megamoe::runtime {
namespace {

// Must match the kPreDispatch* constants of the kernel.
int format_code(Format f) {
  switch (f) {
    case Format::fp8:
      return 0;
    case Format::mxfp4:
      return 1;
    case Format::nvfp4:
      return 2;
    case Format::bf16:
      break;
  }
  throw_invalid("config.act_format", "pre-dispatch quantizes to fp8, mxfp4 or nvfp4",
                std::string(format_name(f)));
}

int group_elements(Format f) {
  return f == Format::fp8 ? 16 : 32;
}

const char* flag(bool b) {
  return b ? "true" : "false";
}

// A padding CTA clears this many route entries per thread before the grid runs out.
constexpr std::int64_t kPadEntriesPerThread = 16;

// The FP4 row kernel (sm90_pre_dispatch_fp4_rows.cuh): kFp4RowsWarpsPerCta, kFp4RowsMaxSteps.
constexpr std::int64_t kFp4RowsWarpsPerCta = 4;
constexpr std::int64_t kFp4RowsMaxSteps = 16;

template <typename T>
T* at(void* base, std::size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

// Host mirror of megamoe::device::PreDispatchParams (same member order and types).
struct PreDispatchParams {
  const void* x;
  std::int64_t x_row_stride;
  const void* topk_idx;
  std::int64_t idx_row_stride;
  const float* topk_weights;
  std::int64_t weight_row_stride;
  const float* expert_scales;
  std::uint8_t* out_x;
  std::int64_t out_x_pitch;
  std::uint8_t* out_sf;
  std::int64_t out_sf_pitch;
  float* out_global;
  std::int32_t* out_idx;
  float* out_weights;
  std::int64_t out_route_pitch;
  std::int32_t* out_num_tokens;
  std::uint32_t* error_count;
  std::int32_t num_tokens;
};

std::size_t pitch_of(const BufferRegion& r, std::size_t fallback) {
  return r.row_pitch != 0 ? r.row_pitch : fallback;
}

}  // namespace

int pre_dispatch_fp4_warps_per_row(const MoEConfig& config, const PreDispatchVariant& variant) {
  const Format f = config.act_format;
  const std::int64_t h = config.shape.hidden;
  if ((f != Format::nvfp4 && f != Format::mxfp4) || variant.cta_per_row || h <= 0 || h % 32 != 0) {
    return 0;
  }
  int w = variant.fp4_warps_per_row;
  // Default: two warps per row for both FP4 formats, the fastest layout measured on the H200
  // (bench/results/2026-11-29-device-run-2.md: nvfp4 75.9 %, mxfp4 76.6 % of copy bandwidth).
  if (w == 0) w = 2;
  if (w != 1 && w != 2 && w != 4) return 0;
  // The kernel's register budget: at most kFp4RowsMaxSteps units of 16 elements per lane.
  const std::int64_t steps = (h / 16 + 32 * w - 1) / (32 * w);
  return steps <= kFp4RowsMaxSteps ? w : 0;
}

int pre_dispatch_threads(const MoEConfig& config, const PreDispatchVariant& variant) {
  if (pre_dispatch_fp4_warps_per_row(config, variant) != 0) return 32 * kFp4RowsWarpsPerCta;
  const auto groups = config.shape.hidden / group_elements(config.act_format);
  return static_cast<int>((groups + 31) / 32 * 32);
}

jit::KernelRequest pre_dispatch_request(const MoEConfig& c, const PreDispatchVariant& v) {
  const int fmt = format_code(c.act_format);
  const std::int64_t group = group_elements(c.act_format);
  const std::int64_t h = c.shape.hidden;
  if (h <= 0 || h % group != 0 || (c.act_format == Format::fp8 && h % 128 != 0)) {
    throw_invalid("config.shape.hidden",
                  "pre-dispatch needs H > 0, a multiple of " + std::to_string(group) +
                      (c.act_format == Format::fp8 ? " and of 128" : ""),
                  std::to_string(h));
  }
  if (h / group > 1024) {
    throw_invalid("config.shape.hidden",
                  "pre-dispatch holds one row per CTA: H / " + std::to_string(group) + " <= 1024",
                  std::to_string(h));
  }
  if (c.shape.top_k < 1 || c.shape.top_k > 32) {
    throw_invalid("config.shape.top_k", "pre-dispatch publishes the routes with one warp: 1..32",
                  std::to_string(c.shape.top_k));
  }
  if (const int w = pre_dispatch_fp4_warps_per_row(c, v); w != 0) {
    const std::string args =
        std::to_string(h) + ", " + std::to_string(c.shape.top_k) + ", " + std::to_string(fmt) +
        ", " + std::to_string(w) + ", " + std::to_string(c.max_tokens_per_rank) + ", " +
        std::to_string(c.shape.num_experts) + ", " + flag(v.idx64) + ", " + flag(v.expert_scales);
    jit::KernelRequest r;
    r.name = "sm90_pre_dispatch_fp4_rows";
    r.source = "#include \"megamoe/impls/sm90_pre_dispatch_fp4_rows.cuh\"\n";
    r.entry = "megamoe::device::pre_dispatch_fp4_rows_kernel<" + args + ">";
    r.arch = "sm_90a";
    r.options = {"-fmad=false"};
    r.arguments = "H, K, format, warps per row, T_max, E, idx64, expert_scales = " + args;
    return r;
  }
  const bool ue8m0 = c.act_format == Format::fp8 && c.fp8_scale == Fp8ScaleKind::ue8m0;
  const bool hw = c.act_format == Format::fp8 && v.hw_e4m3;
  const std::string args =
      std::to_string(h) + ", " + std::to_string(c.shape.top_k) + ", " + std::to_string(fmt) + ", " +
      flag(ue8m0) + ", " + flag(hw) + ", " + std::to_string(c.max_tokens_per_rank) + ", " +
      std::to_string(c.shape.num_experts) + ", " + flag(v.idx64) + ", " + flag(v.expert_scales);
  jit::KernelRequest r;
  r.name = "sm90_pre_dispatch";
  r.source = "#include \"megamoe/impls/sm90_pre_dispatch.cuh\"\n";
  r.entry = "megamoe::device::pre_dispatch_kernel<" + args + ">";
  r.arch = "sm_90a";
  // The kernel spells out every rounding; no contraction may merge two of them.
  r.options = {"-fmad=false"};
  r.arguments = "H, K, format, ue8m0, hw_e4m3, T_max, E, idx64, expert_scales = " + args;
  return r;
}

std::vector<jit::KernelRequest> pre_dispatch_kernels(const MoEConfig& config) {
  if (config.act_format == Format::bf16) return {};
  std::vector<jit::KernelRequest> out;
  for (const bool idx64 : {false, true}) {
    for (const bool scales : {false, true}) {
      out.push_back(pre_dispatch_request(config, PreDispatchVariant{idx64, scales, true}));
    }
  }
  return out;
}

namespace {

struct PreparedPreDispatch {
  CUfunction function = nullptr;
  int threads = 0;
  int warps_per_row = 0;
};

struct PreparedKey {
  CUcontext context = nullptr;
  MoEConfig config;
  PreDispatchVariant variant;
  friend bool operator==(const PreparedKey&, const PreparedKey&) = default;
};

// The function and CTA shape of (config, variant), remembered per context: building the
// request's strings every call cost ~0.5-1.5 us (pre-dispatch alone, bench_host_launch, runs
// 253-254).
PreparedPreDispatch prepare_pre_dispatch(const MoEConfig& c, const PreDispatchVariant& variant) {
  CUcontext context = nullptr;
  MEGAMOE_CU(cuda::driver().cuCtxGetCurrent(&context));
  static LaunchMemo<PreparedKey, PreparedPreDispatch> memo;
  return memo.get(PreparedKey{context, c, variant}, [&] {
    return PreparedPreDispatch{load_cached(pre_dispatch_request(c, variant)),
                               pre_dispatch_threads(c, variant),
                               pre_dispatch_fp4_warps_per_row(c, variant)};
  });
}

}  // namespace

void launch_pre_dispatch(const SymmBuffer& buffer, std::span<const PreDispatchInputs> inputs,
                         megamoe::Stream stream, bool hw_e4m3, bool cta_per_row,
                         int fp4_warps_per_row) {
  // Validation first: bad input is reported the same with or without a GPU.
  const validate::BufferFacts facts = validate::buffer_facts(buffer, cuda::current_gpu());
  validate::validate_pre_dispatch(facts, inputs);
  const MoEConfig& c = buffer.plan.config;
  if (c.act_format == Format::bf16) {
    throw Unsupported(
        "mega_moe_pre_dispatch: bf16 activations are not quantized; "
        "pre-dispatch supports act_format fp8, mxfp4 and nvfp4");
  }
  cuda::driver();  // the context the buffers live in
  const SymmBufferPlan& plan = buffer.plan;
  const std::int64_t k = c.shape.top_k;
  const std::int64_t t_max = c.max_tokens_per_rank;

  for (const PreDispatchInputs& in : inputs) {
    const PreDispatchVariant variant{in.topk_idx.dtype == DType::i64, in.expert_scales.defined(),
                                     hw_e4m3, cta_per_row, fp4_warps_per_row};
    const PreparedPreDispatch prepared = prepare_pre_dispatch(c, variant);
    const CUfunction function = prepared.function;
    const int threads = prepared.threads;
    const int warps_per_row = prepared.warps_per_row;
    const std::int64_t rows_per_cta = warps_per_row != 0 ? kFp4RowsWarpsPerCta / warps_per_row : 1;

    void* base = buffer.memory->base(in.rank);
    const BufferRegion& rx = plan.region("x");
    const BufferRegion& rsf = plan.region("x_sf");
    const BufferRegion& ridx = plan.region("topk_idx");
    const BufferRegion& rw = plan.region("topk_weights");
    const std::size_t route_pitch = pitch_of(ridx, static_cast<std::size_t>(4 * k));
    if (pitch_of(rw, route_pitch) != route_pitch || route_pitch % 4 != 0) {
      throw_invalid("buffer.plan", "\"topk_idx\" and \"topk_weights\" rows must share a pitch");
    }
    const std::int64_t t = in.x.size(0);

    PreDispatchParams p{};
    p.x = in.x.data;
    p.x_row_stride = in.x.ndim == 2 ? in.x.strides[0] : c.shape.hidden;
    p.topk_idx = in.topk_idx.data;
    p.idx_row_stride = k;  // validated contiguous
    p.topk_weights = in.topk_weights.ptr<const float>();
    p.weight_row_stride = k;
    p.expert_scales = in.expert_scales.defined() ? in.expert_scales.ptr<const float>() : nullptr;
    p.out_x = at<std::uint8_t>(base, rx.offset);
    p.out_x_pitch =
        static_cast<std::int64_t>(pitch_of(rx, rx.bytes / static_cast<std::size_t>(t_max)));
    p.out_sf = at<std::uint8_t>(base, rsf.offset);
    p.out_sf_pitch =
        static_cast<std::int64_t>(pitch_of(rsf, rsf.bytes / static_cast<std::size_t>(t_max)));
    p.out_global =
        c.act_format == Format::nvfp4 ? at<float>(base, plan.region("x_global").offset) : nullptr;
    p.out_idx = at<std::int32_t>(base, ridx.offset);
    p.out_weights = at<float>(base, rw.offset);
    p.out_route_pitch = static_cast<std::int64_t>(route_pitch / 4);
    p.out_num_tokens = at<std::int32_t>(base, plan.region("num_tokens").offset);
    p.error_count = at<std::uint32_t>(base, plan.region("error_count").offset);
    p.num_tokens = static_cast<std::int32_t>(t);

    // One CTA per row, or per 4 / W rows (more when the padding routes need them).
    const std::int64_t pad_entries = (t_max - t) * k;
    const std::int64_t pad_ctas =
        (pad_entries + threads * kPadEntriesPerThread - 1) / (threads * kPadEntriesPerThread);
    const std::int64_t row_ctas = (t + rows_per_cta - 1) / rows_per_cta;
    const std::int64_t ctas = std::max<std::int64_t>({row_ctas, pad_ctas, 1});
    LaunchConfig cfg;
    cfg.grid = {static_cast<unsigned>(ctas), 1, 1};
    cfg.block = {static_cast<unsigned>(threads), 1, 1};
    cfg.stream = launch_stream(stream);
    cfg.pdl = use_pdl(cfg.stream);
    launch_kernel(function, cfg, p);
  }
}

}  // namespace megamoe::runtime

namespace megamoe {

void mega_moe_pre_dispatch(const SymmBuffer& buffer, std::span<const PreDispatchInputs> inputs,
                           Stream stream) {
  runtime::launch_pre_dispatch(buffer, inputs, stream, /*hw_e4m3=*/true);
}

std::uint32_t read_and_clear_dispatch_errors(const SymmBuffer& buffer, int rank, Stream stream) {
  const cuda::Driver& drv = cuda::driver();
  const int ranks = buffer.memory ? buffer.memory->num_ranks() : 0;
  if (rank < 0 || rank >= ranks) {
    throw_invalid("rank", "must be a rank of the buffer: 0.." + std::to_string(ranks - 1),
                  std::to_string(rank));
  }
  const auto ptr = reinterpret_cast<CUdeviceptr>(buffer.view(rank, "error_count"));
  const auto s = static_cast<CUstream>(stream);
  std::uint32_t count = 0;
  MEGAMOE_CU(drv.cuMemcpyDtoHAsync(&count, ptr, sizeof(count), s));
  MEGAMOE_CU(drv.cuMemsetD32Async(ptr, 0, 1, s));
  MEGAMOE_CU(drv.cuStreamSynchronize(s));
  return count;
}

}  // namespace megamoe
