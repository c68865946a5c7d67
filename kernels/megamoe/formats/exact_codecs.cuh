#pragma once
// Device mirror of the CPU codecs and recipe steps (src/core/formats/codec_detail.hpp,
// recipe_detail.hpp; docs/formats.md). Bit for bit: every fp32 step is one explicitly rounded
// intrinsic (__fmul_rn / __fdiv_rn / __fadd_rn) so that neither FMA contraction nor an
// approximate division can change a result, and the encoders are the same integer recipes as on
// the CPU rather than the hardware conversions (whose NaN bytes differ).
#include "megamoe/common.cuh"
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "megamoe/ptx/mma_sm90.cuh"  // e4m3x2_to_f16x2; a CPU test compiles this header without it
#endif

// `#pragma unroll` for the device compilers; nothing when a CPU test compiles this header.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define MEGAMOE_CODEC_UNROLL _Pragma("unroll")
#else
#define MEGAMOE_CODEC_UNROLL
#endif

namespace megamoe::device::exact {

inline constexpr float kFltMin = 1.17549435e-38f;  // FLT_MIN (no <cfloat> under NVRTC)
inline constexpr float kFltMax = 3.40282347e+38f;  // FLT_MAX

// |x| for finite x, 0 for NaN and +-Inf: amax reductions skip non-finite values.
MEGAMOE_DEVICE float finite_abs(float x) {
  const float a = __uint_as_float(__float_as_uint(x) & 0x7FFFFFFFu);
  return a <= kFltMax ? a : 0.0f;
}

// Max of two values that finite_abs produced (never NaN, never negative).
MEGAMOE_DEVICE float amax2(float a, float b) {
  return a > b ? a : b;
}

// Running max of the finite |values| of two packed bf16, kept as two 15-bit magnitudes (the
// bits of |bf16| order like the values, so this is the CPU's finite_abs_max). Non-finite lanes
// (|bits| >= 0x7F80) get bit 15 set, become negative as s16, and lose to acc >= 0.
MEGAMOE_DEVICE u32 bf16x2_finite_amax(u32 acc, u32 packed) {
  const u32 a = packed & 0x7FFF7FFFu;
  const u32 masked = a | ((a + 0x00800080u) & 0x80008000u);  // no carry crosses a lane
  return __vmaxs2(acc, masked);
}

// The float value of the larger lane of a bf16x2_finite_amax accumulator.
MEGAMOE_DEVICE float bf16x2_amax_value(u32 acc) {
  const u32 lo = acc & 0xFFFFu, hi = acc >> 16;
  return __uint_as_float((lo > hi ? lo : hi) << 16);
}

// 2^e for e in [-149, 127], from bits (subnormal results included).
MEGAMOE_DEVICE float exp2_exact(int e) {
  if (e >= -126) return __uint_as_float(static_cast<u32>(e + 127) << 23);
  return __uint_as_float(1u << (e + 149));
}

// Number of the sorted bounds b[0..6] that a is >= (a binary search: 3 compares, no branch).
MEGAMOE_DEVICE u32 count_bounds(u32 a, u32 b0, u32 b1, u32 b2, u32 b3, u32 b4, u32 b5, u32 b6) {
  const bool hi = a >= b3;
  const bool mid = a >= (hi ? b5 : b1);
  const u32 last = hi ? (mid ? b6 : b4) : (mid ? b2 : b0);
  return (hi ? 4u : 0u) + (mid ? 2u : 0u) + (a >= last ? 1u : 0u);
}

// Sign nibble bit of x, except for NaN, which encodes as +6 whatever its sign.
MEGAMOE_DEVICE u32 e2m1_sign(u32 u) {
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? 0u : (u >> 28) & 0x8u;
}

// e2m1 nibble, RNE, saturating at +-6, NaN -> 0x7. The decision thresholds 0.25, 0.75, ... 5 are
// compared on the bits of |x|, which order like the values for non-NaN, non-negative floats;
// ties go to the even code, so the thresholds 0.25, 1.25, 2.5 and 5 must be exceeded (bits + 1)
// and 0.75, 1.75 and 3.5 only reached. NaN bits exceed every bound, hence magnitude 7.
MEGAMOE_DEVICE u32 e2m1_code(float x) {
  const u32 u = __float_as_uint(x);
  const u32 a = u & 0x7FFFFFFFu;
  return e2m1_sign(u) | count_bounds(a, 0x3E800001u, 0x3F400000u, 0x3FA00001u, 0x3FE00000u,
                                     0x40200001u, 0x40600000u, 0x40A00001u);
}

// e4m3fn byte, RNE, saturating at +-448 (Inf included), NaN -> 0x7F, signed zeros kept.
MEGAMOE_DEVICE u32 e4m3_code(float x) {
  const u32 u = __float_as_uint(x);
  const u32 sign = (u >> 24) & 0x80u;
  const u32 a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7Fu;
  if (a >= 0x43E00000u) return sign | 0x7Eu;
  if (a >= 0x3C800000u) {
    const u32 r = (a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
    return sign | (r - (120u << 3));
  }
  // |x| < 2^-6: adding 2^14 rounds |x| to a multiple of 2^-9 (RNE) in one fp32 addition.
  const float y = __fadd_rn(__uint_as_float(a), 16384.0f);
  return sign | (__float_as_uint(y) - 0x46800000u);
}

// Value of an e4m3 code with sign 0 in [0, 0x7E] (a UE4M3 scale).
MEGAMOE_DEVICE float ue4m3_value(u32 c) {
  const u32 e = (c >> 3) & 0xFu;
  const u32 m = c & 7u;
  if (e == 0) return __fmul_rn(static_cast<float>(m), 0x1p-9f);  // exact
  return __uint_as_float(((e + 120u) << 23) | (m << 20));
}

// Value of any finite e4m3 code (sign bit 7).
MEGAMOE_DEVICE float e4m3_value(u32 c) {
  const float v = ue4m3_value(c & 0x7Fu);
  return (c & 0x80u) ? -v : v;
}

// Values of the two e4m3 codes in the low 16 bits of `codes` (byte 0 -> lo, byte 1 -> hi), as the
// CPU's e4m3 table has them: every code exact (the hardware conversion to f16 is exact for all of
// e4m3), 0x7F and 0xFF NaN.
MEGAMOE_DEVICE void e4m3x2_values(u32 codes, float& lo, float& hi) {
#ifdef __CUDA_ARCH__
  const u32 halves = ptx::e4m3x2_to_f16x2(codes);
  asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"(static_cast<u16>(halves & 0xFFFFu)));
  asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"(static_cast<u16>(halves >> 16)));
#else
  auto value = [](u32 c) {
    return (c & 0x7Fu) == 0x7Fu ? __uint_as_float(0x7FC00000u) : e4m3_value(c);
  };
  lo = value(codes & 0xFFu);
  hi = value((codes >> 8) & 0xFFu);
#endif
}

// Smallest power of two 2^(s-127) >= x (see ue8m0_ceil_code on the CPU).
MEGAMOE_DEVICE u32 ue8m0_ceil_code(float x) {
  const u32 u = __float_as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0xFFu;
  if (x <= 0x1p-127f) return 0u;
  if (x > 0x1p127f) return 0xFEu;
  const u32 exp_field = u >> 23;
  if (exp_field == 0) return 1u;
  return exp_field + ((u & 0x7FFFFFu) != 0 ? 1u : 0u);
}

// 2^(127-s): multiplying by it equals dividing by 2^(s-127) exactly.
MEGAMOE_DEVICE float ue8m0_reciprocal(u32 s) {
  return exp2_exact(127 - static_cast<int>(s));
}

// ---- recipe steps ----------------------------------------------------------------------------

// NVFP4 global scale from the token's amax: amax / 2688, or 1 when that is not a normal float.
MEGAMOE_DEVICE float nvfp4_global_from_amax(float amax) {
  const float g = __fdiv_rn(amax, 2688.0f);
  return g >= kFltMin ? g : 1.0f;
}

// UE4M3 code of e4m3(block_amax / (g * 6)), 0 raised to 1 (2^-9).
MEGAMOE_DEVICE u32 nvfp4_block_code(float block_amax, float g) {
  const float denom = __fmul_rn(g, 6.0f);
  const u32 c = e4m3_code(__fdiv_rn(block_amax, denom));
  return c == 0 ? 1u : c;
}

// Smallest power of two >= max(block_amax, 1e-4) / fmt_max, as a UE8M0 code.
MEGAMOE_DEVICE u32 pow2_block_code(float block_amax, float fmt_max) {
  const float t = __fdiv_rn(block_amax > 1e-4f ? block_amax : 1e-4f, fmt_max);
  return ue8m0_ceil_code(t);
}

// FP8 fp32 block scale: block_amax / 448, 1 when that is 0.
MEGAMOE_DEVICE float fp8_f32_scale(float block_amax) {
  const float s = __fdiv_rn(block_amax, 448.0f);
  return s > 0.0f ? s : 1.0f;
}

}  // namespace megamoe::device::exact

namespace megamoe::device::exact {

// e2m1_code(x / d) for one divisor d > 0 and many x, without a division per element.
//
// RN(|x| / d) passes the e2m1 decision threshold t (0.25, 0.75, ... 5) exactly when |x| / d
// passes the fp32 rounding boundary next to t: t + ulp/2 for the strict thresholds, t - ulp/2 for
// the inclusive ones (each t has a zero last mantissa bit, so ties round onto t). That boundary
// times d has at most 25 + 24 bits, so it is exact in fp64, and the test on |x| becomes an
// integer comparison of its bits with the smallest float above (strict) or at (inclusive) the
// product. Equal to e2m1_code(__fdiv_rn(x, d)) for every x, NaN and Inf included.
struct E2m1Divider {
  u32 bound[7];  // |x| bits >= bound[k] <=> RN(|x| / d) is past threshold k

  MEGAMOE_DEVICE explicit E2m1Divider(float d) {
    const double dd = static_cast<double>(d);
    // {boundary, strict}: strict boundaries need the first float strictly above the product.
    constexpr double kBoundary[7] = {0.25 + 0x1p-26, 0.75 - 0x1p-25, 1.25 + 0x1p-24, 1.75 - 0x1p-24,
                                     2.5 + 0x1p-23,  3.5 - 0x1p-23,  5.0 + 0x1p-22};
    MEGAMOE_CODEC_UNROLL
    for (int k = 0; k < 7; ++k) {
      double p = __dmul_rn(kBoundary[k], dd);  // exact
      if ((k & 1) == 0) {
        // The next double up: every float > p is >= it, and rounding it up gives the first.
        p = __longlong_as_double(__double_as_longlong(p) + 1);
      }
      bound[k] = __float_as_uint(__double2float_ru(p));
    }
  }

  MEGAMOE_DEVICE u32 code(float x) const {
    const u32 u = __float_as_uint(x);
    return e2m1_sign(u) | count_bounds(u & 0x7FFFFFFFu, bound[0], bound[1], bound[2], bound[3],
                                       bound[4], bound[5], bound[6]);
  }
};

}  // namespace megamoe::device::exact

namespace megamoe::device::exact {

// 0xFFFF in each 16-bit lane of d whose bit 15 is set, 0 elsewhere (prmt sign replication).
MEGAMOE_DEVICE u32 lane_sign_mask(u32 d) {
#ifdef __CUDA_ARCH__
  u32 m;
  asm("prmt.b32 %0, %1, 0, 0xBB99;" : "=r"(m) : "r"(d));
  return m;
#else  // host builds of this header (the exhaustive codec checks)
  return ((d >> 15) & 0x00010001u) * 0xFFFFu;
#endif
}

// E2m1Divider for bf16 inputs, two per 32-bit word: the 7 decision bounds as 15-bit |bf16|
// magnitudes (|x| >= bound <=> |x| bits >= bound / 2^16 rounded up, because a bf16's low 16 bits
// are zero), replicated into both 16-bit lanes. A lane biased by 0x8000 minus a bound never
// borrows from its neighbour and keeps "|x| >= bound" in its bit 15, so one 32-bit subtraction
// compares two elements; the binary search of count_bounds then runs on both lanes at once.
struct E2m1Bf16x2Encoder {
  u32 bound[7];

  // Bounds filled by the caller (e2m1_bf16x2_bounds_fp32, e2m1_bf16x2_bounds_pow2).
  E2m1Bf16x2Encoder() = default;

  MEGAMOE_DEVICE explicit E2m1Bf16x2Encoder(const E2m1Divider& d) {
    MEGAMOE_CODEC_UNROLL
    for (int k = 0; k < 7; ++k) bound[k] = ((d.bound[k] + 0xFFFFu) >> 16) * 0x00010001u;
  }

  // The e2m1 codes of the two bf16 in `pair`, element 0 in bits 0-3, element 1 in bits 16-19.
  MEGAMOE_DEVICE u32 codes(u32 pair) const {
    const u32 x = (pair & 0x7FFF7FFFu) | 0x80008000u;  // |bf16| + 0x8000 per lane
    const u32 hi = lane_sign_mask(x - bound[3]);       // >= threshold 3
    const u32 mid = lane_sign_mask(x - ((bound[5] & hi) | (bound[1] & ~hi)));
    const u32 low_bound = (((bound[6] & mid) | (bound[4] & ~mid)) & hi) |
                          (((bound[2] & mid) | (bound[0] & ~mid)) & ~hi);
    const u32 low = (x - low_bound) >> 15;  // bit 0 and bit 16
    const u32 mag = (hi & 0x00040004u) | (mid & 0x00020002u) | (low & 0x00010001u);
    // Sign into bit 3, except for NaN (|bits| > 0x7F80), which the CPU encodes as +6.
    const u32 not_nan = ~(x - 0x7F817F81u);  // bit 15 set <=> |bf16| <= 0x7F80
    const u32 sign = (pair & not_nan & 0x80008000u) >> 12;
    return mag | sign;
  }

  // Eight codes of four pairs as one word, element 2i in the low nibble of byte i.
  MEGAMOE_DEVICE u32 pack(const u32* pairs) const {
    u32 bytes[4];
    MEGAMOE_CODEC_UNROLL
    for (int i = 0; i < 4; ++i) {
      const u32 c = codes(pairs[i]);
      bytes[i] = c | (c >> 12);  // element 1 into bits 4-7
    }
    return __byte_perm(__byte_perm(bytes[0], bytes[1], 0x0040),
                       __byte_perm(bytes[2], bytes[3], 0x0040), 0x5410);
  }

  // codes(), placed where fewer integer operations put them: element 0's code in bits 12-15,
  // element 1's in bits 28-31, the other bits undefined. The search masks fill whole lanes, so
  // bits 14 and 13 come straight from them; the last comparison's bit 15 is shifted to 12; the
  // sign (cleared for NaN) keeps its place.
  MEGAMOE_DEVICE u32 codes_high(u32 pair) const {
    const u32 x = pair | 0x80008000u;  // |bf16| + 0x8000 per lane
    const u32 hi = lane_sign_mask(x - bound[3]);
    const u32 mid = lane_sign_mask(x - ((bound[5] & hi) | (bound[1] & ~hi)));
    const u32 low_bound = (((bound[6] & mid) | (bound[4] & ~mid)) & hi) |
                          (((bound[2] & mid) | (bound[0] & ~mid)) & ~hi);
    const u32 low = x - low_bound;
    const u32 t = (hi & 0x40004000u) | (mid & ~0x40004000u);
    const u32 u = (t & 0x60006000u) | ((low >> 3) & ~0x60006000u);
    const u32 not_nan = ~(x - 0x7F817F81u);  // bit 15 set <=> |bf16| <= 0x7F80
    return (u & ~0x80008000u) | (pair & not_nan & 0x80008000u);
  }

  // pack() from codes_high: the high nibbles of bytes 1 and 3 of the four words are gathered
  // with byte permutes and merged with one shift.
  MEGAMOE_DEVICE u32 pack_high(const u32* pairs) const {
    const u32 w0 = codes_high(pairs[0]), w1 = codes_high(pairs[1]);
    const u32 w2 = codes_high(pairs[2]), w3 = codes_high(pairs[3]);
    const u32 p01 = __byte_perm(w0, w1, 0x7351), p23 = __byte_perm(w2, w3, 0x7351);
    const u32 even = __byte_perm(p01, p23, 0x5410);  // byte i: element 2i in the high nibble
    const u32 odd = __byte_perm(p01, p23, 0x7632);   // byte i: element 2i + 1 in the high nibble
    return ((even >> 4) & 0x0F0F0F0Fu) | (odd & 0xF0F0F0F0u);
  }
};

}  // namespace megamoe::device::exact

namespace megamoe::device::exact {

// The smallest unit for which e2m1_bf16x2_bounds_fp32 is exact (see there).
inline constexpr float kE2m1Fp32BoundsMinUnit = 0x1p-100f;

// The E2m1Bf16x2Encoder bounds of E2m1Encoder(E2m1Divider(d)) from fp32 arithmetic alone, for a
// normal d >= 2^-100 (the fp64 divider costs 7 fp64 products and conversions per block).
//
// Each rounding boundary is t + e with t in {0.25, 0.75, ...} and e = +-ulp/2 a power of two, so
// its product with d is t * d + (e * d): e * d is exact for d >= 2^-100 (its lowest bit stays >=
// 2^-149), and one fused multiply-add rounded up gives the smallest float >= the exact product.
// That product is never a float (an odd 25-bit significand times an odd one needs > 24 bits,
// and it is >= 2^-102, a normal number), so "smallest float >=" is also "smallest float >" for
// the strict boundaries. Rounding that float up to a bf16 magnitude is then the bound; an
// overflow gives +Inf (0x7F80), as the fp64 path does.
MEGAMOE_DEVICE void e2m1_bf16x2_bounds_fp32(float d, u32 (&bound)[7]) {
  // e * d for |e| = 2^-26 ... 2^-22 (five products; the sign is folded into the fma).
  const float e26 = __fmul_rn(0x1p-26f, d), e25 = __fmul_rn(0x1p-25f, d);
  const float e24 = __fmul_rn(0x1p-24f, d), e23 = __fmul_rn(0x1p-23f, d);
  const float e22 = __fmul_rn(0x1p-22f, d);
  const float p[7] = {__fmaf_ru(0.25f, d, e26), __fmaf_ru(0.75f, d, -e25),
                      __fmaf_ru(1.25f, d, e24), __fmaf_ru(1.75f, d, -e24),
                      __fmaf_ru(2.5f, d, e23),  __fmaf_ru(3.5f, d, -e23),
                      __fmaf_ru(5.0f, d, e22)};
  MEGAMOE_CODEC_UNROLL
  for (int k = 0; k < 7; ++k) {
    // Round up to a bf16 magnitude and copy it into both 16-bit lanes.
    bound[k] = __byte_perm(__float_as_uint(p[k]) + 0xFFFFu, 0u, 0x3232);
  }
}

// |bf16| maximum of 8 packed pairs (16 elements) as a 16-bit magnitude, NaN and Inf skipped
// (bf16x2_finite_amax in 2 operations per pair instead of 4): |bf16| + 0x80 stays inside its
// 16-bit lane, below 0x8000 for finite values (<= 0x7F7F) and at or above it (negative as s16)
// for the others, which then lose to the start value, the biased zero.
MEGAMOE_DEVICE u32 bf16x16_finite_amax(const u32* pairs) {
  u32 acc = 0x00800080u;
  MEGAMOE_CODEC_UNROLL
  for (int i = 0; i < 8; ++i) acc = __vmaxs2(acc, (pairs[i] & 0x7FFF7FFFu) + 0x00800080u);
  const u32 lo = acc & 0xFFFFu, hi = acc >> 16;
  return (lo > hi ? lo : hi) - 0x80u;
}

// The same bounds for d = 2^e, e in [-15, 126] (MXFP4: s - 127 for every s the recipe makes).
// Scaling by a power of two moves the rounded-up products by e binades, so each bound is its
// value at d = 1 plus e in the bf16 exponent field; only the last can pass +Inf (at e = 126),
// where it is clamped to 0x7F80 like the fp32 overflow.
MEGAMOE_DEVICE void e2m1_bf16x2_bounds_pow2(int e, u32 (&bound)[7]) {
  // ceil_bf16(RU_fp32(boundary)) at d = 1: the threshold itself for the inclusive ones, one
  // bf16 step above for the strict ones.
  constexpr u32 kAtOne[7] = {0x3E81u, 0x3F40u, 0x3FA1u, 0x3FE0u, 0x4021u, 0x4060u, 0x40A1u};
  const u32 shift = static_cast<u32>(e * 128);  // wraps for e < 0; the sums below stay >= 0
  MEGAMOE_CODEC_UNROLL
  for (int k = 0; k < 7; ++k) {
    u32 b = kAtOne[k] + shift;
    if (k == 6) b = b < 0x7F80u ? b : 0x7F80u;
    bound[k] = b * 0x00010001u;
  }
}

// UE4M3 code of e4m3(RN(block_amax / d)) with 0 raised to 1 (nvfp4_block_code with d = g * 6
// precomputed), from the hardware conversion: for finite r >= 0 it rounds to nearest even and
// saturates at 448 exactly like e4m3_code (the NaN byte, where they differ, cannot occur here).
MEGAMOE_DEVICE u32 nvfp4_block_code_hw(float block_amax, float d) {
  const float r = __fdiv_rn(block_amax, d);
#ifdef __CUDA_ARCH__
  u16 pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(r));
  const u32 c = pair & 0xFFu;
#else
  const u32 c = e4m3_code(r);
#endif
  return c == 0 ? 1u : c;
}

}  // namespace megamoe::device::exact
