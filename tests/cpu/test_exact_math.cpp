// The activations' fp32 e^x, sigmoid and tanh of the kernels (kernels/megamoe/formats/
// exact_math.cuh, compiled for the host: tests/support/megamoe/common.cuh models each intrinsic
// exactly) against the CPU reference's kernel-precision copies (src/reference/activation.cpp):
// equal bit for bit on every 61st float of the whole range and on the special values, and e^x
// within 2 ulp of the fp64 exponential wherever the result is a normal float.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../../kernels/megamoe/formats/exact_math.cuh"
#include "reference/activation.hpp"

namespace megamoe {
namespace {

namespace exact = device::exact;
namespace ref = reference::detail;

std::uint32_t bits(float f) {
  return std::bit_cast<std::uint32_t>(f);
}

// Same bits, or both NaN.
bool same(float a, float b) {
  return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b));
}

std::vector<float> specials() {
  const float inf = std::numeric_limits<float>::infinity();
  return {0.0f,      -0.0f,    inf,     -inf,        std::numeric_limits<float>::quiet_NaN(),
          88.72283f, 88.7229f, 89.0f,   89.001f,     -87.3365f,
          -103.97f,  -104.0f,  -104.1f, 1e-30f,      -1e-30f,
          1.0f,      -1.0f,    0.5f,    0.34657359f, -0.34657359f};
}

template <class Fn>
void for_sampled_floats(Fn fn) {
  for (std::uint64_t u = 0; u <= 0xFFFFFFFFull; u += 61)
    fn(std::bit_cast<float>(static_cast<std::uint32_t>(u)));
  for (float x : specials()) fn(x);
}

TEST(ExactMath, KernelAndReferenceAgreeBitForBit) {
  std::int64_t checked = 0, mismatches = 0;
  std::string first;
  for_sampled_floats([&](float x) {
    const float got[3] = {exact::exp_fp32(x), exact::sigmoid_fp32(x), exact::tanh_fp32(x)};
    const float want[3] = {ref::exp_kernel(x), ref::sigmoid_kernel(x), ref::tanh_kernel(x)};
    for (int f = 0; f < 3; ++f) {
      ++checked;
      if (!same(got[f], want[f])) {
        if (mismatches++ == 0) {
          first = "function " + std::to_string(f) + " at x = " + std::to_string(x);
        }
      }
    }
  });
  EXPECT_EQ(mismatches, 0) << "of " << checked << "; first: " << first;
}

TEST(ExactMath, ExpIsWithinTwoUlpWhereNormal) {
  double worst = 0.0;
  float worst_x = 0.0f;
  for_sampled_floats([&](float x) {
    if (!(x > -87.0f && x < 88.7f)) return;  // results outside the normal range
    const float got = exact::exp_fp32(x);
    const double want = std::exp(static_cast<double>(x));
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
    const double err = std::abs(static_cast<double>(got) - want) / ulp;
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
  });
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
}

TEST(ExactMath, EdgesOfExp) {
  EXPECT_EQ(exact::exp_fp32(0.0f), 1.0f);
  EXPECT_EQ(exact::exp_fp32(-0.0f), 1.0f);
  EXPECT_TRUE(std::isinf(exact::exp_fp32(89.5f)));
  EXPECT_TRUE(std::isinf(exact::exp_fp32(std::numeric_limits<float>::infinity())));
  EXPECT_EQ(exact::exp_fp32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exact::exp_fp32(-105.0f), 0.0f);
  EXPECT_TRUE(std::isnan(exact::exp_fp32(std::numeric_limits<float>::quiet_NaN())));
  // Subnormal results are rounded once: e^-100 = 3.72e-44 is 27 or 26 times the smallest
  // subnormal (1.4e-45).
  const float tiny = exact::exp_fp32(-100.0f);
  EXPECT_GT(tiny, 0.0f);
  EXPECT_LT(tiny, std::numeric_limits<float>::min());
  EXPECT_NEAR(tiny / std::numeric_limits<float>::denorm_min(), 26.5, 0.6);
  EXPECT_EQ(exact::sigmoid_fp32(200.0f), 1.0f);
  EXPECT_EQ(exact::sigmoid_fp32(-200.0f), 0.0f);
  EXPECT_EQ(exact::tanh_fp32(50.0f), 1.0f);
  EXPECT_EQ(exact::tanh_fp32(-50.0f), -1.0f);
  EXPECT_NEAR(exact::tanh_fp32(0.5f), std::tanh(0.5), 2e-7);
}

// The GELU constants the kernel writes as float literals and the reference converts from double.
TEST(ExactMath, GeluConstantsRoundAlike) {
  EXPECT_EQ(bits(0.7978845608028654f), bits(static_cast<float>(0.7978845608028654)));
  EXPECT_EQ(bits(0.044715f), bits(static_cast<float>(0.044715)));
}

}  // namespace
}  // namespace megamoe
