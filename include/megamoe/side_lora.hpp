#pragma once
// Side-LoRA MegaMoE: the training family (../shared/DESIGN.md §4). A frozen BF16 or MXFP4 base
// with rank-r BF16 adapters; A1, A3 [H, r] and B2 [r, H] are shared by every expert, B1, B3
// [E_local, r, I] and A2 [E_local, I, r] are per local expert:
//   g = x W1_e^T + s (x A1) B1_e,  u = x W3_e^T + s (x A3) B3_e,  a = w_tj act(g, u)
//   y = a W2_e^T + s (a A2_e) B2,  out_t = sum_j y_tj
// The buffer's config has side_lora = true, act_format bf16, weight_format bf16 or mxfp4, and
// lora_rank = r. Tokens reach the buffer through mega_moe_pre_dispatch as for the other
// families.
#include <cstddef>
#include <span>

#include "megamoe/buffer.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "megamoe/types.hpp"

namespace megamoe {

// The frozen base of one rank's local experts (plain checkpoint layout, as in mega_moe.hpp).
struct SideLoraBaseWeights {
  TensorView w13;     // bf16 [E_local, 2I, H], or e2m1x2 (or u8) [E_local, 2I, H/2] for mxfp4
  TensorView w13_sf;  // mxfp4 only: ue8m0 (or u8) [E_local, 2I, H/32]; empty for bf16
  TensorView w2;      // bf16 [E_local, H, I], or e2m1x2 (or u8) [E_local, H, I/2]
  TensorView w2_sf;   // mxfp4 only: ue8m0 (or u8) [E_local, H, I/32]; empty for bf16
};

struct SideLoraAdapters {
  TensorView a1;       // bf16 [H, r], shared
  TensorView a3;       // bf16 [H, r], shared; leave empty when tied_a13 (A3 = A1)
  TensorView b1;       // bf16 [E_local, r, I]
  TensorView b3;       // bf16 [E_local, r, I]
  TensorView a2;       // bf16 [E_local, I, r]
  TensorView b2;       // bf16 [r, H], shared
  float scale = 1.0f;  // s; s = 0 reproduces the base layer bit for bit; must be finite
  bool tied_a13 = false;
};

// What the forward keeps for the backward (allocated by the caller, written by the forward).
struct SideLoraSaved {
  TensorView x_a;   // f32 [T, 2r]: x A1 then x A3 per token ([T, r] when tied)
  TensorView z;     // f32 [T, r]: sum_j a_tj A2_ej, the rank-space input of the shared B2
  TensorView pool;  // u8, side_lora_saved_pool_bytes(plan): this forward's routes and FC1
                    // outputs in expert-pool order, so the backward needs no re-dispatch of x
};

// Sizes of the caller-allocated byte tensors (per rank).
std::size_t side_lora_saved_pool_bytes(const SymmBufferPlan& plan);
std::size_t side_lora_scratch_bytes(const SymmBufferPlan& plan);

struct SideLoraForwardArgs {
  int rank = 0;
  SideLoraBaseWeights base;
  SideLoraAdapters adapters;
  TensorView out;       // bf16 [T, H]
  SideLoraSaved saved;  // written
};

// Gradients of one rank. Shared factors (da1, da3, db2) hold this rank's partial sums: the
// caller reduces them across ranks like any data-parallel gradient. No base-weight gradients.
struct SideLoraGrads {
  TensorView dx;              // bf16 [T, H]
  TensorView d_topk_weights;  // f32 [T, K]
  TensorView da1;             // f32 [H, r] (receives dA1 + dA3 when tied)
  TensorView da3;             // f32 [H, r]; leave empty when tied
  TensorView db1;             // f32 [E_local, r, I]
  TensorView db3;             // f32 [E_local, r, I]
  TensorView da2;             // f32 [E_local, I, r]
  TensorView db2;             // f32 [r, H]
};

struct SideLoraBackwardArgs {
  int rank = 0;
  TensorView x;             // bf16 [T, H]: the forward's tokens
  TensorView topk_idx;      // i32 or i64 [T, K]: the forward's routing
  TensorView topk_weights;  // f32 [T, K]
  TensorView d_out;         // bf16 [T, H]
  SideLoraBaseWeights base;
  SideLoraAdapters adapters;
  SideLoraSaved saved;  // from the matching forward
  TensorView scratch;   // u8, at least side_lora_scratch_bytes(plan)
  SideLoraGrads grads;  // written
};

// One entry per driven rank. The forward reads the tokens of the last pre-dispatch.
void side_lora_mega_moe_forward(const SymmBuffer& buffer,
                                std::span<const SideLoraForwardArgs> ranks, Stream stream);
void side_lora_mega_moe_backward(const SymmBuffer& buffer,
                                 std::span<const SideLoraBackwardArgs> ranks, Stream stream);

}  // namespace megamoe
