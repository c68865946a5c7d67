// Checkpoint layout -> kernel layout of NVFP4 expert weights (docs/nvfp4_kernel.md, "Weight
// transform"). Host-staged for now: the tensors are copied to the host, reordered by the CPU
// layout functions and copied back, synchronously (a load-time operation; `stream` is honoured
// only as the ordering point: it is synchronized first).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/validate.hpp"
#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/nvfp4_kernel_layout.hpp"

namespace megamoe {
namespace {

CUdeviceptr dptr(const void* p) {
  return reinterpret_cast<CUdeviceptr>(p);
}

std::vector<std::uint8_t> download(const TensorView& t) {
  std::vector<std::uint8_t> host(t.nbytes());
  if (!host.empty())
    MEGAMOE_CU(cuda::driver().cuMemcpyDtoH(host.data(), dptr(t.data), host.size()));
  return host;
}

void upload(const TensorView& t, const std::vector<std::uint8_t>& host) {
  if (!host.empty())
    MEGAMOE_CU(cuda::driver().cuMemcpyHtoD(dptr(t.data), host.data(), host.size()));
}

void copy_device(const TensorView& dst, const TensorView& src) {
  MEGAMOE_CU(
      cuda::driver().cuMemcpyDtoDAsync(dptr(dst.data), dptr(src.data), src.nbytes(), nullptr));
}

Device current_device() {
  return Device{DeviceKind::cuda, 0};
}

// Row-major [rows, cols] scales of expert e from either checkpoint layout.
std::vector<std::uint8_t> row_major_scales(const std::vector<std::uint8_t>& all, ScaleLayout layout,
                                           std::int64_t e, std::int64_t rows, std::int64_t cols) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * cols));
  if (layout == ScaleLayout::row_major) {
    const auto* src = all.data() + e * rows * cols;
    std::copy(src, src + rows * cols, out.begin());
    return out;
  }
  const std::int64_t per_expert = formats::swizzled_128x4_size(rows, cols);
  const std::span<const std::uint8_t> sw(all.data() + e * per_expert,
                                         static_cast<std::size_t>(per_expert));
  formats::unswizzle_128x4(sw, rows, cols, out);
  return out;
}

void transform_matrix(runtime::nvfp4_layout::Matrix m, const MoEConfig& c, const TensorView& q_in,
                      const TensorView& sf_in, ScaleLayout layout, const TensorView& q_out,
                      const TensorView& sf_out, std::int64_t rows, std::int64_t k) {
  const std::int64_t e_local = c.experts_per_rank();
  const std::vector<std::uint8_t> q = download(q_in);
  const std::vector<std::uint8_t> sf = download(sf_in);
  std::vector<std::uint8_t> oq(static_cast<std::size_t>(e_local * rows * k / 2));
  std::vector<std::uint8_t> osf(static_cast<std::size_t>(e_local * rows * k / 16));
  // Experts are independent (disjoint outputs): one worker thread per hardware thread.
  std::atomic<std::int64_t> next{0};
  auto work = [&] {
    for (std::int64_t e = next++; e < e_local; e = next++) {
      const std::vector<std::uint8_t> sf_e = row_major_scales(sf, layout, e, rows, k / 16);
      const auto qn = static_cast<std::size_t>(rows * k / 2);
      const auto sn = static_cast<std::size_t>(rows * k / 16);
      runtime::nvfp4_layout::encode_expert(
          m, c.shape.intermediate, rows, k,
          std::span<const std::uint8_t>(q.data() + static_cast<std::size_t>(e) * qn, qn), sf_e,
          std::span<std::uint8_t>(oq.data() + static_cast<std::size_t>(e) * qn, qn),
          std::span<std::uint8_t>(osf.data() + static_cast<std::size_t>(e) * sn, sn));
    }
  };
  const auto workers = static_cast<std::int64_t>(
      std::min<std::int64_t>(e_local, std::max(1u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (std::int64_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  upload(q_out, oq);
  upload(sf_out, osf);
}

}  // namespace

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
  const Device device = current_device();
  validate::validate_nvfp4_checkpoint_weights(config, in, device, "in");
  validate::validate_nvfp4_kernel_weights(config, out, nvfp4_kernel_weight_bytes(config), device,
                                          "out");
  const cuda::Driver& d = cuda::driver();
  MEGAMOE_CU(d.cuStreamSynchronize(static_cast<CUstream>(stream)));
  const std::int64_t h = config.shape.hidden, inter = config.shape.intermediate;
  using runtime::nvfp4_layout::Matrix;
  transform_matrix(Matrix::w13, config, in.w13, in.w13_sf, in.sf_layout, out.w13, out.w13_sf,
                   2 * inter, h);
  transform_matrix(Matrix::w2, config, in.w2, in.w2_sf, in.sf_layout, out.w2, out.w2_sf, h, inter);
  copy_device(out.fc1_alpha, in.w13_global);
  copy_device(out.fc2_alpha, in.w2_global);
  copy_device(out.fc2_input_scale, in.fc2_input_scale);
  MEGAMOE_CU(d.cuCtxSynchronize());
}

void transform_ue4m3_sf_into_required_layout(const TensorView& in, ScaleLayout from,
                                             const TensorView& out, Stream stream) {
  // The kernel layout of the scales depends on the matrix role (see the weight transform), so
  // this function produces the layout transform_weights_for_mega_moe accepts and reads fastest:
  // plain row-major [..., rows, cols]. `out` holds the row-major shape.
  const Device device = current_device();
  for (const auto& [t, name] : {std::pair{&in, "in"}, std::pair{&out, "out"}}) {
    validate::check_defined(*t, name);
    validate::check_dtype_any(*t, name, {DType::ue4m3, DType::u8});
    validate::check_contiguous(*t, name);
    validate::check_device(*t, name, device);
  }
  if (out.ndim < 2) throw_invalid("out", "must be [rows, cols] or [experts, rows, cols]");
  const std::int64_t rows = out.size(-2), cols = out.size(-1);
  const std::int64_t mats = out.numel() / (rows * cols);
  const std::int64_t per =
      from == ScaleLayout::row_major ? rows * cols : formats::swizzled_128x4_size(rows, cols);
  if (in.nbytes() != static_cast<std::size_t>(mats * per)) {
    throw_invalid("in",
                  "must hold " + std::to_string(mats * per) + " bytes for out's shape " +
                      out.shape_string() + " in the given layout",
                  std::to_string(in.nbytes()));
  }
  MEGAMOE_CU(cuda::driver().cuStreamSynchronize(static_cast<CUstream>(stream)));
  const std::vector<std::uint8_t> all = download(in);
  std::vector<std::uint8_t> result(static_cast<std::size_t>(mats * rows * cols));
  for (std::int64_t e = 0; e < mats; ++e) {
    const std::vector<std::uint8_t> m = row_major_scales(all, from, e, rows, cols);
    std::copy(m.begin(), m.end(), result.begin() + e * rows * cols);
  }
  upload(out, result);
}

}  // namespace megamoe
