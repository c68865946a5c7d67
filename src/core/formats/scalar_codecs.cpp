// Scalar encode/decode of bf16, e2m1, e4m3fn, UE4M3 and UE8M0 (docs/formats.md, "Scalars").
#include <array>
#include <cmath>

#include "core/formats/codec_detail.hpp"
#include "megamoe/formats.hpp"

namespace megamoe::formats {
namespace detail {
namespace {

std::array<float, 16> build_e2m1_table() {
  constexpr std::array<float, 8> kMagnitudes = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::array<float, 16> t{};
  for (int c = 0; c < 16; ++c) {
    const float m = kMagnitudes[static_cast<std::size_t>(c & 7)];
    t[static_cast<std::size_t>(c)] = (c & 8) ? -m : m;
  }
  return t;
}

// e4m3fn: bias 7, 3 mantissa bits, no infinities; S.1111.111 is NaN, so the top finite
// magnitude is 1.75 * 2^8 = 448. Exponent field 0 holds the subnormals m * 2^-9.
std::array<float, 256> build_e4m3_table() {
  std::array<float, 256> t{};
  for (int b = 0; b < 256; ++b) {
    const int e = (b >> 3) & 0xF;
    const int m = b & 7;
    float v;
    if ((b & 0x7F) == 0x7F) {
      v = NAN;
    } else if (e == 0) {
      v = static_cast<float>(m) * exp2_exact(-9);
    } else {
      v = static_cast<float>(8 + m) * exp2_exact(e - 10);
    }
    t[static_cast<std::size_t>(b)] = (b & 0x80) ? -v : v;
  }
  return t;
}

}  // namespace

const float* e2m1_table() {
  static const std::array<float, 16> table = build_e2m1_table();
  return table.data();
}

const float* e4m3_table() {
  static const std::array<float, 256> table = build_e4m3_table();
  return table.data();
}

}  // namespace detail

std::uint16_t bf16_from_float(float x) {
  const std::uint32_t u = detail::bits_of(x);
  // Canonical quiet NaN, as cvt.rn.bf16.f32 writes it; the sign and payload are not kept.
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  // Ties to even on the 16 dropped bits; overflow rounds to Inf like the hardware conversion.
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float bf16_to_float(std::uint16_t b) {
  return detail::float_of(static_cast<std::uint32_t>(b) << 16);
}

float round_to_bf16(float x) {
  return bf16_to_float(bf16_from_float(x));
}

std::uint8_t e2m1_from_float(float x) {
  return detail::e2m1_code(x);
}

float e2m1_to_float(std::uint8_t nibble) {
  if (nibble > 0xF)
    throw_invalid("nibble", "an e2m1 code is 4 bits (0..15)", std::to_string(nibble));
  return detail::e2m1_table()[nibble];
}

std::uint8_t e4m3_from_float(float x) {
  return detail::e4m3_code(x);
}

float e4m3_to_float(std::uint8_t b) {
  return detail::e4m3_table()[b];
}

std::uint8_t ue4m3_from_float(float x) {
  if (x < 0.0f) {
    throw_invalid("x", "a UE4M3 scale must be >= 0 (or NaN)", std::to_string(x));
  }
  return static_cast<std::uint8_t>(detail::e4m3_code(x) & 0x7Fu);  // drops the sign of -0
}

float ue4m3_to_float(std::uint8_t b) {
  return detail::e4m3_table()[b];
}

std::uint8_t ue8m0_from_float_ceil(float x) {
  return detail::ue8m0_ceil_code(x);
}

float ue8m0_to_float(std::uint8_t s) {
  return detail::ue8m0_value(s);
}

}  // namespace megamoe::formats
