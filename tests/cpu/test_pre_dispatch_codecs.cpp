// The e2m1 shortcuts of the FP4 pre-dispatch kernels (kernels/megamoe/formats/exact_codecs.cuh),
// compiled for the host (tests/support/megamoe/common.cuh models the intrinsics) and checked
// against the CPU formats: the fp32 and power-of-two bounds equal the fp64 ones, and the encoder
// fed with them gives e2m1(RN(x / d)) for every bf16 x.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../../kernels/megamoe/formats/exact_codecs.cuh"
#include "jit/compiler.hpp"
#include "jit_test_support.hpp"
#include "megamoe/formats.hpp"
#include "runtime/pre_dispatch_kernel.hpp"

namespace megamoe {
namespace {

namespace exact = device::exact;

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08X", v);
  return buf;
}

// The bounds of the fp64 divider (the reference of the CTA kernel, checked before).
void fp64_bounds(float d, std::uint32_t (&b)[7]) {
  const exact::E2m1Bf16x2Encoder enc{exact::E2m1Divider(d)};
  for (int k = 0; k < 7; ++k) b[k] = enc.bound[k];
}

::testing::AssertionResult fp32_bounds_match(float d) {
  std::uint32_t want[7], got[7];
  fp64_bounds(d, want);
  exact::e2m1_bf16x2_bounds_fp32(d, got);
  for (int k = 0; k < 7; ++k) {
    if (got[k] != want[k]) {
      return ::testing::AssertionFailure()
             << "d = " << d << " (" << hex(std::bit_cast<std::uint32_t>(d)) << ") bound " << k
             << ": fp32 " << hex(got[k]) << ", fp64 " << hex(want[k]);
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(PreDispatchCodecs, Fp32BoundsEqualFp64BoundsAboveTheLimit) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Every binade from 2^-100 to 2^127, random significands, and the binade edges.
  const std::uint32_t lo = std::bit_cast<std::uint32_t>(exact::kE2m1Fp32BoundsMinUnit);
  const std::uint32_t hi = std::bit_cast<std::uint32_t>(3.4028235e38f);
  std::uniform_int_distribution<std::uint32_t> bits(lo, hi);
  for (int i = 0; i < 5000000; ++i) {
    ASSERT_TRUE(fp32_bounds_match(std::bit_cast<float>(bits(rng))));
  }
  for (std::uint32_t e = lo >> 23; e < 255; ++e) {
    for (const std::uint32_t m : {0u, 1u, 0x7FFFFFu, 0x400000u, 0x2AAAABu}) {
      ASSERT_TRUE(fp32_bounds_match(std::bit_cast<float>((e << 23) | m)));
    }
  }
  // The units the NVFP4 kernel forms: UE4M3 scale * g for every scale code.
  std::uniform_real_distribution<float> log2g(-91.0f, 100.0f);
  for (int i = 0; i < 20000; ++i) {
    const float g = std::exp2(log2g(rng));
    for (std::uint32_t c = 1; c <= 0x7E; ++c) {
      const float unit = exact::ue4m3_value(c) * g;
      if (unit >= exact::kE2m1Fp32BoundsMinUnit) {
        ASSERT_TRUE(fp32_bounds_match(unit));
      }
    }
  }
}

TEST(PreDispatchCodecs, Pow2BoundsEqualFp64BoundsForEveryMxfp4Scale) {
  for (int e = -15; e <= 126; ++e) {
    std::uint32_t want[7], got[7];
    fp64_bounds(std::ldexp(1.0f, e), want);
    exact::e2m1_bf16x2_bounds_pow2(e, got);
    for (int k = 0; k < 7; ++k) {
      EXPECT_EQ(got[k], want[k]) << "d = 2^" << e << " bound " << k;
    }
  }
}

// Every bf16 x (NaN and Inf included) through the encoder with the given bounds, against the
// CPU's e2m1(RN(x / d)).
::testing::AssertionResult encoder_matches_cpu(const exact::E2m1Bf16x2Encoder& enc, float d) {
  for (std::uint32_t lo = 0; lo < 0x10000u; lo += 2) {
    const std::uint32_t pair = lo | ((lo + 1) << 16);
    const std::uint32_t codes = enc.codes(pair);
    for (int lane = 0; lane < 2; ++lane) {
      const auto bits = static_cast<std::uint16_t>(pair >> (16 * lane));
      const float x = formats::bf16_to_float(bits);
      const std::uint32_t want = formats::e2m1_from_float(x / d);
      const std::uint32_t got = (codes >> (16 * lane)) & 0xFu;
      if (got != want) {
        return ::testing::AssertionFailure()
               << "d = " << d << " x = " << x << " (bf16 0x" << std::hex << bits << "): got " << got
               << ", want " << want << std::dec;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(PreDispatchCodecs, EncoderWithFp32BoundsEqualsCpuForEveryBf16) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> log2g(-91.0f, 100.0f);
  std::uniform_int_distribution<std::uint32_t> code(1, 0x7E);
  for (int i = 0; i < 3000; ++i) {
    const float g = std::exp2(log2g(rng));
    const float unit = exact::ue4m3_value(code(rng)) * g;
    if (unit < exact::kE2m1Fp32BoundsMinUnit) continue;
    exact::E2m1Bf16x2Encoder enc;
    exact::e2m1_bf16x2_bounds_fp32(unit, enc.bound);
    ASSERT_TRUE(encoder_matches_cpu(enc, unit));
  }
}

TEST(PreDispatchCodecs, EncoderWithPow2BoundsEqualsCpuForEveryBf16) {
  for (int e = -15; e <= 126; ++e) {
    exact::E2m1Bf16x2Encoder enc;
    exact::e2m1_bf16x2_bounds_pow2(e, enc.bound);
    ASSERT_TRUE(encoder_matches_cpu(enc, std::ldexp(1.0f, e))) << "d = 2^" << e;
  }
}

// codes_high / pack_high (the row kernel's encoder) against codes / pack: every bf16 in each lane
// next to random partners, for NVFP4 units of every kind (fp32 and fp64 bounds) and every MXFP4
// scale, and random words through the packing.
TEST(PreDispatchCodecs, HighNibbleEncoderEqualsEncoder) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::uint32_t> word;
  std::uniform_real_distribution<float> log2g(-126.0f, 100.0f);
  std::uniform_int_distribution<std::uint32_t> code(1, 0x7E);
  std::vector<exact::E2m1Bf16x2Encoder> encoders;
  for (int i = 0; i < 200; ++i) {
    const float unit = exact::ue4m3_value(code(rng)) * std::exp2(log2g(rng));
    exact::E2m1Bf16x2Encoder enc{exact::E2m1Divider(unit)};
    if (unit >= exact::kE2m1Fp32BoundsMinUnit) exact::e2m1_bf16x2_bounds_fp32(unit, enc.bound);
    encoders.push_back(enc);
  }
  for (int e = -15; e <= 126; ++e) {
    exact::E2m1Bf16x2Encoder enc;
    exact::e2m1_bf16x2_bounds_pow2(e, enc.bound);
    encoders.push_back(enc);
  }
  for (const exact::E2m1Bf16x2Encoder& enc : encoders) {
    for (std::uint32_t v = 0; v < 0x10000u; ++v) {
      for (const std::uint32_t pair : {v | (word(rng) << 16), (word(rng) & 0xFFFFu) | (v << 16)}) {
        const std::uint32_t want = enc.codes(pair);
        const std::uint32_t got = enc.codes_high(pair);
        ASSERT_EQ((got >> 12) & 0xFu, want & 0xFu) << "pair " << hex(pair);
        ASSERT_EQ(got >> 28, (want >> 16) & 0xFu) << "pair " << hex(pair);
      }
    }
    for (int i = 0; i < 20000; ++i) {
      const std::uint32_t pairs[4] = {word(rng), word(rng), word(rng), word(rng)};
      ASSERT_EQ(enc.pack_high(pairs), enc.pack(pairs));
    }
  }
}

// A bound that is one bf16 step off must be caught (the comparison above can fail).
TEST(PreDispatchCodecs, EncoderCheckCatchesABoundOffByOneStep) {
  exact::E2m1Bf16x2Encoder enc;
  exact::e2m1_bf16x2_bounds_fp32(1.0f, enc.bound);
  enc.bound[3] += 0x00010001u;
  EXPECT_FALSE(encoder_matches_cpu(enc, 1.0f));
}

TEST(PreDispatchCodecs, Nvfp4BlockCodeFromPrecomputedDenominatorEqualsCpu) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> log2(-130.0f, 115.0f);
  std::uniform_real_distribution<float> ratio(0.0f, 1.0f);
  for (int i = 0; i < 1000000; ++i) {
    const float amax = std::exp2(log2(rng)) * 2688.0f;
    const float g = exact::nvfp4_global_from_amax(amax);
    ASSERT_EQ(g, formats::nvfp4_global_scale(amax)) << amax;
    const float block_amax = formats::round_to_bf16(amax * ratio(rng));
    ASSERT_EQ(exact::nvfp4_block_code_hw(block_amax, g * 6.0f),
              formats::nvfp4_block_scale(block_amax, g))
        << "block amax " << block_amax << " g " << g;
  }
}

TEST(PreDispatchCodecs, Bf16x16FiniteAmaxEqualsCpu) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::uint32_t> any_bits(0, 0xFFFF);
  // Mostly finite values, with NaN, +-Inf and the largest finite magnitudes mixed in.
  const std::uint16_t special[] = {0x7F80, 0xFF80, 0x7FC0, 0xFFFF, 0x7F81, 0x7F7F, 0xFF7F, 0x8000};
  for (int i = 0; i < 2000000; ++i) {
    std::uint32_t pairs[8];
    float values[16];
    const int mode = i % 4;  // random bits, specials, all non-finite, all zero magnitudes
    for (int j = 0; j < 16; ++j) {
      std::uint16_t b = static_cast<std::uint16_t>(any_bits(rng));
      if (mode == 1 && any_bits(rng) % 4 == 0) b = special[any_bits(rng) % 8];
      if (mode == 2) b = special[any_bits(rng) % 5];
      if (mode == 3) b = any_bits(rng) % 2 == 0 ? 0x0000 : 0x8000;
      values[j] = formats::bf16_to_float(b);
      if (j % 2 == 0) {
        pairs[j / 2] = b;
      } else {
        pairs[j / 2] |= static_cast<std::uint32_t>(b) << 16;
      }
    }
    const float want = formats::finite_abs_max(values);
    const float got =
        formats::bf16_to_float(static_cast<std::uint16_t>(exact::bf16x16_finite_amax(pairs)));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want)) << i;
  }
}

// Every layout of the FP4 row kernel compiles without spills (the registry compiles only the
// default one), and the launcher picks the layouts as documented.
TEST(PreDispatchCodecs, Fp4RowKernelLayoutsCompileWithoutSpills) {
  if (!jit::nvrtc_available()) GTEST_SKIP() << "built without NVRTC";
  for (const Format f : {Format::nvfp4, Format::mxfp4}) {
    for (const std::int64_t h : {2176, 7168, 8192}) {
      for (const int w : {1, 2, 4}) {
        MoEConfig c;
        c.shape.hidden = h;
        c.shape.intermediate = 256;
        c.shape.num_experts = 64;
        c.shape.top_k = 8;
        c.weight_format = c.act_format = f;
        c.max_tokens_per_rank = 256;
        const runtime::PreDispatchVariant v{false, false, true, false, w};
        ASSERT_EQ(runtime::pre_dispatch_fp4_warps_per_row(c, v), w);
        const jit::KernelRequest r = runtime::pre_dispatch_request(c, v);
        SCOPED_TRACE(r.entry);
        EXPECT_NE(r.entry.find("pre_dispatch_fp4_rows_kernel"), std::string::npos);
        test::expect_no_spills(*jit::compile(r));
      }
    }
  }
}

TEST(PreDispatchCodecs, Fp4LayoutDefaultsAndLimits) {
  MoEConfig c;
  c.shape.hidden = 7168;
  c.act_format = Format::nvfp4;
  EXPECT_EQ(runtime::pre_dispatch_fp4_warps_per_row(c, {}), 2);  // the measured default
  EXPECT_EQ(runtime::pre_dispatch_threads(c, {}), 128);
  runtime::PreDispatchVariant cta;
  cta.cta_per_row = true;
  EXPECT_EQ(runtime::pre_dispatch_fp4_warps_per_row(c, cta), 0);
  EXPECT_EQ(runtime::pre_dispatch_threads(c, cta), 224);
  c.shape.hidden = 16384;  // 32 steps for one warp: too many registers; 16 for two, 8 for four
  runtime::PreDispatchVariant one;
  one.fp4_warps_per_row = 1;
  EXPECT_EQ(runtime::pre_dispatch_fp4_warps_per_row(c, one), 0);
  EXPECT_EQ(runtime::pre_dispatch_fp4_warps_per_row(c, {}), 2);
  runtime::PreDispatchVariant four;
  four.fp4_warps_per_row = 4;
  EXPECT_EQ(runtime::pre_dispatch_fp4_warps_per_row(c, four), 4);
  c.act_format = Format::mxfp4;
  c.shape.hidden = 7168;
  EXPECT_EQ(runtime::pre_dispatch_fp4_warps_per_row(c, {}), 2);
  EXPECT_EQ(runtime::pre_dispatch_fp4_warps_per_row(c, four), 4);
  c.act_format = Format::fp8;
  EXPECT_EQ(runtime::pre_dispatch_fp4_warps_per_row(c, four), 0);
}

}  // namespace
}  // namespace megamoe
