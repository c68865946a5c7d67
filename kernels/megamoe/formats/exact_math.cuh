#pragma once
// The fp32 transcendental functions of the activations (sigmoid for SwiGLU, tanh for GELU) as one
// fixed sequence of exactly rounded operations, which the CPU reference repeats step for step
// (src/reference/activation.cpp, kernel precision; tests/cpu/test_exact_math.cpp checks the two
// bit for bit). CUDA's expf / tanhf and the host's std::exp / std::tanh are each within an ulp or
// two, but not of each other: an activation one ulp apart now and then moves an FC2 input across
// an NVFP4 rounding boundary, and the layer's output then differs from the oracle's (a seeded
// test case found one token off by 1e-3 relative L2, bench/NOTES.md, v11).
#include "megamoe/common.cuh"

namespace megamoe::device::exact {

// e^x to about an ulp. x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts: n * kLn2Hi is exact
// for |n| < 256), e^r by its Taylor polynomial to r^7 (truncation below 0.05 ulp) in fused
// multiply-adds, and 2^n applied as two power-of-two factors so that a result below FLT_MIN is
// rounded once, as a subnormal.
MEGAMOE_DEVICE float exp_fp32(float x) {
  if (x != x) return x;
  if (x > 89.0f) return __uint_as_float(0x7F800000u);
  if (x < -104.0f) return 0.0f;
  constexpr float kLog2e = 1.44269504f, kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860682e-6f;
  const float n = rintf(__fmul_rn(x, kLog2e));
  float r = __fmaf_rn(n, -kLn2Hi, x);
  r = __fmaf_rn(n, -kLn2Lo, r);
  float p = 1.98412698e-4f;             // 1 / 7!
  p = __fmaf_rn(p, r, 1.38888889e-3f);  // 1 / 6!
  p = __fmaf_rn(p, r, 8.33333333e-3f);  // 1 / 5!
  p = __fmaf_rn(p, r, 4.16666667e-2f);  // 1 / 4!
  p = __fmaf_rn(p, r, 1.66666667e-1f);  // 1 / 3!
  p = __fmaf_rn(p, r, 0.5f);
  p = __fmaf_rn(p, r, 1.0f);
  p = __fmaf_rn(p, r, 1.0f);
  const int k = static_cast<int>(n), k1 = k / 2, k2 = k - k1;  // |k1|, |k2| <= 75
  const float f1 = __uint_as_float(static_cast<u32>(k1 + 127) << 23);
  const float f2 = __uint_as_float(static_cast<u32>(k2 + 127) << 23);
  return __fmul_rn(__fmul_rn(p, f1), f2);
}

// 1 / (1 + e^-z).
MEGAMOE_DEVICE float sigmoid_fp32(float z) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_fp32(-z)));
}

// tanh u = 1 - 2 / (e^2u + 1): exact at large |u| (e^2u is inf or 0), within about an ulp of 1
// near 0 -- enough for GELU's 1 + tanh.
MEGAMOE_DEVICE float tanh_fp32(float u) {
  return __fadd_rn(1.0f, -__fdiv_rn(2.0f, __fadd_rn(exp_fp32(__fmul_rn(2.0f, u)), 1.0f)));
}

}  // namespace megamoe::device::exact
