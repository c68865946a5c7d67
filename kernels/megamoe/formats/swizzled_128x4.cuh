#pragma once
// Where scale (row, col) of a [rows, cols] UE4M3 scale matrix sits in the 128x4-swizzled layout
// of checkpoints (docs/design.md §3; the CPU twin is formats::swizzled_128x4_offset): tiles of
// 128 rows x 4 columns, 512 bytes each, row-major over tiles; inside a tile row r keeps its four
// bytes at (r % 32) * 16 + (r / 32) * 4.
#include "megamoe/common.cuh"

namespace megamoe::device::scale_layout {

// `padded_cols` = cols rounded up to 4 (the layout pads every matrix to whole tiles).
MEGAMOE_DEVICE i64 swizzled_128x4_offset(i64 row, i64 col, i64 padded_cols) {
  const i64 tile = (row / 128) * (padded_cols / 4) + col / 4;
  const i64 r = row % 128;
  return tile * 512 + (r % 32) * 16 + (r / 32) * 4 + col % 4;
}

}  // namespace megamoe::device::scale_layout
