// The NVFP4 kernel weight layout, checked by emulating the device decode on the CPU: every lane's
// fragment register of every k16 step must hold the checkpoint element the m16n8k16 A layout
// puts there, and the re-encoded scales must read as scale * 2^7 (exactly).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "megamoe/formats.hpp"
#include "runtime/nvfp4_kernel_layout.hpp"

namespace megamoe::runtime::nvfp4_layout {
namespace {

// IEEE binary16 bits -> float (subnormals included), written out so the test has no dependency.
float f16_to_float(std::uint32_t h) {
  const std::uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    v = man ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

constexpr std::uint32_t kFull = 0x8E008E00u, kMag = 0x0E000E00u, kSign = 0x80008000u;

// The device decode (nvfp4_fragment_decode.cuh) without the scale multiply: f16x2 registers,
// with the same mask-multiply-mask operations for a2 and a3.
void decode_word(std::uint32_t word, std::uint32_t (&r)[4]) {
  r[0] = word & kFull;
  r[1] = (word << 3) & kFull;
  r[2] = ((word & 0x20072007u) * ((1u << 9) + (1u << 2))) & kFull;
  r[3] = ((word & 0x40384038u) * ((1u << 6) + (1u << 1))) & kFull;
}

// The multiply places a2's (a3's) magnitude and sign as two separate shifts would: for every
// value of the 8 bits each mask keeps, whatever the other 24 bits hold.
TEST(Nvfp4KernelLayout, MultiplyPlacesLikeTwoShifts) {
  const int a2_bits[8] = {0, 1, 2, 13, 16, 17, 18, 29};
  const int a3_bits[8] = {3, 4, 5, 14, 19, 20, 21, 30};
  for (std::uint32_t other : {0u, 0xFFFFFFFFu, 0x5A5A5A5Au}) {
    for (std::uint32_t v = 0; v < 256; ++v) {
      for (int reg : {2, 3}) {
        const int* bits = reg == 2 ? a2_bits : a3_bits;
        std::uint32_t keep = 0, word = 0;
        for (int i = 0; i < 8; ++i) {
          keep |= 1u << bits[i];
          word |= ((v >> i) & 1u) << bits[i];
        }
        word |= other & ~keep;
        const std::uint32_t shifts = reg == 2 ? ((word << 9) & kMag) | ((word << 2) & kSign)
                                              : ((word << 6) & kMag) | ((word << 1) & kSign);
        std::uint32_t r[4];
        decode_word(word, r);
        ASSERT_EQ(r[reg], shifts) << "a" << reg << " word " << word;
      }
    }
  }
}

TEST(Nvfp4KernelLayout, HandWorkedWord) {
  // a0's even element = e2m1 0xB (-1.5): magnitude 3 at bits 9..11, sign at bit 15 -> 0x8600,
  // the f16 -1.5 * 2^-14.
  std::uint32_t r[4];
  decode_word(0x8600u, r);
  EXPECT_EQ(r[0], 0x8600u);
  EXPECT_EQ(r[1] | r[2] | r[3], 0u);
  EXPECT_EQ(f16_to_float(r[0]), -1.5f * 0x1p-14f);
  // a2's odd element = e2m1 0x1 (0.5, the subnormal case): magnitude bit 16 -> f16 0x0200 high.
  decode_word(0x00010000u, r);
  EXPECT_EQ(r[2], 0x02000000u);
  EXPECT_EQ(f16_to_float(r[2] >> 16), 0.5f * 0x1p-14f);
}

TEST(Nvfp4KernelLayout, ReencodedScalesReadAsScaleTimes128) {
  for (int c = 0; c <= 0x7E; ++c) {
    const std::uint8_t b = reencode_ue4m3(static_cast<std::uint8_t>(c));
    const float want = formats::ue4m3_to_float(static_cast<std::uint8_t>(c)) * 128.0f;
    EXPECT_EQ(f16_to_float(static_cast<std::uint32_t>(b) << 7), want) << "code " << c;
    if (c != 0) {
      EXPECT_GE((b >> 3), 1) << "normal f16 for code " << c;
    }
  }
  EXPECT_TRUE(std::isnan(f16_to_float(static_cast<std::uint32_t>(reencode_ue4m3(0x7F)) << 7)));
}

void check_matrix(Matrix m, std::int64_t inter, std::int64_t rows, std::int64_t k,
                  std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(rows * k / 2));
  std::vector<std::uint8_t> sf(static_cast<std::size_t>(rows * k / 16));
  for (auto& b : packed) b = static_cast<std::uint8_t>(rng());
  for (auto& b : sf) b = static_cast<std::uint8_t>(rng() % 0x7F);
  std::vector<std::uint8_t> q(packed.size()), qsf(sf.size());
  encode_expert(m, inter, rows, k, packed, sf, q, qsf);

  auto nibble = [&](std::int64_t row, std::int64_t col) {
    const std::uint8_t b = packed[static_cast<std::size_t>(row * (k / 2) + col / 2)];
    return (col & 1) ? (b >> 4) : (b & 0xF);
  };
  std::int64_t mismatches = 0;
  for (std::int64_t tile = 0; tile < rows / 64; ++tile) {
    for (int rg = 0; rg < 4; ++rg) {
      for (std::int64_t blk = 0; blk < k / 128; ++blk) {
        for (int step = 0; step < 8; ++step) {
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane / 4, t = lane % 4;
            const std::int64_t off = word_offset(k, tile, rg, blk, lane, step);
            std::uint32_t word = 0;
            for (int i = 0; i < 4; ++i)
              word |= std::uint32_t{q[static_cast<std::size_t>(off + i)]} << (8 * i);
            std::uint32_t r[4];
            decode_word(word, r);
            for (int j = 0; j < 4; ++j) {
              const std::int64_t row = source_row(m, inter, tile, rg, g + ((j & 1) ? 8 : 0));
              for (int hi = 0; hi < 2; ++hi) {
                const std::int64_t col = blk * 128 + step * 16 + (j >= 2 ? 8 : 0) + 2 * t + hi;
                const float got = f16_to_float((r[j] >> (16 * hi)) & 0xFFFFu) * 0x1p14f;
                mismatches +=
                    got != formats::e2m1_to_float(static_cast<std::uint8_t>(nibble(row, col)));
              }
            }
          }
          for (int g = 0; g < 8; ++g) {
            for (int h = 0; h < 2; ++h) {
              const std::int64_t row = source_row(m, inter, tile, rg, g + 8 * h);
              const std::uint8_t code =
                  sf[static_cast<std::size_t>(row * (k / 16) + blk * 8 + step)];
              const std::uint8_t b =
                  qsf[static_cast<std::size_t>(sf_offset(k, tile, rg, blk, g, step) + h)];
              mismatches +=
                  f16_to_float(std::uint32_t{b} << 7) != formats::ue4m3_to_float(code) * 128.0f;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "seed " << seed;
}

TEST(Nvfp4KernelLayout, W13FragmentsHoldTheirElements) {
  const std::uint64_t seed = std::random_device{}();
  check_matrix(Matrix::w13, 128, 256, 384, seed);  // I = 128: gate rows 0..127, up 128..255
}

TEST(Nvfp4KernelLayout, W2FragmentsHoldTheirElements) {
  const std::uint64_t seed = std::random_device{}();
  check_matrix(Matrix::w2, 256, 192, 256, seed);  // H = 192 rows, K = I = 256
}

TEST(Nvfp4KernelLayout, GateAndUpOfOneColumnTileShareATile) {
  EXPECT_EQ(source_row(Matrix::w13, 512, 3, 0, 5), 3 * 32 + 5);
  EXPECT_EQ(source_row(Matrix::w13, 512, 3, 1, 5), 3 * 32 + 16 + 5);
  EXPECT_EQ(source_row(Matrix::w13, 512, 3, 2, 5), 512 + 3 * 32 + 5);
  EXPECT_EQ(source_row(Matrix::w13, 512, 3, 3, 5), 512 + 3 * 32 + 16 + 5);
  EXPECT_EQ(source_row(Matrix::w2, 512, 2, 3, 7), 2 * 64 + 3 * 16 + 7);
}

}  // namespace
}  // namespace megamoe::runtime::nvfp4_layout
