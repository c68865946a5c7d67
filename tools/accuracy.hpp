#pragma once
// Accuracy metrics shared by the demo and the benchmarks: cosine similarity and relative L2 of
// an output against a reference, over whole tensors or blocks of rows.
#include <cstdint>
#include <span>

namespace megamoe::tool {

struct Accuracy {
  double cosine = 1.0;
  double rel_l2 = 0.0;
  std::int64_t non_finite = 0;  // NaN/Inf elements of the output
};

Accuracy compare(std::span<const double> out, std::span<const double> ref);

// The worst block of `block_rows` rows (rows of length `cols`): lowest cosine, highest rel-L2.
Accuracy compare_worst_block(std::span<const double> out, std::span<const double> ref,
                             std::int64_t cols, std::int64_t block_rows);

}  // namespace megamoe::tool
