#pragma once
// The MegaMoE families beside NVFP4 (docs/design.md §1): FP8 x FP8, MXFP4 x {MXFP4, FP8, BF16}
// and BF16 x BF16. Same calling convention as nvfp4_mega_moe: plan and allocate the buffer for
// the family's MoEConfig, mega_moe_pre_dispatch the tokens, then one call runs every rank this
// process drives. Weights are per rank's local experts in the plain checkpoint layout (K-major,
// gate rows then up rows in W13); a family whose kernel wants another layout will add a one-time
// transform like transform_weights_for_mega_moe.
#include <span>

#include "megamoe/buffer.hpp"
#include "megamoe/layer_outputs.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "megamoe/types.hpp"

namespace megamoe {

// FP8 e4m3 weights with 128x128 block scales (f32, or ue8m0 when config.fp8_scale is ue8m0).
struct Fp8ExpertWeights {
  TensorView w13;     // e4m3 [E_local, 2I, H]
  TensorView w13_sf;  // f32 | ue8m0 [E_local, 2I/128, H/128]
  TensorView w2;      // e4m3 [E_local, H, I]
  TensorView w2_sf;   // f32 | ue8m0 [E_local, H/128, I/128]
};

// MXFP4 weights: e2m1 pairs with a UE8M0 scale per 32 along K.
struct Mxfp4ExpertWeights {
  TensorView w13;     // e2m1x2 (or u8) [E_local, 2I, H/2]
  TensorView w13_sf;  // ue8m0 (or u8) [E_local, 2I, H/32]
  TensorView w2;      // e2m1x2 (or u8) [E_local, H, I/2]
  TensorView w2_sf;   // ue8m0 (or u8) [E_local, H, I/32]
};

struct Bf16ExpertWeights {
  TensorView w13;  // bf16 [E_local, 2I, H]
  TensorView w2;   // bf16 [E_local, H, I]
};

// `weights` has one entry per driven rank, in the order of `outputs`. The buffer's config must
// name the family: fp8 x fp8; mxfp4 x {mxfp4, fp8, bf16}; bf16 x bf16.
void fp8_mega_moe(const SymmBuffer& buffer, std::span<const Fp8ExpertWeights> weights,
                  std::span<const MoEOutputs> outputs, Stream stream);
void mxfp4_mega_moe(const SymmBuffer& buffer, std::span<const Mxfp4ExpertWeights> weights,
                    std::span<const MoEOutputs> outputs, Stream stream);
void bf16_mega_moe(const SymmBuffer& buffer, std::span<const Bf16ExpertWeights> weights,
                   std::span<const MoEOutputs> outputs, Stream stream);

}  // namespace megamoe
