#pragma once
// Inline bit-exact codecs shared by the scalar API and the block quantizers. Everything here is
// plain fp32 arithmetic in the default rounding mode (round to nearest even) plus integer bit
// manipulation, so the same steps are reproducible in CUDA without fast-math (docs/formats.md).
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "megamoe/error.hpp"

namespace megamoe::formats::detail {

inline std::uint32_t bits_of(float x) {
  return std::bit_cast<std::uint32_t>(x);
}
inline float float_of(std::uint32_t u) {
  return std::bit_cast<float>(u);
}

// |x| when x is finite, 0 otherwise: amax reductions skip NaN and +-Inf so that one non-finite
// input cannot move the scale of its block, row or tensor.
inline float finite_abs(float x) {
  const float a = std::fabs(x);
  return a <= FLT_MAX ? a : 0.0f;
}

// 2^e for e in [-149, 127], built from bits so it is exact (subnormal results included).
inline float exp2_exact(int e) {
  if (e >= -126) return float_of(static_cast<std::uint32_t>(e + 127) << 23);
  return float_of(1u << (e + 149));
}

// e2m1 nibble, RNE, saturating at +-6; NaN -> +6 (0x7) like cvt.rn.satfinite.e2m1x2.f32.
// The magnitude code counts the RNE decision thresholds it passes: ties (0.25, 0.75, 1.25,
// 1.75, 2.5, 3.5, 5) go to the even code, hence the alternating > and >=.
inline std::uint8_t e2m1_code(float x) {
  const std::uint32_t u = bits_of(x);
  const float a = float_of(u & 0x7FFFFFFFu);
  if (a != a) return 0x7;
  const int mag = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                  (a >= 3.5f) + (a > 5.0f);
  return static_cast<std::uint8_t>(((u >> 28) & 0x8u) | static_cast<std::uint32_t>(mag));
}

// e4m3fn byte, RNE, saturating at +-448 (Inf included); NaN -> 0x7F like
// cvt.rn.satfinite.e4m3x2.f32. Zeros and underflows keep their sign.
inline std::uint8_t e4m3_code(float x) {
  const std::uint32_t u = bits_of(x);
  const std::uint32_t sign = (u >> 24) & 0x80u;
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;
  if (a >= 0x43E00000u) return static_cast<std::uint8_t>(sign | 0x7Eu);  // >= 448
  if (a >= 0x3C800000u) {                                                // >= 2^-6: normal
    // Round the 23-bit mantissa to 3 bits (ties to even); a carry moves into the exponent.
    const std::uint32_t r = (a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
    return static_cast<std::uint8_t>(sign | (r - (120u << 3)));  // rebias 127 -> 7
  }
  // Subnormal range: adding 2^14 leaves an ulp of 2^-9, so the fp32 add itself rounds |x| to a
  // multiple of 2^-9 (RNE); the bit difference is that multiple. 8 * 2^-9 encodes as 2^-6.
  const float y = float_of(a) + 16384.0f;
  return static_cast<std::uint8_t>(sign | (bits_of(y) - 0x46800000u));
}

// Smallest power of two 2^(s-127) >= x; x <= 2^-127 (zero, negatives) -> 0; x > 2^127 (Inf
// included) saturates at 0xFE = 2^127; NaN -> 0xFF.
inline std::uint8_t ue8m0_ceil_code(float x) {
  const std::uint32_t u = bits_of(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0xFF;
  if (x <= 0x1p-127f) return 0;
  if (x > 0x1p127f) return 0xFE;
  // Normal x: exponent field, plus one unless x is already a power of two. Subnormal x in
  // (2^-127, 2^-126): exponent field 0, mantissa not a power of two -> 2^-126 (code 1).
  const std::uint32_t exp_field = u >> 23;
  const std::uint32_t mant = u & 0x7FFFFFu;
  if (exp_field == 0) return 1;
  return static_cast<std::uint8_t>(exp_field + (mant != 0 ? 1u : 0u));
}

// 2^(s-127) for s in [0, 254]; 0xFF decodes as NaN.
inline float ue8m0_value(std::uint8_t s) {
  if (s == 0xFF) return NAN;
  return exp2_exact(static_cast<int>(s) - 127);
}

// 2^(127-s) for s in [1, 254]: the exact reciprocal, so x * it equals x / 2^(s-127) bit for bit.
inline float ue8m0_reciprocal(std::uint8_t s) {
  return exp2_exact(127 - static_cast<int>(s));
}

// Decode tables (built once; the domains are 16 and 256 codes).
const float* e2m1_table();  // [16]
const float* e4m3_table();  // [256]

inline std::string to_str(std::int64_t v) {
  return std::to_string(v);
}

// Shared argument checks for the block quantizers.
void check_matrix(std::int64_t rows, std::int64_t k, int block, const char* k_name);
void check_size(const char* name, std::size_t have, std::int64_t need);

// Runs fn(row_begin, row_end) over [0, rows), split over hardware threads when the matrix is
// large enough to pay for them. fn must only touch its own rows.
template <typename Fn>
void parallel_rows(std::int64_t rows, std::int64_t work_per_row, Fn&& fn) {
  constexpr std::int64_t kMinWorkPerThread = std::int64_t{1} << 20;  // elements
  const std::int64_t total = rows * work_per_row;
  const auto hw = static_cast<std::int64_t>(std::thread::hardware_concurrency());
  const std::int64_t threads =
      std::min({hw > 0 ? hw : 1, rows, std::max<std::int64_t>(1, total / kMinWorkPerThread)});
  if (threads <= 1) {
    fn(std::int64_t{0}, rows);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));
  const std::int64_t chunk = (rows + threads - 1) / threads;
  for (std::int64_t t = 1; t < threads; ++t) {
    const std::int64_t begin = std::min(rows, t * chunk);
    const std::int64_t end = std::min(rows, begin + chunk);
    if (begin < end) pool.emplace_back([&fn, begin, end] { fn(begin, end); });
  }
  fn(std::int64_t{0}, std::min(rows, chunk));
  for (auto& th : pool) th.join();
}

}  // namespace megamoe::formats::detail
