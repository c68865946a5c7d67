#pragma once
// Comparing the outputs of two NVFP4 kernel versions that sum K in different orders (the
// pipelined kernel's interleaved K slices against the wide kernel's): their f32 results may differ
// in the last bits, and on rare elements such a difference reaches a rounding -- a bf16 combine
// slot or output, or with FP8 combine an e4m3 code or a block's scale (one element of 98 304 on
// the bench's inputs, bench/NOTES.md, twenty-second session) -- or, in FC1, an e2m1 code or a
// block scale of the re-quantized intermediate, which then moves a whole token row a little. A
// bitwise assertion between the two would therefore fail now and then on fresh random inputs
// with no fault in either kernel. These tests accept differences in a few token rows instead,
// each element close to the other relative to its row's largest magnitude; both outputs also pass
// the oracle's gates on their own. A kernel fault (a wrong column tile, scale, route or token)
// moves more rows, or moves elements further, and fails.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include "megamoe/formats.hpp"

namespace megamoe::test {

// A rounding flip in a bf16 slot moves a route's y by one bf16 step (at most 2^-7 of |y|), the
// output's own rounding by as much again; an e2m1 flip in FC1 moves one intermediate element by
// one e2m1 step, which FC2 spreads over the row at a fraction of that; routes of a token may partly
// cancel, so a route's |y| may exceed the row's largest output: 2^-5 leaves that headroom.
inline constexpr double kBf16SlotOrderTolerance = 1.0 / 32;
// An e4m3 code flip moves a route's y by one e4m3 step, at most 2^-3 of |y|.
inline constexpr double kFp8SlotOrderTolerance = 1.0 / 4;

struct OrderComparison {
  std::int64_t rows = 0, elements = 0;
  std::int64_t differing = 0;       // elements bitwise different
  std::int64_t differing_rows = 0;  // rows holding at least one of them
  std::int64_t allowed_rows = 0;    // the most such rows accepted
  std::int64_t beyond = 0;          // elements differing by more than the tolerance, or finite
                                    // against not
  std::int64_t first_beyond = -1;   // flat index of the first of those
  bool ok() const { return differing_rows <= allowed_rows && beyond == 0; }
  std::string describe() const {
    std::string s = std::to_string(differing) + " of " + std::to_string(elements) +
                    " elements differ, in " + std::to_string(differing_rows) + " of " +
                    std::to_string(rows) + " rows (at most " + std::to_string(allowed_rows) +
                    " accepted)";
    if (beyond > 0) {
      s += ", " + std::to_string(beyond) + " beyond the tolerance (first at flat index " +
           std::to_string(first_beyond) + ")";
    }
    return s;
  }
};

// At most one row in 32 (and 2 in any case) may differ.
inline std::int64_t order_differing_rows_allowed(std::int64_t rows) {
  return std::max<std::int64_t>(2, rows / 32);
}

// `a`, `b`: bf16 bits of [rows, width] outputs. An element may differ by at most `row_tolerance`
// times the largest finite |a| of its row.
inline OrderComparison compare_up_to_summation_order(std::span<const std::uint16_t> a,
                                                     std::span<const std::uint16_t> b,
                                                     std::int64_t width, double row_tolerance) {
  OrderComparison r;
  r.elements = static_cast<std::int64_t>(a.size());
  if (a.size() != b.size() || width <= 0 || r.elements % width != 0) {
    r.beyond = r.elements + 1;  // not comparable: never ok
    return r;
  }
  r.rows = r.elements / width;
  r.allowed_rows = order_differing_rows_allowed(r.rows);
  for (std::int64_t row0 = 0; row0 < r.elements; row0 += width) {
    double row_max = 0;
    for (std::int64_t j = row0; j < row0 + width; ++j) {
      const double v = formats::bf16_to_float(a[static_cast<std::size_t>(j)]);
      if (std::isfinite(v)) row_max = std::max(row_max, std::abs(v));
    }
    bool row_differs = false;
    for (std::int64_t j = row0; j < row0 + width; ++j) {
      const auto i = static_cast<std::size_t>(j);
      if (a[i] == b[i]) continue;
      ++r.differing;
      row_differs = true;
      const double x = formats::bf16_to_float(a[i]), y = formats::bf16_to_float(b[i]);
      const bool close =
          std::isfinite(x) && std::isfinite(y) && std::abs(x - y) <= row_tolerance * row_max;
      if (!close) {
        if (r.beyond == 0) r.first_beyond = j;
        ++r.beyond;
      }
    }
    if (row_differs) ++r.differing_rows;
  }
  return r;
}

}  // namespace megamoe::test
