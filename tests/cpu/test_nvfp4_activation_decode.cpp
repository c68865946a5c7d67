// The token-operand decode of the NVFP4 kernels (kernels/megamoe/formats/
// nvfp4_activation_decode.cuh, compiled for the host through tests/support/megamoe/common.cuh)
// against the CPU formats: every f16 half of every output register equals the element's e2m1
// value (the sign of the negative zero code included), for every 16-bit half of a word.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>

#include "../../kernels/megamoe/formats/nvfp4_activation_decode.cuh"
#include "megamoe/formats.hpp"

namespace megamoe {
namespace {

// IEEE binary16 bits -> float (normal and zero only: every e2m1 value is one or the other).
float f16_to_float(std::uint32_t h) {
  const std::uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  const float v = exp == 0
                      ? std::ldexp(static_cast<float>(man), -24)
                      : std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  return (h & 0x8000u) ? -v : v;
}

std::string hex(std::uint32_t v) {
  std::ostringstream o;
  o << "0x" << std::hex << v;
  return o.str();
}

// Whether halves (element 2 j, 2 j + 1 of w) of out[j] hold the e2m1 values exactly, sign of zero
// included.
::testing::AssertionResult decodes(std::uint32_t w) {
  std::uint32_t out[4];
  device::nvfp4::decode_e2m1_word(w, out);
  for (int i = 0; i < 8; ++i) {
    const auto nibble = static_cast<std::uint8_t>((w >> (4 * i)) & 0xFu);
    const std::uint32_t half = (out[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
    const float want = formats::e2m1_to_float(nibble);
    const float got = f16_to_float(half);
    if (got != want || std::signbit(got) != ((nibble & 8u) != 0)) {
      return ::testing::AssertionFailure()
             << "word " << hex(w) << " element " << i << ": f16 " << hex(half) << " = " << got
             << ", e2m1 code " << hex(nibble) << " = " << want;
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(Nvfp4ActivationDecode, EveryHalfWordAgainstTheE2m1Values) {
  std::mt19937 rng(20261130u);
  for (std::uint32_t v = 0; v < 0x10000u; ++v) {
    const std::uint32_t other = rng() & 0xFFFFu;
    ASSERT_TRUE(decodes(v | (other << 16)));
    ASSERT_TRUE(decodes((v << 16) | other));
  }
}

TEST(Nvfp4ActivationDecode, NegativeZeroAndExtremes) {
  EXPECT_TRUE(decodes(0x88888888u));  // -0 everywhere
  EXPECT_TRUE(decodes(0x77777777u));  // +6 everywhere
  EXPECT_TRUE(decodes(0xFFFFFFFFu));  // -6 everywhere
  EXPECT_TRUE(decodes(0x00000000u));
}

}  // namespace
}  // namespace megamoe
