// Scalar codecs against hand-worked vectors and against brute-force nearest-value searches.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"

namespace mf = megamoe::formats;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

std::uint32_t fresh_seed() {
  return std::random_device{}();
}

// Nearest representable value, ties to the even code, saturating at the largest finite value:
// an independent (slow) statement of the rounding the codecs implement. `values[c]` is the
// value of code c for the non-negative codes 0..n-1, in increasing order, so "even code" is
// "even index".
int nearest_code(const std::vector<double>& values, double a) {
  if (a >= values.back()) return static_cast<int>(values.size()) - 1;
  for (std::size_t c = 0; c + 1 < values.size(); ++c) {
    const double lo = values[c];
    const double hi = values[c + 1];
    if (a >= lo && a <= hi) {
      const double dlo = a - lo;
      const double dhi = hi - a;
      if (dlo < dhi) return static_cast<int>(c);
      if (dhi < dlo) return static_cast<int>(c + 1);
      return (c % 2 == 0) ? static_cast<int>(c) : static_cast<int>(c + 1);
    }
  }
  ADD_FAILURE() << "no bracket for " << a;
  return -1;
}

std::vector<double> e2m1_magnitudes() {
  return {0, 0.5, 1, 1.5, 2, 3, 4, 6};
}

std::vector<double> e4m3_magnitudes() {  // codes 0x00..0x7E
  std::vector<double> v;
  for (int c = 0; c <= 0x7E; ++c) {
    const int e = c >> 3;
    const int m = c & 7;
    v.push_back(e == 0 ? m * std::ldexp(1.0, -9) : (8 + m) * std::ldexp(1.0, e - 10));
  }
  return v;
}

// ---- e2m1 ----------------------------------------------------------------------------------

TEST(E2m1, DecodesAllSixteenCodes) {
  const float expected[16] = {0,     0.5f,  1,  1.5f,  2,  3,  4,  6,
                              -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    const float v = mf::e2m1_to_float(static_cast<std::uint8_t>(c));
    EXPECT_EQ(v, expected[c]) << "code " << c;
    EXPECT_EQ(std::signbit(v), c >= 8) << "code " << c;
  }
}

TEST(E2m1, EveryCodeRoundTrips) {
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(mf::e2m1_from_float(mf::e2m1_to_float(static_cast<std::uint8_t>(c))), c);
  }
}

TEST(E2m1, TiesGoToTheEvenCode) {
  EXPECT_EQ(mf::e2m1_from_float(0.25f), 0x0);  // 0 | 0.5  -> 0
  EXPECT_EQ(mf::e2m1_from_float(0.75f), 0x2);  // 0.5 | 1  -> 1
  EXPECT_EQ(mf::e2m1_from_float(1.25f), 0x2);  // 1 | 1.5  -> 1
  EXPECT_EQ(mf::e2m1_from_float(1.75f), 0x4);  // 1.5 | 2  -> 2
  EXPECT_EQ(mf::e2m1_from_float(2.5f), 0x4);   // 2 | 3    -> 2
  EXPECT_EQ(mf::e2m1_from_float(3.5f), 0x6);   // 3 | 4    -> 4
  EXPECT_EQ(mf::e2m1_from_float(5.0f), 0x6);   // 4 | 6    -> 4
  EXPECT_EQ(mf::e2m1_from_float(-0.75f), 0xA);
  EXPECT_EQ(mf::e2m1_from_float(-5.0f), 0xE);
  // Just past each tie.
  EXPECT_EQ(mf::e2m1_from_float(std::nextafter(0.25f, 1.0f)), 0x1);
  EXPECT_EQ(mf::e2m1_from_float(std::nextafter(0.75f, 0.0f)), 0x1);
  EXPECT_EQ(mf::e2m1_from_float(std::nextafter(1.25f, 2.0f)), 0x3);
  EXPECT_EQ(mf::e2m1_from_float(std::nextafter(5.0f, 6.0f)), 0x7);
}

TEST(E2m1, SaturatesAndKeepsSignedZero) {
  EXPECT_EQ(mf::e2m1_from_float(6.0f), 0x7);
  EXPECT_EQ(mf::e2m1_from_float(1e9f), 0x7);
  EXPECT_EQ(mf::e2m1_from_float(-1e9f), 0xF);
  EXPECT_EQ(mf::e2m1_from_float(FLT_MAX), 0x7);
  EXPECT_EQ(mf::e2m1_from_float(0.0f), 0x0);
  EXPECT_EQ(mf::e2m1_from_float(-0.0f), 0x8);
  EXPECT_EQ(mf::e2m1_from_float(-0.1f), 0x8);  // underflow keeps the sign
  EXPECT_EQ(mf::e2m1_from_float(1e-30f), 0x0);
}

TEST(E2m1, NonFiniteInputs) {
  EXPECT_EQ(mf::e2m1_from_float(kInf), 0x7);
  EXPECT_EQ(mf::e2m1_from_float(-kInf), 0xF);
  EXPECT_EQ(mf::e2m1_from_float(kNaN), 0x7);  // e2m1 has no NaN: +6, as the hardware does
  EXPECT_EQ(mf::e2m1_from_float(-kNaN), 0x7);
}

TEST(E2m1, RejectsCodesWiderThanFourBits) {
  EXPECT_THROW(mf::e2m1_to_float(0x10), megamoe::InvalidArgument);
}

TEST(E2m1, MatchesNearestValueSearchOnRandomInputs) {
  const std::uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  const auto mags = e2m1_magnitudes();
  for (int i = 0; i < 200000; ++i) {
    // Half the draws land on or next to a grid point or a midpoint, where rounding matters.
    float x = dist(gen);
    if (i % 2) x = std::nextafter(std::round(x * 4.0f) / 4.0f, (i % 4 == 1) ? 10.0f : -10.0f);
    if (i % 8 == 3) x = std::round(x * 4.0f) / 4.0f;
    const int code = nearest_code(mags, std::fabs(static_cast<double>(x)));
    const int expected = (std::signbit(x) ? 8 : 0) | code;
    ASSERT_EQ(mf::e2m1_from_float(x), expected) << "x = " << x;
  }
}

// ---- e4m3fn --------------------------------------------------------------------------------

TEST(E4m3, HandWorkedValues) {
  EXPECT_EQ(mf::e4m3_from_float(1.0f), 0x38);
  EXPECT_EQ(mf::e4m3_from_float(-1.0f), 0xB8);
  EXPECT_EQ(mf::e4m3_from_float(448.0f), 0x7E);
  EXPECT_EQ(mf::e4m3_from_float(-448.0f), 0xFE);
  EXPECT_EQ(mf::e4m3_from_float(240.0f), 0x77);     // 1.875 * 2^7
  EXPECT_EQ(mf::e4m3_from_float(0.015625f), 0x08);  // 2^-6, smallest normal
  EXPECT_EQ(mf::e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(mf::e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(mf::e4m3_to_float(0xFE), -448.0f);
  EXPECT_EQ(mf::e4m3_to_float(0x08), 0.015625f);
  EXPECT_EQ(mf::e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(mf::e4m3_to_float(0x07), 7.0f * std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(mf::e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(mf::e4m3_to_float(0xFF)));
}

TEST(E4m3, Subnormals) {
  for (int m = 1; m <= 7; ++m) {
    const float v = static_cast<float>(m) * std::ldexp(1.0f, -9);
    EXPECT_EQ(mf::e4m3_from_float(v), m) << m;
    EXPECT_EQ(mf::e4m3_from_float(-v), 0x80 | m) << m;
  }
  EXPECT_EQ(mf::e4m3_from_float(std::ldexp(1.0f, -10)), 0x00);  // 0 | 2^-9 tie -> 0
  EXPECT_EQ(mf::e4m3_from_float(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(mf::e4m3_from_float(3.0f * std::ldexp(1.0f, -10)), 0x02);   // 1 | 2 tie -> 2
  EXPECT_EQ(mf::e4m3_from_float(15.0f * std::ldexp(1.0f, -10)), 0x08);  // 7 | 8 tie -> 2^-6
  EXPECT_EQ(mf::e4m3_from_float(1e-30f), 0x00);
  EXPECT_EQ(mf::e4m3_from_float(-1e-30f), 0x80);
}

TEST(E4m3, TiesGoToTheEvenCode) {
  EXPECT_EQ(mf::e4m3_from_float(1.0625f), 0x38);  // 1 | 1.125     -> 1
  EXPECT_EQ(mf::e4m3_from_float(1.1875f), 0x3A);  // 1.125 | 1.25  -> 1.25
  EXPECT_EQ(mf::e4m3_from_float(1.9375f), 0x40);  // 1.875 | 2     -> 2 (carry into exponent)
  EXPECT_EQ(mf::e4m3_from_float(-1.0625f), 0xB8);
  EXPECT_EQ(mf::e4m3_from_float(std::nextafter(1.0625f, 2.0f)), 0x39);
  EXPECT_EQ(mf::e4m3_from_float(432.0f), 0x7E);  // 416 | 448 -> 448 (mantissa 110 is even)
}

TEST(E4m3, SaturationZerosAndNonFinite) {
  EXPECT_EQ(mf::e4m3_from_float(464.0f), 0x7E);
  EXPECT_EQ(mf::e4m3_from_float(1e9f), 0x7E);
  EXPECT_EQ(mf::e4m3_from_float(-1e9f), 0xFE);
  EXPECT_EQ(mf::e4m3_from_float(kInf), 0x7E);
  EXPECT_EQ(mf::e4m3_from_float(-kInf), 0xFE);
  EXPECT_EQ(mf::e4m3_from_float(kNaN), 0x7F);
  EXPECT_EQ(mf::e4m3_from_float(-kNaN), 0x7F);
  EXPECT_EQ(mf::e4m3_from_float(0.0f), 0x00);
  EXPECT_EQ(mf::e4m3_from_float(-0.0f), 0x80);
  EXPECT_TRUE(std::signbit(mf::e4m3_to_float(0x80)));
}

TEST(E4m3, AllBytesRoundTrip) {
  for (int b = 0; b < 256; ++b) {
    const float v = mf::e4m3_to_float(static_cast<std::uint8_t>(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << b;
      EXPECT_EQ(mf::e4m3_from_float(v), 0x7F) << b;
    } else {
      EXPECT_EQ(mf::e4m3_from_float(v), b) << b;
    }
  }
}

TEST(E4m3, MatchesNearestValueSearchOnRandomInputs) {
  const std::uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> log_mag(-12.0f, 10.0f);
  std::uniform_int_distribution<int> coin(0, 3);
  const auto mags = e4m3_magnitudes();
  for (int i = 0; i < 100000; ++i) {
    float x = std::exp2(log_mag(gen));
    const int c = coin(gen);
    if (c == 1) {  // exactly a midpoint between two neighbours
      const auto j = static_cast<std::size_t>(i % 126);
      x = static_cast<float>((mags[j] + mags[j + 1]) / 2);
    } else if (c == 2) {  // one ulp either side of a midpoint
      const auto j = static_cast<std::size_t>(i % 126);
      x = std::nextafter(static_cast<float>((mags[j] + mags[j + 1]) / 2), (i & 1) ? 1e9f : 0.0f);
    }
    if (i & 4) x = -x;
    const int expected = (std::signbit(x) ? 0x80 : 0) | nearest_code(mags, std::fabs(x));
    ASSERT_EQ(mf::e4m3_from_float(x), expected) << "x = " << x;
  }
}

// ---- UE4M3 ---------------------------------------------------------------------------------

TEST(Ue4m3, EncodesNonNegativeValuesAsE4m3) {
  EXPECT_EQ(mf::ue4m3_from_float(0.0f), 0x00);
  EXPECT_EQ(mf::ue4m3_from_float(-0.0f), 0x00);  // the sign bit of a scale is always 0
  EXPECT_EQ(mf::ue4m3_from_float(1.0f), 0x38);
  EXPECT_EQ(mf::ue4m3_from_float(448.0f), 0x7E);
  EXPECT_EQ(mf::ue4m3_from_float(1e9f), 0x7E);
  EXPECT_EQ(mf::ue4m3_from_float(kInf), 0x7E);
  EXPECT_EQ(mf::ue4m3_from_float(kNaN), 0x7F);
  EXPECT_EQ(mf::ue4m3_from_float(std::ldexp(1.0f, -9)), 0x01);
  for (int b = 0; b < 0x7F; ++b) {
    EXPECT_EQ(mf::ue4m3_from_float(mf::ue4m3_to_float(static_cast<std::uint8_t>(b))), b);
  }
}

TEST(Ue4m3, RejectsNegativeValues) {
  try {
    mf::ue4m3_from_float(-1.0f);
    FAIL() << "expected InvalidArgument";
  } catch (const megamoe::InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "x");
  }
}

// ---- UE8M0 ---------------------------------------------------------------------------------

TEST(Ue8m0, CeilingToPowersOfTwo) {
  EXPECT_EQ(mf::ue8m0_from_float_ceil(1.0f), 127);
  EXPECT_EQ(mf::ue8m0_from_float_ceil(std::nextafter(1.0f, 2.0f)), 128);
  EXPECT_EQ(mf::ue8m0_from_float_ceil(1.5f), 128);
  EXPECT_EQ(mf::ue8m0_from_float_ceil(0.75f), 127);
  EXPECT_EQ(mf::ue8m0_from_float_ceil(0.5f), 126);
  EXPECT_EQ(mf::ue8m0_from_float_ceil(std::ldexp(1.0f, -126)), 1);
  EXPECT_EQ(mf::ue8m0_from_float_ceil(1.5f * std::ldexp(1.0f, -127)), 1);  // subnormal input
  EXPECT_EQ(mf::ue8m0_from_float_ceil(std::ldexp(1.0f, -127)), 0);
  EXPECT_EQ(mf::ue8m0_from_float_ceil(std::ldexp(1.0f, -140)), 0);
  EXPECT_EQ(mf::ue8m0_from_float_ceil(0.0f), 0);
  EXPECT_EQ(mf::ue8m0_from_float_ceil(-3.0f), 0);
  EXPECT_EQ(mf::ue8m0_from_float_ceil(std::ldexp(1.0f, 127)), 254);
  EXPECT_EQ(mf::ue8m0_from_float_ceil(1.5f * std::ldexp(1.0f, 126)), 254);
  EXPECT_EQ(mf::ue8m0_from_float_ceil(FLT_MAX), 254);  // saturates: 2^128 is not representable
  EXPECT_EQ(mf::ue8m0_from_float_ceil(kInf), 254);
  EXPECT_EQ(mf::ue8m0_from_float_ceil(kNaN), 255);
}

TEST(Ue8m0, AllBytesRoundTrip) {
  for (int s = 0; s < 255; ++s) {
    const float v = mf::ue8m0_to_float(static_cast<std::uint8_t>(s));
    EXPECT_EQ(v, std::ldexp(1.0f, s - 127)) << s;
    EXPECT_EQ(mf::ue8m0_from_float_ceil(v), s) << s;
  }
  EXPECT_TRUE(std::isnan(mf::ue8m0_to_float(255)));
  EXPECT_EQ(mf::ue8m0_to_float(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(mf::ue8m0_to_float(254), std::ldexp(1.0f, 127));
}

TEST(Ue8m0, CeilingMatchesLdexpSearchOnRandomInputs) {
  const std::uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> log_mag(-126.0f, 126.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::exp2(log_mag(gen));
    int s = 0;
    while (std::ldexp(1.0, s - 127) < static_cast<double>(x)) ++s;
    ASSERT_EQ(mf::ue8m0_from_float_ceil(x), s) << "x = " << x;
  }
}

// ---- bf16 ----------------------------------------------------------------------------------

TEST(Bf16, HandWorkedRoundingToNearestEven) {
  EXPECT_EQ(mf::bf16_from_float(1.0f), 0x3F80);
  EXPECT_EQ(mf::bf16_from_float(-2.0f), 0xC000);
  EXPECT_EQ(mf::bf16_from_float(1.0f + 0x1p-8f), 0x3F80);             // tie -> even (1.0)
  EXPECT_EQ(mf::bf16_from_float(1.0f + 3 * 0x1p-8f), 0x3F82);         // tie -> even (1 + 2^-6)
  EXPECT_EQ(mf::bf16_from_float(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);  // above the tie
  EXPECT_EQ(mf::bf16_from_float(1.0f + 0x1p-8f - 0x1p-20f), 0x3F80);  // below the tie
  EXPECT_EQ(mf::bf16_from_float(0.0f), 0x0000);
  EXPECT_EQ(mf::bf16_from_float(-0.0f), 0x8000);
  EXPECT_EQ(mf::bf16_from_float(0x1p-149f), 0x0000);  // smallest subnormal rounds to zero
  EXPECT_EQ(mf::bf16_from_float(0x1p-133f), 0x0001);  // smallest bf16 subnormal
  EXPECT_EQ(mf::round_to_bf16(3.14159265f), 3.140625f);
}

TEST(Bf16, OverflowInfAndNaN) {
  EXPECT_EQ(mf::bf16_from_float(FLT_MAX), 0x7F80);  // rounds up to Inf, as the hardware does
  EXPECT_EQ(mf::bf16_from_float(kInf), 0x7F80);
  EXPECT_EQ(mf::bf16_from_float(-kInf), 0xFF80);
  EXPECT_EQ(mf::bf16_from_float(kNaN), 0x7FFF);
  EXPECT_EQ(mf::bf16_from_float(-kNaN), 0x7FFF);
  // A NaN whose payload sits only in the dropped bits must stay a NaN.
  EXPECT_EQ(mf::bf16_from_float(std::bit_cast<float>(0x7F800001u)), 0x7FFF);
  EXPECT_TRUE(std::isnan(mf::bf16_to_float(0x7FC0)));
}

TEST(Bf16, AllPatternsRoundTrip) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const float v = mf::bf16_to_float(h);
    if (std::isnan(v)) continue;
    ASSERT_EQ(mf::bf16_from_float(v), h) << b;
  }
}

TEST(Bf16, MatchesDoubleRoundingSearchOnRandomInputs) {
  const std::uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::uint32_t> any_bits(0, 0x7F7FFFFFu);
  for (int i = 0; i < 100000; ++i) {
    const float x = std::bit_cast<float>(any_bits(gen));
    // The two bf16 neighbours of x, and the one the tie rule picks.
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    const std::uint16_t lo = static_cast<std::uint16_t>(u >> 16);
    const auto hi = static_cast<std::uint16_t>(lo + 1);
    const double dlo = static_cast<double>(x) - mf::bf16_to_float(lo);
    // Above the largest finite bf16 the upper neighbour is 2^128 (unbounded exponent), so
    // values past its midpoint overflow to Inf.
    const double hi_value = hi == 0x7F80 ? std::ldexp(1.0, 128) : mf::bf16_to_float(hi);
    const double dhi = hi_value - static_cast<double>(x);
    const std::uint16_t expected = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
    ASSERT_EQ(mf::bf16_from_float(x), expected) << "x = " << x;
  }
}

}  // namespace
