// The launchers work on whichever GPU is current and check tensors against it: the whole NVFP4
// path (weight transform, pre-dispatch, nvfp4_mega_moe) on device 1 with tensors tagged cuda:1,
// bitwise equal to the same call on device 0; tensors tagged with another GPU are refused before
// anything is enqueued, and so is a buffer allocated on the other GPU. Needs two GPUs (skips,
// saying so, otherwise).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "megamoe/buffer.hpp"
#include "megamoe/error.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "megamoe/reference.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/device_select.hpp"
#include "runtime/nvfp4_kernel_weight_storage.hpp"

namespace megamoe {
namespace {

using runtime::DeviceBuffer;
using runtime::upload;

class DeviceIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::driver_available(&why)) GTEST_SKIP() << "no CUDA GPU: " << why;
    if (cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs (this machine has one)";
  }
  void TearDown() override {
    if (cuda::driver_available() && cuda::device_count() >= 2) cuda::select_device(0);
  }
};

MoEConfig small_config(std::int64_t tokens) {
  MoEConfig c;
  c.shape.hidden = 1024;
  c.shape.intermediate = 512;
  c.shape.num_experts = 16;
  c.shape.top_k = 4;
  c.weight_format = c.act_format = Format::nvfp4;
  c.max_tokens_per_rank = tokens;
  return c;
}

// The layer on the current GPU, every tensor tagged {cuda, device}; returns the output bits.
std::vector<std::uint16_t> run_layer(const MoEConfig& c, const reference::QuantizedWeights& w,
                                     const std::vector<float>& fc2_scale,
                                     const reference::MoEInputs& in, std::int64_t tokens,
                                     int device) {
  const Device gpu{DeviceKind::cuda, device};
  const std::int64_t h = c.shape.hidden;
  // The checkpoint views are tagged with the current GPU: `device`, selected by the caller.
  const runtime::Nvfp4CheckpointStorage ck{
      upload(w.w13.packed), upload(w.w13.scales), upload(w.w13.global_scales),
      upload(w.w2.packed),  upload(w.w2.scales),  upload(w.w2.global_scales),
      upload(fc2_scale)};
  const auto kernel = runtime::transform_into_storage(c, ck.view(c));

  const std::vector<std::uint16_t> xb = reference::to_bf16_bits(in.x);
  DeviceBuffer x = upload(std::span(xb)), ids = upload(std::span(in.topk_idx)),
               tw = upload(std::span(in.topk_weights));
  DeviceBuffer out(static_cast<std::size_t>(tokens * h * 2));
  out.fill_bytes(0xFF);  // bf16 NaN: an unwritten element cannot pass
  const SymmBuffer buffer = get_symm_buffer_for_mega_moe(c, "local");
  PreDispatchInputs pd;
  pd.x = TensorView::contiguous(x.as<void>(), DType::bf16, {tokens, h}, gpu);
  pd.topk_idx = TensorView::contiguous(ids.as<void>(), DType::i64, {tokens, c.shape.top_k}, gpu);
  pd.topk_weights = TensorView::contiguous(tw.as<void>(), DType::f32, {tokens, c.shape.top_k}, gpu);
  const Nvfp4MoEOutputs outputs{
      0, TensorView::contiguous(out.as<void>(), DType::bf16, {tokens, h}, gpu)};
  runtime::Stream stream;
  mega_moe_pre_dispatch(buffer, std::span<const PreDispatchInputs>(&pd, 1), stream.get());
  nvfp4_mega_moe(buffer, std::span<const Nvfp4KernelWeights>(&kernel->view, 1),
                 std::span<const Nvfp4MoEOutputs>(&outputs, 1), stream.get());
  stream.synchronize();
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(tokens * h));
  out.copy_to_host(std::as_writable_bytes(std::span(bits)));
  return bits;
}

TEST_F(DeviceIndex, LayerOnDeviceOneEqualsDeviceZero) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::int64_t tokens = 24;
  const MoEConfig c = small_config(tokens);
  const auto w = reference::random_weights(c, seed, reference::WeightInit::random_codes);
  const auto in = reference::random_inputs(c, tokens, {}, seed + 1);
  const std::vector<float> fc2 = reference::calibrate_fc2_input_scales(c, in, w);

  cuda::select_device(0);
  ASSERT_EQ(cuda::current_device(), 0);
  const std::vector<std::uint16_t> on0 = run_layer(c, w, fc2, in, tokens, 0);
  cuda::select_device(1);
  ASSERT_EQ(cuda::current_device(), 1);
  const std::vector<std::uint16_t> on1 = run_layer(c, w, fc2, in, tokens, 1);

  // Both against the oracle's bf16 output, then against each other bit for bit.
  reference::ForwardOptions fo;
  fo.fc2_input_scale = fc2;
  const std::vector<std::uint16_t> want = reference::moe_forward(c, in, w, fo).out_bf16;
  std::size_t differ = 0;
  for (std::size_t k = 0; k < want.size(); ++k) differ += on1[k] != want[k];
  EXPECT_EQ(differ, 0u) << "elements of device 1's output that differ from the oracle's bf16";
  EXPECT_EQ(on1, on0);
}

// Pre-dispatch inputs in fresh device memory, x tagged `x_gpu` and the routes `routes_gpu`: the
// call must be refused before any launch, naming `argument`, with `text` in the message.
void expect_pre_dispatch_refused(const SymmBuffer& buffer, std::int64_t tokens, Device x_gpu,
                                 Device routes_gpu, const std::string& argument,
                                 const std::string& text) {
  const MoEConfig& c = buffer.plan.config;
  DeviceBuffer x(static_cast<std::size_t>(tokens * c.shape.hidden * 2)),
      ids(static_cast<std::size_t>(tokens * c.shape.top_k * 8)),
      tw(static_cast<std::size_t>(tokens * c.shape.top_k * 4));
  PreDispatchInputs pd;
  pd.x = TensorView::contiguous(x.as<void>(), DType::bf16, {tokens, c.shape.hidden}, x_gpu);
  pd.topk_idx =
      TensorView::contiguous(ids.as<void>(), DType::i64, {tokens, c.shape.top_k}, routes_gpu);
  pd.topk_weights =
      TensorView::contiguous(tw.as<void>(), DType::f32, {tokens, c.shape.top_k}, routes_gpu);
  try {
    mega_moe_pre_dispatch(buffer, std::span<const PreDispatchInputs>(&pd, 1), nullptr);
    ADD_FAILURE() << "accepted; a refusal naming " << argument << " was expected";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.argument()), argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST_F(DeviceIndex, TensorsOfAnotherGpuAreRefused) {
  cuda::select_device(1);
  const SymmBuffer buffer = get_symm_buffer_for_mega_moe(small_config(8), "local");
  // A cuda:0 tensor while device 1 is current.
  expect_pre_dispatch_refused(buffer, 8, Device{DeviceKind::cuda, 0}, Device{DeviceKind::cuda, 1},
                              "inputs[0].x", "cuda:1");
}

TEST_F(DeviceIndex, BufferOfAnotherGpuIsRefused) {
  cuda::select_device(0);
  const SymmBuffer on0 = get_symm_buffer_for_mega_moe(small_config(8), "local");
  EXPECT_EQ(on0.device, 0);
  // A buffer of device 0 used with device 1 current and every tensor there.
  cuda::select_device(1);
  const Device gpu1{DeviceKind::cuda, 1};
  expect_pre_dispatch_refused(on0, 8, gpu1, gpu1, "buffer", "lives on cuda:0");
}

}  // namespace
}  // namespace megamoe
