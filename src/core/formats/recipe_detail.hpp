#pragma once
// Inline, unchecked recipe steps used in the quantizer loops. Each line is one IEEE fp32
// operation rounded to nearest even; a CUDA kernel reproduces it with __fmul_rn / __fdiv_rn
// (docs/formats.md, "Recipes").
#include <cfloat>
#include <cstdint>

#include "core/formats/codec_detail.hpp"

namespace megamoe::formats::detail {

void check_amax(const char* name, float amax);

inline void check_global_scale(const char* name, float g) {
  // Normal and finite, so scale * g can never underflow to 0 (scale >= 2^-9).
  if (!(g >= FLT_MIN && g <= FLT_MAX)) {
    throw_invalid(name, "a global scale must be a positive, normal, finite float",
                  std::to_string(g));
  }
}

// g = amax / 2688 (448 * 6, exact in fp32). Zero, or an amax so small that g would not be a
// normal float, gives g = 1: every element of such a tensor then quantizes to zero.
inline float nvfp4_global_from_amax(float amax) {
  const float g = amax / 2688.0f;
  return g >= FLT_MIN ? g : 1.0f;
}

// UE4M3 code of e4m3(block_amax / (g * 6)), clamped to [2^-9 (code 1), 448 (code 0x7E)].
inline std::uint8_t nvfp4_block_code(float block_amax, float g) {
  const float denom = g * 6.0f;
  const float r = block_amax / denom;
  const std::uint8_t c = e4m3_code(r);  // r >= 0, so c <= 0x7E
  return c == 0 ? std::uint8_t{1} : c;
}

// Smallest power of two >= max(block_amax, 1e-4) / fmt_max, as a UE8M0 code.
inline std::uint8_t pow2_block_code(float block_amax, float fmt_max) {
  const float t = (block_amax > 1e-4f ? block_amax : 1e-4f) / fmt_max;
  return ue8m0_ceil_code(t);
}

// block_amax / 448; 1 when that is 0 (an all-zero block, or an amax below 448 * 2^-150).
inline float fp8_f32_scale(float block_amax) {
  const float s = block_amax / 448.0f;
  return s > 0.0f ? s : 1.0f;
}

}  // namespace megamoe::formats::detail
