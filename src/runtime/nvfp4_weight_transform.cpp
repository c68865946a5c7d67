// Checkpoint layout -> kernel layout of NVFP4 expert weights (docs/nvfp4_kernel.md, "API" and
// "Weight layout"), and the scale-layout transform: validation, then kernels and copies enqueued on
// the caller's stream (kernels/megamoe/impls/sm90_nvfp4_weight_transform.cuh,
// sm90_ue4m3_scale_unswizzle.cuh). Nothing waits: the inputs must stay valid until the stream
// has passed them.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "core/validate.hpp"
#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_select.hpp"
#include "runtime/module.hpp"
#include "runtime/nvfp4_weight_transform_kernels.hpp"

namespace megamoe {
namespace runtime {
namespace {

// Host mirror of megamoe::device::Nvfp4WeightTransformParams (same member order and types).
struct Nvfp4WeightTransformParams {
  const std::uint8_t* packed;
  const std::uint8_t* scales;
  std::uint8_t* q;
  std::uint8_t* q_scales;
  std::int64_t experts;
  std::int64_t rows;
  std::int64_t k;
  std::int64_t intermediate;
  std::int64_t scale_expert_bytes;
  std::int32_t w13;
  std::int32_t swizzled;
};

// Host mirror of megamoe::device::ScaleUnswizzleParams.
struct ScaleUnswizzleParams {
  const std::uint8_t* swizzled;
  std::uint8_t* out;
  std::int64_t mats, rows, cols;
};

constexpr unsigned kTransformWarpsPerCta = 8;  // device kWeightTransformWarps
constexpr unsigned kUnswizzleThreads = 256;
// Grid-stride loops: more CTAs than this only add scheduling work.
constexpr std::int64_t kMaxCtas = 1 << 16;

unsigned ctas_for(std::int64_t work, std::int64_t per_cta) {
  return static_cast<unsigned>(
      std::clamp<std::int64_t>((work + per_cta - 1) / per_cta, 1, kMaxCtas));
}

void copy_device(const TensorView& dst, const TensorView& src, CUstream stream) {
  if (src.nbytes() == 0) return;
  MEGAMOE_CU(cuda::driver().cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst.data),
                                              reinterpret_cast<CUdeviceptr>(src.data), src.nbytes(),
                                              stream));
}

// One matrix ([E_l, rows, k] weights) of every local expert.
void launch_transform(const TensorView& packed, const TensorView& scales, ScaleLayout layout,
                      const TensorView& q, const TensorView& q_scales, std::int64_t experts,
                      std::int64_t rows, std::int64_t k, std::int64_t intermediate, bool w13,
                      CUstream stream) {
  const bool swizzled = layout == ScaleLayout::swizzled_128x4;
  Nvfp4WeightTransformParams p{};
  p.packed = packed.ptr<const std::uint8_t>();
  p.scales = scales.ptr<const std::uint8_t>();
  p.q = q.ptr<std::uint8_t>();
  p.q_scales = q_scales.ptr<std::uint8_t>();
  p.experts = experts;
  p.rows = rows;
  p.k = k;
  p.intermediate = intermediate;
  p.scale_expert_bytes = swizzled ? formats::swizzled_128x4_size(rows, k / 16) : rows * (k / 16);
  p.w13 = w13 ? 1 : 0;
  p.swizzled = swizzled ? 1 : 0;
  const std::int64_t items = experts * (rows / 16) * (k / 128);  // one warp each
  LaunchConfig cfg;
  cfg.grid = {ctas_for(items, kTransformWarpsPerCta), 1, 1};
  cfg.block = {32 * kTransformWarpsPerCta, 1, 1};
  cfg.stream = stream;
  launch_kernel(load_cached(nvfp4_weight_transform_request()), cfg, p);
}

// A kernel with no template arguments: its shapes come at run time.
jit::KernelRequest shape_free_request(const std::string& name, const std::string& entry) {
  jit::KernelRequest r;
  r.name = name;
  r.source = "#include \"megamoe/impls/" + name + ".cuh\"\n";
  r.entry = "megamoe::device::" + entry;
  r.arch = "sm_90a";
  r.arguments = "none (shapes at run time)";
  return r;
}

}  // namespace

jit::KernelRequest nvfp4_weight_transform_request() {
  return shape_free_request("sm90_nvfp4_weight_transform", "nvfp4_weight_transform_kernel");
}

jit::KernelRequest ue4m3_scale_unswizzle_request() {
  return shape_free_request("sm90_ue4m3_scale_unswizzle", "ue4m3_scale_unswizzle_kernel");
}

std::vector<jit::KernelRequest> nvfp4_weight_transform_kernels(const MoEConfig& config) {
  if (config.weight_format != Format::nvfp4) return {};
  return {nvfp4_weight_transform_request(), ue4m3_scale_unswizzle_request()};
}

}  // namespace runtime

Nvfp4KernelWeightBytes nvfp4_kernel_weight_bytes(const MoEConfig& config) {
  validate::validate_config(config);
  const auto e = static_cast<std::size_t>(config.experts_per_rank());
  const auto h = static_cast<std::size_t>(config.shape.hidden);
  const auto i = static_cast<std::size_t>(config.shape.intermediate);
  Nvfp4KernelWeightBytes b;
  b.w13 = e * 2 * i * h / 2;
  b.w13_sf = e * 2 * i * h / 16;
  b.w2 = e * h * i / 2;
  b.w2_sf = e * h * i / 16;
  return b;
}

void transform_weights_for_mega_moe(const MoEConfig& config, const Nvfp4CheckpointWeights& in,
                                    const Nvfp4KernelWeights& out, Stream stream) {
  const Device device = cuda::current_gpu();
  validate::validate_nvfp4_checkpoint_weights(config, in, device, "in");
  validate::validate_nvfp4_kernel_weights(config, out, nvfp4_kernel_weight_bytes(config), device,
                                          "out");
  cuda::driver();  // the context the tensors live in
  const CUstream s = runtime::launch_stream(stream);
  const std::int64_t e = config.experts_per_rank();
  const std::int64_t h = config.shape.hidden, inter = config.shape.intermediate;
  runtime::launch_transform(in.w13, in.w13_sf, in.sf_layout, out.w13, out.w13_sf, e, 2 * inter, h,
                            inter, /*w13=*/true, s);
  runtime::launch_transform(in.w2, in.w2_sf, in.sf_layout, out.w2, out.w2_sf, e, h, inter, inter,
                            /*w13=*/false, s);
  runtime::copy_device(out.fc1_alpha, in.w13_global, s);
  runtime::copy_device(out.fc2_alpha, in.w2_global, s);
  runtime::copy_device(out.fc2_input_scale, in.fc2_input_scale, s);
}

void transform_ue4m3_sf_into_required_layout(const TensorView& in, ScaleLayout from,
                                             const TensorView& out, Stream stream) {
  // The kernel layout of the scales depends on the matrix role (see the weight transform), so
  // this function produces the layout transform_weights_for_mega_moe accepts and reads fastest:
  // plain row-major [..., rows, cols]. `out` holds the row-major shape.
  const Device device = cuda::current_gpu();
  for (const auto& [t, name] : {std::pair{&in, "in"}, std::pair{&out, "out"}}) {
    validate::check_defined(*t, name);
    validate::check_dtype_any(*t, name, {DType::ue4m3, DType::u8});
    validate::check_contiguous(*t, name);
    validate::check_device(*t, name, device);
  }
  if (from != ScaleLayout::row_major && from != ScaleLayout::swizzled_128x4) {
    throw_invalid("from", "must be row_major or swizzled_128x4",
                  std::to_string(static_cast<int>(from)));
  }
  if (out.ndim < 2) throw_invalid("out", "must be [rows, cols] or [experts, rows, cols]");
  const std::int64_t rows = out.size(-2), cols = out.size(-1);
  const std::int64_t mats = rows * cols == 0 ? 0 : out.numel() / (rows * cols);
  const std::int64_t per =
      from == ScaleLayout::row_major ? rows * cols : formats::swizzled_128x4_size(rows, cols);
  if (in.nbytes() != static_cast<std::size_t>(mats * per)) {
    throw_invalid("in",
                  "must hold " + std::to_string(mats * per) + " bytes for out's shape " +
                      out.shape_string() + " in the given layout",
                  std::to_string(in.nbytes()));
  }
  if (mats == 0) return;
  cuda::driver();  // the context the tensors live in
  const CUstream s = runtime::launch_stream(stream);
  if (from == ScaleLayout::row_major) {
    runtime::copy_device(out, in, s);
    return;
  }
  runtime::ScaleUnswizzleParams p{in.ptr<const std::uint8_t>(), out.ptr<std::uint8_t>(), mats, rows,
                                  cols};
  runtime::LaunchConfig cfg;
  cfg.grid = {runtime::ctas_for(mats * rows * cols, runtime::kUnswizzleThreads), 1, 1};
  cfg.block = {runtime::kUnswizzleThreads, 1, 1};
  cfg.stream = s;
  runtime::launch_kernel(runtime::load_cached(runtime::ue4m3_scale_unswizzle_request()), cfg, p);
}

}  // namespace megamoe
