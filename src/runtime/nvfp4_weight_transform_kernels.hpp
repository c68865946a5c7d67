#pragma once
// The load-time layout kernels of the NVFP4 weights as the transform, the kernel registry and
// the tests see them: kernels/megamoe/impls/sm90_nvfp4_weight_transform.cuh (checkpoint ->
// kernel layout) and sm90_ue4m3_scale_unswizzle.cuh (128x4-swizzled scales -> row-major). Both
// take their shapes at run time, so one build serves every configuration.
#include <vector>

#include "jit/compiler.hpp"
#include "megamoe/config.hpp"

namespace megamoe::runtime {

jit::KernelRequest nvfp4_weight_transform_request();
jit::KernelRequest ue4m3_scale_unswizzle_request();

// Registry family "nvfp4_weight_transform": both requests for NVFP4 weights, else none.
std::vector<jit::KernelRequest> nvfp4_weight_transform_kernels(const MoEConfig& config);

}  // namespace megamoe::runtime
