#pragma once
// Quantize-then-dequantize of one activation row by the activation format: what pre-dispatch
// does to x and what the kernel does to the FC2 input (docs/reference.md, steps 1 and 5).
#include <cstdint>

#include "megamoe/types.hpp"

namespace megamoe::reference::detail {

// Writes the dequantized row to out[n] WITHOUT the nvfp4 global scale and returns the factor the
// kernel applies after accumulation (the nvfp4 global scale; 1 for other formats).
// nvfp4_global > 0: use that global scale (per-expert FC2 input); 0: the row's own
// nvfp4_global_scale(amax) (per-token activations). bf16 rounds to bf16.
float quantize_row(Format format, Fp8ScaleKind fp8_scale, const float* in, std::int64_t n,
                   float nvfp4_global, float* out);

}  // namespace megamoe::reference::detail
