#pragma once
// Host stand-in for kernels/megamoe/common.cuh, so that CPU tests can compile the device codec
// headers (kernels/megamoe/formats/*.cuh) and check them against the CPU formats bit for bit.
// Tests include a codec header by its path from the test (kernels/ is not on their include path)
// and the header's own `#include "megamoe/common.cuh"` lands here (tests/support is). Each
// intrinsic is modelled exactly (IEEE binary32/64 on x86-64 SSE, no contraction).
#include <bit>
#include <cmath>
#include <cstdint>

#define MEGAMOE_DEVICE inline

namespace megamoe::device {

using u8 = unsigned char;
using u16 = unsigned short;
using u32 = unsigned int;
using u64 = unsigned long long;
using i32 = int;
using i64 = long long;

}  // namespace megamoe::device

inline float __uint_as_float(unsigned int u) {
  return std::bit_cast<float>(u);
}
inline unsigned int __float_as_uint(float f) {
  return std::bit_cast<unsigned int>(f);
}
inline double __longlong_as_double(long long v) {
  return std::bit_cast<double>(v);
}
inline long long __double_as_longlong(double d) {
  return std::bit_cast<long long>(d);
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fmaf_rn(float a, float b, float c) {
  return std::fma(a, b, c);
}
inline double __dmul_rn(double a, double b) {
  return a * b;
}

// The smallest float >= the exact value s + err (|err| <= ulp(s) / 2, a two-sum remainder).
inline float host_round_up_to_float(double s, double err) {
  float f = static_cast<float>(s);
  const double back = static_cast<double>(f);
  if (back < s || (back == s && err > 0.0)) f = std::nextafter(f, INFINITY);
  return f;
}

inline float __double2float_ru(double d) {
  return host_round_up_to_float(d, 0.0);
}

// a * b + c rounded up once. a * b is exact in binary64; the two-sum keeps the addition exact.
inline float __fmaf_ru(float a, float b, float c) {
  const double p = static_cast<double>(a) * static_cast<double>(b);
  const double cd = static_cast<double>(c);
  const double s = p + cd;
  const double bb = s - p;
  const double err = (p - (s - bb)) + (cd - bb);
  return host_round_up_to_float(s, err);
}

inline unsigned int __vmaxs2(unsigned int a, unsigned int b) {
  unsigned int out = 0;
  for (int lane = 0; lane < 2; ++lane) {
    const auto x = static_cast<std::int16_t>(a >> (16 * lane));
    const auto y = static_cast<std::int16_t>(b >> (16 * lane));
    out |= static_cast<unsigned int>(static_cast<std::uint16_t>(x > y ? x : y)) << (16 * lane);
  }
  return out;
}

// Byte n of the result is byte s[4n+2 : 4n] of the 8 bytes {y : x} (x the low word).
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
  const std::uint64_t bytes = (static_cast<std::uint64_t>(y) << 32) | x;
  unsigned int out = 0;
  for (int n = 0; n < 4; ++n) {
    const unsigned int sel = (s >> (4 * n)) & 7u;
    out |= static_cast<unsigned int>((bytes >> (8 * sel)) & 0xFFu) << (8 * n);
  }
  return out;
}
