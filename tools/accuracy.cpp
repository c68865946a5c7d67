#include "accuracy.hpp"

#include <algorithm>
#include <cmath>

#include "megamoe/error.hpp"

namespace megamoe::tool {

Accuracy compare(std::span<const double> out, std::span<const double> ref) {
  if (out.size() != ref.size()) throw_invalid("out", "must have as many elements as ref");
  Accuracy a;
  double dot = 0, oo = 0, rr = 0, dd = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) {
      ++a.non_finite;
      continue;
    }
    dot += out[i] * ref[i];
    oo += out[i] * out[i];
    rr += ref[i] * ref[i];
    dd += (out[i] - ref[i]) * (out[i] - ref[i]);
  }
  // Two all-zero tensors agree exactly; one zero and one not do not.
  a.cosine = (oo == 0 && rr == 0) ? 1.0 : (oo == 0 || rr == 0) ? 0.0 : dot / std::sqrt(oo * rr);
  a.rel_l2 = rr == 0 ? (dd == 0 ? 0.0 : INFINITY) : std::sqrt(dd / rr);
  return a;
}

Accuracy compare_worst_block(std::span<const double> out, std::span<const double> ref,
                             std::int64_t cols, std::int64_t block_rows) {
  if (cols <= 0 || block_rows <= 0) throw_invalid("block", "cols and block_rows must be > 0");
  const auto rows = static_cast<std::int64_t>(ref.size()) / cols;
  Accuracy worst;
  for (std::int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    const auto begin = static_cast<std::size_t>(r0 * cols);
    const auto n = static_cast<std::size_t>(std::min(block_rows, rows - r0) * cols);
    const Accuracy a = compare(out.subspan(begin, n), ref.subspan(begin, n));
    worst.cosine = std::min(worst.cosine, a.cosine);
    worst.rel_l2 = std::max(worst.rel_l2, a.rel_l2);
    worst.non_finite += a.non_finite;
  }
  return worst;
}

}  // namespace megamoe::tool
