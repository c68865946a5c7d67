#pragma once
// The one dot product of the oracle. Its summation order is part of the numerics contract
// (docs/reference.md, "Dot products"): element k goes to lane k mod 16, each lane adds in
// increasing k, then the lanes are folded pairwise (lane l += lane l + w for w = 8, 4, 2, 1).
// Fixed lanes vectorize without -ffast-math and give the same bits on every machine.
#include <cstdint>

namespace megamoe::reference::detail {

inline constexpr int kDotLanes = 16;

float dot(const float* a, const float* b, std::int64_t n);
double dot(const double* a, const double* b, std::int64_t n);

}  // namespace megamoe::reference::detail
