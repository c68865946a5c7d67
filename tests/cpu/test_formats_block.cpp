// Block quantization recipes: hand-worked scales and blocks, error bounds on random data,
// exact zeros, non-finite inputs confined to their own block/row, argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"

namespace mf = megamoe::formats;
using megamoe::Fp8ScaleKind;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

std::uint32_t fresh_seed() {
  return std::random_device{}();
}

std::vector<float> random_matrix(std::mt19937& gen, std::int64_t rows, std::int64_t k) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_row_scale(-6.0f, 6.0f);
  std::vector<float> x(static_cast<std::size_t>(rows * k));
  for (std::int64_t r = 0; r < rows; ++r) {
    // Rows and blocks of very different magnitudes exercise every scale path.
    const float row_scale = std::exp2(log_row_scale(gen));
    for (std::int64_t i = 0; i < k; ++i) {
      const float block_scale = ((i / 16) % 3 == 0) ? 0.01f : 1.0f;
      x[static_cast<std::size_t>(r * k + i)] = normal(gen) * row_scale * block_scale;
    }
  }
  return x;
}

// Largest error RNE to e2m1 may make on a scaled value v (saturation included).
double e2m1_allowed_error(double v) {
  const double a = std::fabs(v);
  if (a > 6.0) return a - 6.0;
  if (a >= 4.0) return 1.0;
  if (a >= 2.0) return 0.5;
  return 0.25;
}

// Same for e4m3: half an ulp (2^-4 relative for normals, 2^-10 absolute for subnormals).
double e4m3_allowed_error(double v) {
  const double a = std::fabs(v);
  if (a > 448.0) return a - 448.0;
  return std::max(a * 0x1p-4, 0x1p-10);
}

// The fp32 steps around the format rounding (x / unit, and the dequantizing product) each move
// a value by at most 2^-24 of itself: allow a few such ulps on top of the format's error.
double fp32_slack(float x) {
  return std::fabs(static_cast<double>(x)) * 0x1p-21;
}

template <typename Fn>
void expect_invalid(const std::string& argument, Fn fn) {
  try {
    fn();
    ADD_FAILURE() << "expected InvalidArgument naming '" << argument << "'";
  } catch (const megamoe::InvalidArgument& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
  }
}

// ---- recipe scales ---------------------------------------------------------------------------

TEST(Recipes, Nvfp4GlobalScale) {
  EXPECT_EQ(mf::nvfp4_global_scale(2688.0f), 1.0f);
  EXPECT_EQ(mf::nvfp4_global_scale(8064.0f), 3.0f);
  EXPECT_EQ(mf::nvfp4_global_scale(1.0f), 1.0f / 2688.0f);
  EXPECT_EQ(mf::nvfp4_global_scale(0.0f), 1.0f);    // all-zero tensor
  EXPECT_EQ(mf::nvfp4_global_scale(1e-40f), 1.0f);  // g would not be a normal float
  expect_invalid("amax", [] { mf::nvfp4_global_scale(-1.0f); });
  expect_invalid("amax", [] { mf::nvfp4_global_scale(kNaN); });
  expect_invalid("amax", [] { mf::nvfp4_global_scale(kInf); });
}

TEST(Recipes, Nvfp4BlockScale) {
  EXPECT_EQ(mf::nvfp4_block_scale(6.0f, 1.0f), 0x38);             // e4m3(1)
  EXPECT_EQ(mf::nvfp4_block_scale(12.0f, 1.0f), 0x40);            // e4m3(2)
  EXPECT_EQ(mf::nvfp4_block_scale(6.375f, 1.0f), 0x38);           // 1.0625: tie -> 1
  EXPECT_EQ(mf::nvfp4_block_scale(7.125f, 1.0f), 0x3A);           // 1.1875: tie -> 1.25
  EXPECT_EQ(mf::nvfp4_block_scale(2688.0f, 1.0f), 0x7E);          // 448
  EXPECT_EQ(mf::nvfp4_block_scale(1e9f, 1.0f), 0x7E);             // clamped to 448
  EXPECT_EQ(mf::nvfp4_block_scale(0.0f, 1.0f), 0x01);             // clamped to 2^-9
  EXPECT_EQ(mf::nvfp4_block_scale(6.0f * 0x1p-10f, 1.0f), 0x01);  // 2^-10 rounds to 0 -> 2^-9
  EXPECT_EQ(mf::nvfp4_block_scale(12.0f, 2.0f), 0x38);            // 12 / (6 * 2) = 1
  EXPECT_EQ(mf::nvfp4_block_scale(3.0f, 0.25f), 0x40);            // 3 / 1.5 = 2
  expect_invalid("global_scale", [] { mf::nvfp4_block_scale(1.0f, 0.0f); });
  expect_invalid("global_scale", [] { mf::nvfp4_block_scale(1.0f, 1e-40f); });
  expect_invalid("block_amax", [] { mf::nvfp4_block_scale(kNaN, 1.0f); });
}

TEST(Recipes, PowerOfTwoScales) {
  EXPECT_EQ(mf::mxfp4_block_scale(6.0f), 127);  // 6/6 = 1 = 2^0
  EXPECT_EQ(mf::mxfp4_block_scale(6.01f), 128);
  EXPECT_EQ(mf::mxfp4_block_scale(3.0f), 126);
  EXPECT_EQ(mf::mxfp4_block_scale(0.0f), 112);  // 1e-4/6 = 1.67e-5 -> 2^-15
  EXPECT_EQ(mf::mxfp4_block_scale(1e-9f), 112);
  EXPECT_EQ(mf::fp8_pow2_block_scale(448.0f), 127);
  EXPECT_EQ(mf::fp8_pow2_block_scale(449.0f), 128);
  EXPECT_EQ(mf::fp8_pow2_block_scale(1.0f), 119);  // 1/448 = 2.23e-3 -> 2^-8
  EXPECT_EQ(mf::fp8_pow2_block_scale(0.0f), 105);  // 1e-4/448 = 2.23e-7 -> 2^-22
  EXPECT_EQ(mf::fp8_f32_block_scale(448.0f), 1.0f);
  EXPECT_EQ(mf::fp8_f32_block_scale(896.0f), 2.0f);
  EXPECT_EQ(mf::fp8_f32_block_scale(1.0f), 1.0f / 448.0f);
  EXPECT_EQ(mf::fp8_f32_block_scale(0.0f), 1.0f);
  expect_invalid("block_amax", [] { mf::mxfp4_block_scale(-1.0f); });
  expect_invalid("block_amax", [] { mf::fp8_f32_block_scale(kInf); });
}

TEST(Recipes, FiniteAbsMaxSkipsNonFinite) {
  const std::vector<float> x = {1.0f, -3.0f, kNaN, kInf, -kInf, 2.0f};
  EXPECT_EQ(mf::finite_abs_max(x), 3.0f);
  EXPECT_EQ(mf::finite_abs_max(std::vector<float>{}), 0.0f);
  EXPECT_EQ(mf::finite_abs_max(std::vector<float>{kNaN, kInf}), 0.0f);
}

// ---- NVFP4 -----------------------------------------------------------------------------------

TEST(Nvfp4, HandWorkedBlock) {
  // Block 0 has amax 6 (scale 1.0 with g = 1): its elements are their own codes.
  // Block 1 has amax 12 (scale 2.0): elements halve before rounding.
  std::vector<float> x = {0,     0.5f,  1, 1.5f,  2,     3,  4, 6, -0.5f, -1,  -6,
                          0.25f, 0.75f, 5, -2.5f, 1.25f, 12, 3, 5, 1,     -12, 0.5f,
                          2.9f,  7,     0, 0,     0,     0,  0, 0, 0,     1.5f};
  std::vector<std::uint8_t> packed(16), scales(2);
  mf::quantize_nvfp4(x, 1, 32, 1.0f, packed, scales);
  EXPECT_EQ(scales[0], 0x38);
  EXPECT_EQ(scales[1], 0x40);
  const std::uint8_t expected[16] = {0x10, 0x32, 0x54, 0x76,   // 0,0.5 | 1,1.5 | 2,3 | 4,6
                                     0xA9, 0x0F,               // -0.5,-1 | -6,0.25(tie->0)
                                     0x62,                     // 0.75(tie->1), 5(tie->4)
                                     0x2C,                     // -2.5(tie->-2), 1.25(tie->1)
                                     0x37,                     // 12/2=6, 3/2=1.5
                                     0x14,                     // 5/2=2.5(tie->2), 1/2=0.5
                                     0x0F,                     // -12/2=-6, 0.5/2=0.25(tie->0)
                                     0x63,                     // 2.9/2=1.45(->1.5), 7/2=3.5(tie->4)
                                     0x00, 0x00, 0x00, 0x20};  // 0, 1.5/2=0.75(tie->1)
  for (int i = 0; i < 16; ++i) EXPECT_EQ(packed[i], expected[i]) << "byte " << i;

  std::vector<float> out(32);
  const std::vector<float> g = {1.0f};
  mf::dequantize_nvfp4(packed, scales, g, 1, 32, out);
  EXPECT_EQ(out[7], 6.0f);
  EXPECT_EQ(out[16], 12.0f);
  EXPECT_EQ(out[18], 4.0f);
  EXPECT_EQ(out[22], 3.0f);
  EXPECT_EQ(out[23], 8.0f);
}

TEST(Nvfp4, HandWorkedGlobalScale) {
  // amax 2688 -> g = 1; a block with amax 26.88 -> 26.88/6 = 4.48 -> e4m3 4.5 (0x49).
  std::vector<float> x(32, 0.0f);
  x[0] = 2688.0f;
  x[16] = 26.88f;
  x[17] = -9.0f;  // -9 / 4.5 = -2 exactly
  const float g = mf::nvfp4_global_scale(mf::finite_abs_max(x));
  ASSERT_EQ(g, 1.0f);
  std::vector<std::uint8_t> packed(16), scales(2);
  mf::quantize_nvfp4(x, 1, 32, g, packed, scales);
  EXPECT_EQ(scales[0], 0x7E);
  EXPECT_EQ(scales[1], 0x49);
  EXPECT_EQ(packed[0], 0x07);
  EXPECT_EQ(packed[8], 0xC7);  // 26.88/4.5 = 5.97 -> 6 ; -2 -> 0xC
}

TEST(Nvfp4, PerRowGlobalScales) {
  std::vector<float> x(3 * 16, 0.0f);
  x[0] = 8064.0f;    // row 0: g = 3
  x[16] = -2688.0f;  // row 1: g = 1
  // row 2 all zero: g = 1, everything exact
  std::vector<std::uint8_t> packed(3 * 8), scales(3);
  std::vector<float> g(3);
  mf::quantize_nvfp4_per_row(x, 3, 16, packed, scales, g);
  EXPECT_EQ(g[0], 3.0f);
  EXPECT_EQ(g[1], 1.0f);
  EXPECT_EQ(g[2], 1.0f);
  EXPECT_EQ(scales[0], 0x7E);
  EXPECT_EQ(scales[1], 0x7E);
  EXPECT_EQ(scales[2], 0x01);
  EXPECT_EQ(packed[0], 0x07);
  EXPECT_EQ(packed[8], 0x0F);
  std::vector<float> out(48, -1.0f);
  mf::dequantize_nvfp4(packed, scales, g, 3, 16, out);
  EXPECT_EQ(out[0], 8064.0f);
  EXPECT_EQ(out[16], -2688.0f);
  for (int i = 32; i < 48; ++i) EXPECT_EQ(out[i], 0.0f);
}

void check_nvfp4_bound(const std::vector<float>& x, const std::vector<float>& out,
                       const std::vector<std::uint8_t>& scales, const std::vector<float>& g,
                       std::int64_t rows, std::int64_t k) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const double gr = g.size() == 1 ? g[0] : g[static_cast<std::size_t>(r)];
    for (std::int64_t i = 0; i < k; ++i) {
      const auto idx = static_cast<std::size_t>(r * k + i);
      const double s = mf::ue4m3_to_float(scales[static_cast<std::size_t>(r * (k / 16) + i / 16)]);
      const double unit = s * gr;
      const double allowed = e2m1_allowed_error(x[idx] / unit) * unit + fp32_slack(x[idx]);
      ASSERT_LE(std::fabs(static_cast<double>(out[idx]) - x[idx]), allowed)
          << "row " << r << " col " << i << " x " << x[idx];
    }
  }
}

TEST(Nvfp4, RandomMatricesStayWithinTheFormatBound) {
  const std::uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  const std::int64_t rows = 37, k = 256;
  const auto x = random_matrix(gen, rows, k);
  std::vector<std::uint8_t> packed(rows * k / 2), scales(rows * k / 16);
  std::vector<float> out(rows * k);

  // Per tensor.
  const std::vector<float> g1 = {mf::nvfp4_global_scale(mf::finite_abs_max(x))};
  mf::quantize_nvfp4(x, rows, k, g1[0], packed, scales);
  for (std::int64_t b = 0; b < rows * k / 16; ++b) {  // each scale follows the recipe
    const float bamax = mf::finite_abs_max(std::span<const float>(x).subspan(b * 16, 16));
    ASSERT_EQ(scales[b], mf::nvfp4_block_scale(bamax, g1[0])) << "block " << b;
  }
  mf::dequantize_nvfp4(packed, scales, g1, rows, k, out);
  check_nvfp4_bound(x, out, scales, g1, rows, k);

  // Per row.
  std::vector<float> gr(rows);
  mf::quantize_nvfp4_per_row(x, rows, k, packed, scales, gr);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto row = std::span<const float>(x).subspan(r * k, k);
    ASSERT_EQ(gr[r], mf::nvfp4_global_scale(mf::finite_abs_max(row))) << "row " << r;
  }
  mf::dequantize_nvfp4(packed, scales, gr, rows, k, out);
  check_nvfp4_bound(x, out, scales, gr, rows, k);

  // Elements follow e2m1(x / (scale * g)) exactly, with scale * g rounded once in fp32.
  for (std::int64_t i = 0; i < rows * k; ++i) {
    const float unit = mf::ue4m3_to_float(scales[i / 16]) * gr[i / k];
    const std::uint8_t byte = packed[i / 2];
    const std::uint8_t code = (i % 2) ? (byte >> 4) : (byte & 0xF);
    ASSERT_EQ(code, mf::e2m1_from_float(x[i] / unit)) << "element " << i;
  }
}

TEST(Nvfp4, NonFiniteInputsStayInTheirBlock) {
  const std::uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  const std::int64_t rows = 4, k = 64;
  const auto clean = random_matrix(gen, rows, k);
  auto dirty = clean;
  auto zeroed = clean;  // what the recipe sees: non-finite inputs do not count in any amax
  const std::int64_t nan_at = 1 * k + 3, inf_at = 1 * k + 20, ninf_at = 1 * k + 40;
  dirty[nan_at] = kNaN;
  dirty[inf_at] = kInf;
  dirty[ninf_at] = -kInf;
  zeroed[nan_at] = zeroed[inf_at] = zeroed[ninf_at] = 0.0f;

  std::vector<std::uint8_t> pd(rows * k / 2), sd(rows * k / 16), pz(rows * k / 2),
      sz(rows * k / 16);
  std::vector<float> gd(rows), gz(rows);
  mf::quantize_nvfp4_per_row(dirty, rows, k, pd, sd, gd);
  mf::quantize_nvfp4_per_row(zeroed, rows, k, pz, sz, gz);
  EXPECT_EQ(gd, gz);
  EXPECT_EQ(sd, sz);
  for (std::int64_t i = 0; i < rows * k; ++i) {
    const std::uint8_t cd = (i % 2) ? (pd[i / 2] >> 4) : (pd[i / 2] & 0xF);
    const std::uint8_t cz = (i % 2) ? (pz[i / 2] >> 4) : (pz[i / 2] & 0xF);
    if (i == nan_at || i == inf_at) {
      EXPECT_EQ(cd, 0x7) << i;  // +6: the block's largest magnitude
    } else if (i == ninf_at) {
      EXPECT_EQ(cd, 0xF) << i;
    } else {
      EXPECT_EQ(cd, cz) << i;
    }
  }

  // Per tensor: one Inf must not move the global scale of the others.
  const float g = mf::nvfp4_global_scale(mf::finite_abs_max(dirty));
  EXPECT_EQ(g, mf::nvfp4_global_scale(mf::finite_abs_max(zeroed)));
  mf::quantize_nvfp4(dirty, rows, k, g, pd, sd);
  mf::quantize_nvfp4(zeroed, rows, k, g, pz, sz);
  EXPECT_EQ(sd, sz);
  for (std::int64_t i = 0; i < rows * k; i += 2) {
    if (i / 2 == nan_at / 2 || i / 2 == inf_at / 2 || i / 2 == ninf_at / 2) continue;
    EXPECT_EQ(pd[i / 2], pz[i / 2]) << i;
  }
}

TEST(Nvfp4, AllZeroRowsAreExact) {
  const std::int64_t rows = 3, k = 48;
  std::vector<float> x(rows * k, 0.0f);
  x[k + 5] = -0.0f;
  std::vector<std::uint8_t> packed(rows * k / 2, 0xAA), scales(rows * k / 16, 0xAA);
  std::vector<float> g(rows), out(rows * k, 1.0f);
  mf::quantize_nvfp4_per_row(x, rows, k, packed, scales, g);
  for (float v : g) EXPECT_EQ(v, 1.0f);
  for (auto s : scales) EXPECT_EQ(s, 0x01);
  mf::dequantize_nvfp4(packed, scales, g, rows, k, out);
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], 0.0f) << i;
  EXPECT_EQ(packed[(k + 5) / 2] >> 4, 0x8);  // -0 keeps its sign
}

TEST(Nvfp4, RejectsBadArguments) {
  std::vector<float> x(64);
  std::vector<std::uint8_t> packed(32), scales(4);
  std::vector<float> g(2), out(64);
  expect_invalid("k", [&] { mf::quantize_nvfp4(x, 2, 24, 1.0f, packed, scales); });
  expect_invalid("rows", [&] { mf::quantize_nvfp4(x, -1, 32, 1.0f, packed, scales); });
  expect_invalid("x", [&] { mf::quantize_nvfp4(x, 3, 32, 1.0f, packed, scales); });
  expect_invalid("packed", [&] {
    mf::quantize_nvfp4(x, 2, 32, 1.0f, std::span<std::uint8_t>(packed).first(31), scales);
  });
  expect_invalid("scales", [&] {
    mf::quantize_nvfp4(x, 2, 32, 1.0f, packed, std::span<std::uint8_t>(scales).first(3));
  });
  expect_invalid("global_scale", [&] { mf::quantize_nvfp4(x, 2, 32, kInf, packed, scales); });
  expect_invalid("global_scales", [&] {
    mf::quantize_nvfp4_per_row(x, 2, 32, packed, scales, std::span<float>(g).first(1));
  });
  const std::vector<float> g3(3, 1.0f);
  expect_invalid("global_scales", [&] { mf::dequantize_nvfp4(packed, scales, g3, 2, 32, out); });
  expect_invalid("out", [&] {
    mf::dequantize_nvfp4(packed, scales, g, 2, 32, std::span<float>(out).first(10));
  });
}

// ---- MXFP4 -----------------------------------------------------------------------------------

TEST(Mxfp4, HandWorkedBlock) {
  std::vector<float> x(64, 0.0f);
  // Block 0: amax 6 -> scale 2^0; block 1: amax 10 -> 10/6 = 1.67 -> scale 2^1.
  x[0] = 6.0f;
  x[1] = -1.25f;  // tie -> -1
  x[32] = 10.0f;  // 10/2 = 5 -> tie -> 4 -> 8
  x[33] = 3.0f;   // 1.5
  std::vector<std::uint8_t> packed(32), scales(2);
  mf::quantize_mxfp4(x, 1, 64, packed, scales);
  EXPECT_EQ(scales[0], 127);
  EXPECT_EQ(scales[1], 128);
  EXPECT_EQ(packed[0], 0xA7);
  EXPECT_EQ(packed[16], 0x36);
  std::vector<float> out(64);
  mf::dequantize_mxfp4(packed, scales, 1, 64, out);
  EXPECT_EQ(out[0], 6.0f);
  EXPECT_EQ(out[1], -1.0f);
  EXPECT_EQ(out[32], 8.0f);
  EXPECT_EQ(out[33], 3.0f);
}

TEST(Mxfp4, RandomMatricesStayWithinTheFormatBound) {
  const std::uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  const std::int64_t rows = 29, k = 192;
  const auto x = random_matrix(gen, rows, k);
  std::vector<std::uint8_t> packed(rows * k / 2), scales(rows * k / 32);
  std::vector<float> out(rows * k);
  mf::quantize_mxfp4(x, rows, k, packed, scales);
  mf::dequantize_mxfp4(packed, scales, rows, k, out);
  for (std::int64_t i = 0; i < rows * k; ++i) {
    const float bamax = mf::finite_abs_max(std::span<const float>(x).subspan(i / 32 * 32, 32));
    ASSERT_EQ(scales[i / 32], mf::mxfp4_block_scale(bamax));
    const double unit = mf::ue8m0_to_float(scales[i / 32]);
    const double allowed = e2m1_allowed_error(x[i] / unit) * unit + fp32_slack(x[i]);
    ASSERT_LE(std::fabs(static_cast<double>(out[i]) - x[i]), allowed) << "element " << i;
  }
}

TEST(Mxfp4, NonFiniteAndZeroBlocks) {
  std::vector<float> x(96, 0.0f);  // block 0 all zero
  for (int i = 32; i < 96; ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
  auto zeroed = x;
  x[40] = kNaN;
  x[41] = -kInf;
  zeroed[40] = zeroed[41] = 0.0f;
  std::vector<std::uint8_t> pd(48), sd(3), pz(48), sz(3);
  mf::quantize_mxfp4(x, 1, 96, pd, sd);
  mf::quantize_mxfp4(zeroed, 1, 96, pz, sz);
  EXPECT_EQ(sd, sz);
  EXPECT_EQ(sd[0], 112);    // floor of 1e-4 on the amax
  EXPECT_EQ(pd[20], 0xF7);  // NaN -> +6, -Inf -> -6
  for (int i = 0; i < 48; ++i) {
    if (i != 20) {
      EXPECT_EQ(pd[i], pz[i]) << i;
    }
  }
  std::vector<float> out(96, 1.0f);
  mf::dequantize_mxfp4(pd, sd, 1, 96, out);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.0f) << i;
  expect_invalid("k", [&] { mf::quantize_mxfp4(x, 1, 48, pd, sd); });
}

// ---- FP8 -------------------------------------------------------------------------------------

TEST(Fp8, HandWorked1x128) {
  std::vector<float> x(256, 0.0f);
  x[0] = 896.0f;  // block 0: f32 scale 2, ue8m0 scale 2^1
  x[1] = 3.0f;    // 1.5
  x[2] = 1.125f;  // 0.5625 -> e4m3 0.5625 (0x31)
  x[128] = 1.0f;  // block 1: f32 scale 1/448; ue8m0 2^-8
  std::vector<std::uint8_t> q(256), s8(2);
  std::vector<float> sf(2);
  mf::quantize_fp8_1x128(x, 1, 256, Fp8ScaleKind::f32, q, sf, {});
  EXPECT_EQ(sf[0], 2.0f);
  EXPECT_EQ(sf[1], 1.0f / 448.0f);
  EXPECT_EQ(q[0], 0x7E);
  EXPECT_EQ(q[1], 0x3C);
  EXPECT_EQ(q[2], 0x31);
  EXPECT_EQ(q[128], 0x7E);  // 1 / (1/448) = 448 after two roundings
  mf::quantize_fp8_1x128(x, 1, 256, Fp8ScaleKind::ue8m0, q, {}, s8);
  EXPECT_EQ(s8[0], 128);
  EXPECT_EQ(s8[1], 119);
  EXPECT_EQ(q[0], 0x7E);
  EXPECT_EQ(q[128], 0x78);  // 1 * 2^8 = 256
  std::vector<float> out(256);
  mf::dequantize_fp8(q, 1, 256, 1, Fp8ScaleKind::ue8m0, {}, s8, out);
  EXPECT_EQ(out[0], 896.0f);
  EXPECT_EQ(out[1], 3.0f);
  EXPECT_EQ(out[128], 1.0f);
  EXPECT_EQ(out[200], 0.0f);
}

TEST(Fp8, HandWorked128x128WithShortLastTile) {
  const std::int64_t rows = 130, k = 256;
  std::vector<float> w(rows * k, 0.5f);
  w[5 * k + 130] = 896.0f;    // tile (0, 1)
  w[129 * k + 0] = -4480.0f;  // tile (1, 0): rows 128..129 only
  std::vector<std::uint8_t> q(rows * k);
  std::vector<float> sf(4);
  mf::quantize_fp8_128x128(w, rows, k, Fp8ScaleKind::f32, q, sf, {});
  EXPECT_EQ(sf[0], 0.5f / 448.0f);
  EXPECT_EQ(sf[1], 2.0f);
  EXPECT_EQ(sf[2], 10.0f);
  EXPECT_EQ(sf[3], 0.5f / 448.0f);
  EXPECT_EQ(q[5 * k + 130], 0x7E);
  EXPECT_EQ(q[5 * k + 131], 0x28);  // 0.5 / 2 = 0.25 = 2^-2
  EXPECT_EQ(q[129 * k + 0], 0xFE);
  EXPECT_EQ(q[128 * k + 1], 0x15);  // 0.5 / 10 = 0.05 = 1.6 * 2^-5 -> 1.625 * 2^-5
  std::vector<float> out(rows * k);
  mf::dequantize_fp8(q, rows, k, 128, Fp8ScaleKind::f32, sf, {}, out);
  EXPECT_EQ(out[5 * k + 130], 896.0f);
  EXPECT_EQ(out[129 * k], -4480.0f);
}

void check_fp8_case(std::mt19937& gen, std::int64_t rows, std::int64_t k, int block_rows,
                    Fp8ScaleKind kind) {
  const auto x = random_matrix(gen, rows, k);
  const std::int64_t srows = (rows + block_rows - 1) / block_rows;
  std::vector<std::uint8_t> q(rows * k), s8(srows * k / 128);
  std::vector<float> sf(srows * k / 128), out(rows * k);
  if (block_rows == 1) {
    mf::quantize_fp8_1x128(x, rows, k, kind, q, sf, s8);
  } else {
    mf::quantize_fp8_128x128(x, rows, k, kind, q, sf, s8);
  }
  mf::dequantize_fp8(q, rows, k, block_rows, kind, sf, s8, out);
  for (std::int64_t sr = 0; sr < srows; ++sr) {
    for (std::int64_t b = 0; b < k / 128; ++b) {
      float amax = 0.0f;
      for (std::int64_t r = sr * block_rows; r < std::min(rows, (sr + 1) * block_rows); ++r) {
        amax = std::max(
            amax, mf::finite_abs_max(std::span<const float>(x).subspan(r * k + b * 128, 128)));
      }
      const auto si = static_cast<std::size_t>(sr * (k / 128) + b);
      if (kind == Fp8ScaleKind::f32) {
        ASSERT_EQ(sf[si], mf::fp8_f32_block_scale(amax)) << sr << "," << b;
      } else {
        ASSERT_EQ(s8[si], mf::fp8_pow2_block_scale(amax)) << sr << "," << b;
      }
    }
  }
  for (std::int64_t i = 0; i < rows * k; ++i) {
    const auto si = static_cast<std::size_t>((i / k) / block_rows * (k / 128) + (i % k) / 128);
    const double scale = kind == Fp8ScaleKind::f32 ? sf[si] : mf::ue8m0_to_float(s8[si]);
    const double allowed = e4m3_allowed_error(x[i] / scale) * scale + fp32_slack(x[i]);
    ASSERT_LE(std::fabs(static_cast<double>(out[i]) - x[i]), allowed) << "element " << i;
    const float expected_q_input =
        kind == Fp8ScaleKind::f32 ? x[i] / sf[si] : x[i] / mf::ue8m0_to_float(s8[si]);
    ASSERT_EQ(q[i], mf::e4m3_from_float(expected_q_input)) << "element " << i;
  }
}

TEST(Fp8, RandomMatricesStayWithinTheFormatBound) {
  const std::uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  for (const auto kind : {Fp8ScaleKind::f32, Fp8ScaleKind::ue8m0}) {
    SCOPED_TRACE(kind == Fp8ScaleKind::f32 ? "f32 scales" : "ue8m0 scales");
    check_fp8_case(gen, 19, 384, 1, kind);
    check_fp8_case(gen, 200, 256, 128, kind);
  }
}

TEST(Fp8, NonFiniteInputsStayInTheirElement) {
  std::vector<float> x(2 * 128);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>((i * 37) % 101) - 50.0f;
  auto zeroed = x;
  x[7] = kNaN;
  x[8] = kInf;
  x[9] = -kInf;
  zeroed[7] = zeroed[8] = zeroed[9] = 0.0f;
  for (const auto kind : {Fp8ScaleKind::f32, Fp8ScaleKind::ue8m0}) {
    std::vector<std::uint8_t> qd(256), qz(256), s8d(2), s8z(2);
    std::vector<float> sfd(2), sfz(2);
    mf::quantize_fp8_1x128(x, 2, 128, kind, qd, sfd, s8d);
    mf::quantize_fp8_1x128(zeroed, 2, 128, kind, qz, sfz, s8z);
    EXPECT_EQ(sfd, sfz);
    EXPECT_EQ(s8d, s8z);
    EXPECT_EQ(qd[7], 0x7F);
    EXPECT_EQ(qd[8], 0x7E);
    EXPECT_EQ(qd[9], 0xFE);
    for (int i = 0; i < 256; ++i) {
      if (i < 7 || i > 9) {
        EXPECT_EQ(qd[i], qz[i]) << i;
      }
    }
    std::vector<float> out(256);
    mf::dequantize_fp8(qd, 2, 128, 1, kind, sfd, s8d, out);
    EXPECT_TRUE(std::isnan(out[7]));
  }
}

TEST(Fp8, AllZeroBlocksAreExact) {
  std::vector<float> x(3 * 128, 0.0f);
  std::vector<std::uint8_t> q(3 * 128, 0x55), s8(1);
  std::vector<float> sf(3), out(3 * 128, 1.0f);
  mf::quantize_fp8_1x128(x, 3, 128, Fp8ScaleKind::f32, q, sf, {});
  for (float s : sf) EXPECT_EQ(s, 1.0f);
  mf::dequantize_fp8(q, 3, 128, 1, Fp8ScaleKind::f32, sf, {}, out);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  mf::quantize_fp8_128x128(x, 3, 128, Fp8ScaleKind::ue8m0, q, {}, s8);
  EXPECT_EQ(s8[0], 105);
  mf::dequantize_fp8(q, 3, 128, 128, Fp8ScaleKind::ue8m0, {}, s8, out);
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(Fp8, RejectsBadArguments) {
  std::vector<float> x(256), sf(2), out(256);
  std::vector<std::uint8_t> q(256), s8(2);
  expect_invalid("k", [&] { mf::quantize_fp8_1x128(x, 2, 64, Fp8ScaleKind::f32, q, sf, s8); });
  expect_invalid("scales_f32",
                 [&] { mf::quantize_fp8_1x128(x, 2, 128, Fp8ScaleKind::f32, q, {}, s8); });
  expect_invalid("scales_ue8m0",
                 [&] { mf::quantize_fp8_1x128(x, 2, 128, Fp8ScaleKind::ue8m0, q, sf, {}); });
  expect_invalid(
      "kind", [&] { mf::quantize_fp8_1x128(x, 2, 128, static_cast<Fp8ScaleKind>(7), q, sf, s8); });
  expect_invalid("q", [&] {
    mf::quantize_fp8_128x128(x, 2, 128, Fp8ScaleKind::f32, std::span<std::uint8_t>(q).first(5), sf,
                             s8);
  });
  expect_invalid("block_rows",
                 [&] { mf::dequantize_fp8(q, 2, 128, 64, Fp8ScaleKind::f32, sf, s8, out); });
}

}  // namespace
