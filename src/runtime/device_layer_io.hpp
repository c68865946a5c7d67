#pragma once
// One rank's layer inputs and output on the GPU, for tools and benchmarks (like device_memory.hpp):
// the bf16 tokens, the routes and route weights of a reference::MoEInputs uploaded, a [T, H] bf16
// output, and the views mega_moe_pre_dispatch and nvfp4_mega_moe take for rank 0.
#include <cstdint>
#include <vector>

#include "megamoe/nvfp4_mega_moe.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "megamoe/reference.hpp"
#include "runtime/device_memory.hpp"

namespace megamoe::runtime {

struct DeviceLayerIo {
  DeviceBuffer x, topk_idx, topk_weights, out;
  PreDispatchInputs pre_dispatch;
  Nvfp4MoEOutputs outputs;

  // `in` holds `tokens` tokens of `hidden` values with `top_k` routes each; `gpu` is the device
  // the views are tagged with (the current one).
  DeviceLayerIo(const reference::MoEInputs& in, std::int64_t tokens, std::int64_t hidden,
                std::int64_t top_k, Device gpu)
      : x(upload(reference::to_bf16_bits(in.x))),
        topk_idx(upload(in.topk_idx)),
        topk_weights(upload(in.topk_weights)),
        out(static_cast<std::size_t>(tokens * hidden * 2)) {
    pre_dispatch.x = TensorView::contiguous(x.as<void>(), DType::bf16, {tokens, hidden}, gpu);
    pre_dispatch.topk_idx =
        TensorView::contiguous(topk_idx.as<void>(), DType::i64, {tokens, top_k}, gpu);
    pre_dispatch.topk_weights =
        TensorView::contiguous(topk_weights.as<void>(), DType::f32, {tokens, top_k}, gpu);
    outputs = {0, TensorView::contiguous(out.as<void>(), DType::bf16, {tokens, hidden}, gpu)};
  }
};

}  // namespace megamoe::runtime
