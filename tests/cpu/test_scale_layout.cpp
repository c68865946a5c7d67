// The 128x4 swizzled scale layout: hand-checked offsets, sizes, exact round trips.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"

namespace mf = megamoe::formats;

namespace {

TEST(ScaleLayout, PaddedSize) {
  EXPECT_EQ(mf::swizzled_128x4_size(1, 1), 512);
  EXPECT_EQ(mf::swizzled_128x4_size(128, 4), 512);
  EXPECT_EQ(mf::swizzled_128x4_size(129, 5), 256 * 8);
  EXPECT_EQ(mf::swizzled_128x4_size(4096, 256), 4096 * 256);
  EXPECT_EQ(mf::swizzled_128x4_size(0, 3), 0);
  EXPECT_THROW(mf::swizzled_128x4_size(-1, 3), megamoe::InvalidArgument);
}

TEST(ScaleLayout, HandCheckedOffsets) {
  // cols = 5 pads to 8: two 512-byte tiles per 128-row band. In a tile, row r and column c sit
  // at (r % 32) * 16 + (r / 32) * 4 + c.
  const std::int64_t cols = 5;
  EXPECT_EQ(mf::swizzled_128x4_offset(0, 0, cols), 0);
  EXPECT_EQ(mf::swizzled_128x4_offset(0, 1, cols), 1);
  EXPECT_EQ(mf::swizzled_128x4_offset(0, 3, cols), 3);
  EXPECT_EQ(mf::swizzled_128x4_offset(0, 4, cols), 512);  // second tile of the band
  EXPECT_EQ(mf::swizzled_128x4_offset(1, 0, cols), 16);
  EXPECT_EQ(mf::swizzled_128x4_offset(31, 0, cols), 496);
  EXPECT_EQ(mf::swizzled_128x4_offset(32, 0, cols), 4);
  EXPECT_EQ(mf::swizzled_128x4_offset(33, 2, cols), 22);
  EXPECT_EQ(mf::swizzled_128x4_offset(64, 0, cols), 8);
  EXPECT_EQ(mf::swizzled_128x4_offset(96, 3, cols), 15);
  EXPECT_EQ(mf::swizzled_128x4_offset(127, 3, cols), 511);
  EXPECT_EQ(mf::swizzled_128x4_offset(128, 0, cols), 1024);  // second band
  EXPECT_EQ(mf::swizzled_128x4_offset(130, 5, cols), 1536 + 32 + 1);
  EXPECT_EQ(mf::swizzled_128x4_offset(200, 4, 12), (1 * 3 + 1) * 512 + 8 * 16 + 2 * 4);
  EXPECT_THROW(mf::swizzled_128x4_offset(0, 8, cols), megamoe::InvalidArgument);
  EXPECT_THROW(mf::swizzled_128x4_offset(-1, 0, cols), megamoe::InvalidArgument);
}

TEST(ScaleLayout, SwizzleWritesHandCheckedBytesAndZeroPadding) {
  // 2 x 3 scales: bytes 1..6. Padded to one 128x4 tile.
  const std::vector<std::uint8_t> rm = {1, 2, 3, 4, 5, 6};
  std::vector<std::uint8_t> sw(512, 0xEE);
  mf::swizzle_128x4(rm, 2, 3, sw);
  std::vector<std::uint8_t> expected(512, 0);
  expected[0] = 1;
  expected[1] = 2;
  expected[2] = 3;
  expected[16] = 4;
  expected[17] = 5;
  expected[18] = 6;
  EXPECT_EQ(sw, expected);
}

TEST(ScaleLayout, RandomSizesRoundTripExactly) {
  const std::uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> rows_dist(1, 400);
  std::uniform_int_distribution<int> cols_dist(1, 40);
  std::uniform_int_distribution<int> byte(1, 255);  // nonzero, so padding is recognisable
  for (int trial = 0; trial < 50; ++trial) {
    const std::int64_t rows = rows_dist(gen);
    const std::int64_t cols = cols_dist(gen);
    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
    std::vector<std::uint8_t> rm(static_cast<std::size_t>(rows * cols));
    for (auto& b : rm) b = static_cast<std::uint8_t>(byte(gen));
    const std::int64_t size = mf::swizzled_128x4_size(rows, cols);
    std::vector<std::uint8_t> sw(static_cast<std::size_t>(size), 0xEE);
    mf::swizzle_128x4(rm, rows, cols, sw);

    // Every scale lands on its own offset inside the buffer; everything else is zero padding.
    std::vector<int> hits(static_cast<std::size_t>(size), 0);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::int64_t off = mf::swizzled_128x4_offset(r, c, cols);
        ASSERT_GE(off, 0);
        ASSERT_LT(off, size);
        ++hits[static_cast<std::size_t>(off)];
        ASSERT_EQ(sw[static_cast<std::size_t>(off)], rm[static_cast<std::size_t>(r * cols + c)]);
      }
    }
    for (std::int64_t i = 0; i < size; ++i) {
      ASSERT_LE(hits[static_cast<std::size_t>(i)], 1) << "offset " << i << " used twice";
      if (hits[static_cast<std::size_t>(i)] == 0) {
        ASSERT_EQ(sw[static_cast<std::size_t>(i)], 0);
      }
    }

    std::vector<std::uint8_t> back(rm.size(), 0);
    mf::unswizzle_128x4(sw, rows, cols, back);
    ASSERT_EQ(back, rm);
  }
}

TEST(ScaleLayout, RejectsUndersizedBuffers) {
  const std::vector<std::uint8_t> rm(10 * 3);
  std::vector<std::uint8_t> sw(511);
  try {
    mf::swizzle_128x4(rm, 10, 3, sw);
    FAIL() << "expected InvalidArgument";
  } catch (const megamoe::InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "out");
  }
  std::vector<std::uint8_t> out(29);
  std::vector<std::uint8_t> full(512);
  try {
    mf::unswizzle_128x4(full, 10, 3, out);
    FAIL() << "expected InvalidArgument";
  } catch (const megamoe::InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "out");
  }
  try {
    mf::swizzle_128x4(std::span<const std::uint8_t>(rm).first(29), 10, 3, full);
    FAIL() << "expected InvalidArgument";
  } catch (const megamoe::InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "row_major");
  }
}

}  // namespace
