// The 128x4 swizzled block-scaling layout of cuBLAS ("1D block scaling factors layout") and
// TensorRT-LLM NVFP4 checkpoints (docs/formats.md, "Scale layouts").
//
// The row-major scale matrix [rows, cols] is padded to [round_up(rows, 128), round_up(cols, 4)]
// and cut into 128x4 tiles of 512 bytes, stored tile-row by tile-row (the 4-column direction
// fastest). Inside a tile, row r and column c sit at (r % 32) * 16 + (r / 32) * 4 + c: the
// 128 rows are four 32-row groups interleaved so that one 16-byte line holds the 4 scales of
// rows r, r+32, r+64 and r+96.
#include <algorithm>
#include <cstdint>
#include <span>

#include "core/formats/codec_detail.hpp"
#include "megamoe/formats.hpp"

namespace megamoe::formats {
namespace {

using detail::to_str;

constexpr std::int64_t kTileRows = 128;
constexpr std::int64_t kTileCols = 4;
constexpr std::int64_t kTileBytes = kTileRows * kTileCols;

std::int64_t round_up(std::int64_t v, std::int64_t m) {
  return (v + m - 1) / m * m;
}

void check_shape(std::int64_t rows, std::int64_t cols) {
  if (rows < 0) throw_invalid("rows", "must be >= 0", to_str(rows));
  if (cols < 0) throw_invalid("cols", "must be >= 0", to_str(cols));
}

std::int64_t offset_in_tiles(std::int64_t row, std::int64_t col, std::int64_t tiles_per_row) {
  const std::int64_t tile = (row / kTileRows) * tiles_per_row + col / kTileCols;
  const std::int64_t r = row % kTileRows;
  return tile * kTileBytes + (r % 32) * 16 + (r / 32) * 4 + col % kTileCols;
}

}  // namespace

std::int64_t swizzled_128x4_size(std::int64_t rows, std::int64_t cols) {
  check_shape(rows, cols);
  return round_up(rows, kTileRows) * round_up(cols, kTileCols);
}

std::int64_t swizzled_128x4_offset(std::int64_t row, std::int64_t col, std::int64_t cols) {
  if (row < 0) throw_invalid("row", "must be >= 0", to_str(row));
  if (col < 0 || col >= round_up(cols, kTileCols)) {
    throw_invalid(
        "col",
        "must lie in [0, round_up(cols, 4)) = [0, " + to_str(round_up(cols, kTileCols)) + ")",
        to_str(col));
  }
  return offset_in_tiles(row, col, round_up(cols, kTileCols) / kTileCols);
}

void swizzle_128x4(std::span<const std::uint8_t> row_major, std::int64_t rows, std::int64_t cols,
                   std::span<std::uint8_t> out) {
  const std::int64_t size = swizzled_128x4_size(rows, cols);
  detail::check_size("row_major", row_major.size(), rows * cols);
  detail::check_size("out", out.size(), size);
  std::fill_n(out.begin(), size, std::uint8_t{0});
  const std::int64_t tiles_per_row = round_up(cols, kTileCols) / kTileCols;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      out[static_cast<std::size_t>(offset_in_tiles(r, c, tiles_per_row))] =
          row_major[static_cast<std::size_t>(r * cols + c)];
    }
  }
}

void unswizzle_128x4(std::span<const std::uint8_t> swizzled, std::int64_t rows, std::int64_t cols,
                     std::span<std::uint8_t> out) {
  detail::check_size("swizzled", swizzled.size(), swizzled_128x4_size(rows, cols));
  detail::check_size("out", out.size(), rows * cols);
  const std::int64_t tiles_per_row = round_up(cols, kTileCols) / kTileCols;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      out[static_cast<std::size_t>(r * cols + c)] =
          swizzled[static_cast<std::size_t>(offset_in_tiles(r, c, tiles_per_row))];
    }
  }
}

}  // namespace megamoe::formats
