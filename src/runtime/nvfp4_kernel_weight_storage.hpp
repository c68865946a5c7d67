#pragma once
// One rank's NVFP4 weights in device memory the structs own, in the checkpoint layout (what
// transform_weights_for_mega_moe reads) and in the kernel layout (what it writes): where the demo,
// the EP rank driver and the GPU tests keep them.
#include <memory>

#include "megamoe/config.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"
#include "runtime/device_memory.hpp"

namespace megamoe::runtime {

// One rank's checkpoint-layout NVFP4 tensors in device memory the struct owns: what the demo, the
// EP rank driver and the GPU tests hand to transform_into_storage.
struct Nvfp4CheckpointStorage {
  DeviceBuffer w13, w13_sf, w13_global, w2, w2_sf, w2_global, fc2_input_scale;
  // Views with `config`'s local-expert shapes on the current GPU; scales in `layout` (swizzled:
  // the padded [E_l, round_up(rows, 128), round_up(cols, 4)] tiles).
  Nvfp4CheckpointWeights view(const MoEConfig& config,
                              ScaleLayout layout = ScaleLayout::row_major) const;
};

struct Nvfp4KernelWeightStorage {
  DeviceBuffer w13, w13_sf, w2, w2_sf;                 // kernel-layout blobs
  DeviceBuffer fc1_alpha, fc2_alpha, fc2_input_scale;  // f32 per local expert
  Nvfp4KernelWeights view;                             // views of the buffers above
};

// Allocates the storage for `config`'s local experts and transforms `checkpoint` into it on the
// current context; returns once the transform is complete, so the checkpoint's device memory may
// be released right after.
std::unique_ptr<Nvfp4KernelWeightStorage> transform_into_storage(
    const MoEConfig& config, const Nvfp4CheckpointWeights& checkpoint);

}  // namespace megamoe::runtime
