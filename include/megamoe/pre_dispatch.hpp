#pragma once
// Activation pre-dispatch: bf16 tokens + routing -> the input region of the symmetric buffer,
// quantized to the configuration's activation format (docs/design.md, "Pre-dispatch").
#include <span>

#include "megamoe/buffer.hpp"
#include "megamoe/types.hpp"

namespace megamoe {

using Stream = void*;  // a cudaStream_t / CUstream; nullptr = the legacy default stream

// One rank's inputs (device tensors on the buffer's GPU).
struct PreDispatchInputs {
  int rank = 0;
  TensorView x;              // bf16 [T, H], row stride may exceed H (16-byte aligned rows)
  TensorView topk_idx;       // i32 or i64 [T, K]
  TensorView topk_weights;   // f32 [T, K]
  TensorView expert_scales;  // optional f32 [E]: folded into the route weights when given
};

// Quantizes and publishes every given rank's tokens. T <= config.max_tokens_per_rank; rows
// [T, T_max) are marked padding (id -1, weight 0). Out-of-range expert ids, and repeats of an
// expert id within one token's top-k after its first occurrence, are stored as -1 (weight 0)
// and counted in the rank's "error_count" region. No host synchronization; capturable in a CUDA
// graph; launched with programmatic dependent launch allowed.
void mega_moe_pre_dispatch(const SymmBuffer& buffer, std::span<const PreDispatchInputs> inputs,
                           Stream stream);

// Reads and clears the error counter of `rank` (synchronizes the stream). Returns the count.
std::uint32_t read_and_clear_dispatch_errors(const SymmBuffer& buffer, int rank, Stream stream);

}  // namespace megamoe
