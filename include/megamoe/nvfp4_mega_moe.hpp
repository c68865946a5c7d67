#pragma once
// NVFP4 x NVFP4 MegaMoE: the fused expert-parallel layer for inference (docs/design.md,
// "NVFP4 MegaMoE on SM90").
#include <cstdint>
#include <span>

#include "megamoe/buffer.hpp"
#include "megamoe/layer_outputs.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "megamoe/types.hpp"

namespace megamoe {

// Checkpoint layout of one rank's local experts (device tensors), as TensorRT-LLM / ModelOpt
// NVFP4 checkpoints store them.
struct Nvfp4CheckpointWeights {
  TensorView w13;              // e2m1x2 [E_local, 2I, H/2]  (gate rows, then up rows)
  TensorView w13_sf;           // ue4m3: [E_local, 2I, H/16] row-major, or swizzled 128x4 per expert
  TensorView w13_global;       // f32 [E_local] per-expert global scale
  TensorView w2;               // e2m1x2 [E_local, H, I/2]
  TensorView w2_sf;            // ue4m3: [E_local, H, I/16] row-major, or swizzled 128x4 per expert
  TensorView w2_global;        // f32 [E_local]
  TensorView fc2_input_scale;  // f32 [E_local] global scale of the re-quantized intermediate
  ScaleLayout sf_layout = ScaleLayout::row_major;
};

// Kernel layout (written by transform_weights_for_mega_moe; shapes from
// nvfp4_kernel_weight_bytes). Opaque to callers except for its sizes.
struct Nvfp4KernelWeights {
  TensorView w13;              // u8, nvfp4_kernel_weight_bytes().w13 bytes
  TensorView w13_sf;           // u8
  TensorView w2;               // u8
  TensorView w2_sf;            // u8
  TensorView fc1_alpha;        // f32 [E_local]: w13_global
  TensorView fc2_alpha;        // f32 [E_local]: w2_global
  TensorView fc2_input_scale;  // f32 [E_local]
};

struct Nvfp4KernelWeightBytes {
  std::size_t w13 = 0, w13_sf = 0, w2 = 0, w2_sf = 0;
};
Nvfp4KernelWeightBytes nvfp4_kernel_weight_bytes(const MoEConfig& config);

// Checkpoint layout -> kernel layout, once at load time: kernels and copies enqueued on `stream`
// (device to device, nothing on the host waits); `in` must stay valid until the stream has
// passed the call. Bad arguments throw before anything is enqueued.
void transform_weights_for_mega_moe(const MoEConfig& config, const Nvfp4CheckpointWeights& in,
                                    const Nvfp4KernelWeights& out, Stream stream);

// UE4M3 scales [rows, cols] in `from` layout -> the layout the kernel reads (device, enqueued on
// `stream` like the weight transform).
void transform_ue4m3_sf_into_required_layout(const TensorView& in, ScaleLayout from,
                                             const TensorView& out, Stream stream);

// The same record as every family's (layer_outputs.hpp); the name stays for existing callers.
using Nvfp4MoEOutputs = MoEOutputs;

// Runs the fused layer for every rank this process drives (all R with the local provider, one
// with NCCL). Inputs come from the last mega_moe_pre_dispatch on `buffer`. `weights` has one
// entry per driven rank, in the order of `outputs`. Ranks may pass different token counts
// (ragged batches; 0 = an idle rank, which must still call).
//
// max_tokens_across_ranks: the largest token count any rank passes in this call, where the
// caller knows it (data-parallel engines gather their ranks' batch sizes). BLOCK_M then comes
// from it on every rank instead of from the largest count among `outputs` (0, the default) --
// with one process per GPU that is the rank's own count, so a rank with few tokens would tile the
// routes its busy peers send it for its own count. In [that largest count, max_tokens_per_rank];
// every rank passes the same value (then each runs the tiles R virtual ranks would, bit for bit).
void nvfp4_mega_moe(const SymmBuffer& buffer, std::span<const Nvfp4KernelWeights> weights,
                    std::span<const Nvfp4MoEOutputs> outputs, Stream stream,
                    std::int64_t max_tokens_across_ranks = 0);

// Diagnostics: the token tile the last call on `buffer` ran where it had a tile choice on the
// device (get_device_choice_block_m_for_mega_moe), as rank `rank`'s first kernel recorded it; 0
// before any such call. Reads device memory synchronously: call it after the call's stream has
// finished. With the nccl provider ask for the process's own rank (every rank records the same).
int nvfp4_tile_choice_of_last_call(const SymmBuffer& buffer, int rank);

}  // namespace megamoe
