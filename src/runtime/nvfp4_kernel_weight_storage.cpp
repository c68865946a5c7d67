// transform_into_storage: kernel-layout NVFP4 weights in owned device memory.
#include "runtime/nvfp4_kernel_weight_storage.hpp"

#include <cstdint>

#include "runtime/cuda_driver.hpp"
#include "runtime/device_select.hpp"

namespace megamoe::runtime {

Nvfp4CheckpointWeights Nvfp4CheckpointStorage::view(const MoEConfig& config,
                                                    ScaleLayout layout) const {
  const Device gpu = cuda::current_gpu();
  const std::int64_t e = config.experts_per_rank(), h = config.shape.hidden,
                     i = config.shape.intermediate;
  const bool swizzled = layout == ScaleLayout::swizzled_128x4;
  auto pad = [&](std::int64_t v, std::int64_t m) { return swizzled ? (v + m - 1) / m * m : v; };
  Nvfp4CheckpointWeights in;
  in.w13 = TensorView::contiguous(w13.as<void>(), DType::e2m1x2, {e, 2 * i, h / 2}, gpu);
  in.w13_sf = TensorView::contiguous(w13_sf.as<void>(), DType::ue4m3,
                                     {e, pad(2 * i, 128), pad(h / 16, 4)}, gpu);
  in.w13_global = TensorView::contiguous(w13_global.as<void>(), DType::f32, {e}, gpu);
  in.w2 = TensorView::contiguous(w2.as<void>(), DType::e2m1x2, {e, h, i / 2}, gpu);
  in.w2_sf =
      TensorView::contiguous(w2_sf.as<void>(), DType::ue4m3, {e, pad(h, 128), pad(i / 16, 4)}, gpu);
  in.w2_global = TensorView::contiguous(w2_global.as<void>(), DType::f32, {e}, gpu);
  in.fc2_input_scale = TensorView::contiguous(fc2_input_scale.as<void>(), DType::f32, {e}, gpu);
  in.sf_layout = layout;
  return in;
}

std::unique_ptr<Nvfp4KernelWeightStorage> transform_into_storage(
    const MoEConfig& config, const Nvfp4CheckpointWeights& checkpoint) {
  const Device gpu = cuda::current_gpu();
  const std::int64_t experts = config.experts_per_rank();
  const Nvfp4KernelWeightBytes bytes = nvfp4_kernel_weight_bytes(config);
  auto s = std::make_unique<Nvfp4KernelWeightStorage>();
  s->w13 = DeviceBuffer(bytes.w13);
  s->w13_sf = DeviceBuffer(bytes.w13_sf);
  s->w2 = DeviceBuffer(bytes.w2);
  s->w2_sf = DeviceBuffer(bytes.w2_sf);
  const auto per_expert_bytes = static_cast<std::size_t>(experts) * 4;
  s->fc1_alpha = DeviceBuffer(per_expert_bytes);
  s->fc2_alpha = DeviceBuffer(per_expert_bytes);
  s->fc2_input_scale = DeviceBuffer(per_expert_bytes);
  const auto blob = [&](const DeviceBuffer& b) {
    return TensorView::contiguous(b.as<void>(), DType::u8, {static_cast<std::int64_t>(b.size())},
                                  gpu);
  };
  const auto per_expert = [&](const DeviceBuffer& b) {
    return TensorView::contiguous(b.as<void>(), DType::f32, {experts}, gpu);
  };
  s->view.w13 = blob(s->w13);
  s->view.w13_sf = blob(s->w13_sf);
  s->view.w2 = blob(s->w2);
  s->view.w2_sf = blob(s->w2_sf);
  s->view.fc1_alpha = per_expert(s->fc1_alpha);
  s->view.fc2_alpha = per_expert(s->fc2_alpha);
  s->view.fc2_input_scale = per_expert(s->fc2_input_scale);
  transform_weights_for_mega_moe(config, checkpoint, s->view, nullptr);
  MEGAMOE_CU(cuda::driver().cuCtxSynchronize());
  return s;
}

}  // namespace megamoe::runtime
