// The GPU tests' comparison of two kernel versions' outputs (tests/support/
// summation_order_compare.hpp): it accepts the rare one-step rounding flips that different
// summation orders cause, and rejects what a kernel fault looks like -- a wrong element far from
// the other, a wrong column tile or token, a non-finite value, or two outputs of different shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "megamoe/formats.hpp"
#include "summation_order_compare.hpp"

namespace megamoe::test {
namespace {

constexpr std::int64_t kRows = 40, kWidth = 1024;

std::vector<std::uint16_t> random_output(std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<std::uint16_t> v(static_cast<std::size_t>(kRows * kWidth));
  for (auto& x : v) x = formats::bf16_from_float(d(gen));
  return v;
}

// The next bf16 away from zero: a one-step rounding flip.
std::uint16_t one_step(std::uint16_t bits) {
  return static_cast<std::uint16_t>(bits + 1);
}

TEST(SummationOrderCompare, EqualOutputsPass) {
  const auto a = random_output(std::random_device{}());
  const OrderComparison r = compare_up_to_summation_order(a, a, kWidth, kBf16SlotOrderTolerance);
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.differing, 0);
  EXPECT_EQ(r.elements, kRows * kWidth);
}

TEST(SummationOrderCompare, FlipsInFewRowsPass) {
  const auto a = random_output(std::random_device{}());
  auto b = a;
  ASSERT_EQ(order_differing_rows_allowed(kRows), 2);
  // An FC1 e2m1 flip: every element of one token's row a step away; and one bf16 slot flip.
  for (std::int64_t j = 0; j < kWidth; ++j) {
    auto& x = b[static_cast<std::size_t>(3 * kWidth + j)];
    x = one_step(x);
  }
  auto& y = b[static_cast<std::size_t>(31 * kWidth + 77)];
  y = one_step(y);
  const OrderComparison r = compare_up_to_summation_order(a, b, kWidth, kBf16SlotOrderTolerance);
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.differing, kWidth + 1);
  EXPECT_EQ(r.differing_rows, 2);
}

TEST(SummationOrderCompare, FlipsInTooManyRowsFail) {
  const auto a = random_output(std::random_device{}());
  auto b = a;
  // One wrong 64-column tile of three tokens: small steps, but in more rows than accepted.
  for (std::int64_t t : {5, 6, 7}) {
    for (std::int64_t j = 128; j < 192; ++j) {
      auto& x = b[static_cast<std::size_t>(t * kWidth + j)];
      x = one_step(x);
    }
  }
  const OrderComparison r = compare_up_to_summation_order(a, b, kWidth, kBf16SlotOrderTolerance);
  EXPECT_FALSE(r.ok()) << r.describe();
  EXPECT_EQ(r.beyond, 0);
  EXPECT_EQ(r.differing_rows, 3);
}

TEST(SummationOrderCompare, OneFarElementFails) {
  const auto a = random_output(std::random_device{}());
  auto b = a;
  const auto value = [&](std::int64_t row, std::int64_t col) {
    return formats::bf16_to_float(a[static_cast<std::size_t>(row * kWidth + col)]);
  };
  // A tenth of the row's largest value away: a wrong scale or route, not an order.
  float row_max = 0;
  for (std::int64_t j = 0; j < kWidth; ++j) row_max = std::max(row_max, std::abs(value(7, j)));
  auto& x = b[static_cast<std::size_t>(7 * kWidth + 300)];
  x = formats::bf16_from_float(value(7, 300) + 0.1f * row_max);
  const OrderComparison r = compare_up_to_summation_order(a, b, kWidth, kBf16SlotOrderTolerance);
  EXPECT_FALSE(r.ok()) << r.describe();
  EXPECT_EQ(r.beyond, 1);
  EXPECT_EQ(r.first_beyond, 7 * kWidth + 300);
  // The FP8 slots' wider tolerance still rejects half the row's largest value.
  x = formats::bf16_from_float(value(7, 300) + 0.5f * row_max);
  EXPECT_FALSE(compare_up_to_summation_order(a, b, kWidth, kFp8SlotOrderTolerance).ok());
}

TEST(SummationOrderCompare, NonFiniteAgainstFiniteFails) {
  const auto a = random_output(std::random_device{}());
  auto b = a;
  b[12345] = 0x7FC0;  // NaN
  EXPECT_FALSE(compare_up_to_summation_order(a, b, kWidth, kFp8SlotOrderTolerance).ok());
  b[12345] = 0xFFFF;  // the tests' poison
  EXPECT_FALSE(compare_up_to_summation_order(a, b, kWidth, kFp8SlotOrderTolerance).ok());
}

TEST(SummationOrderCompare, DifferentShapesFail) {
  const auto a = random_output(std::random_device{}());
  auto b = a;
  b.pop_back();
  EXPECT_FALSE(compare_up_to_summation_order(a, b, kWidth, kBf16SlotOrderTolerance).ok());
  EXPECT_FALSE(compare_up_to_summation_order(a, a, kWidth + 1, kBf16SlotOrderTolerance).ok());
}

}  // namespace
}  // namespace megamoe::test
