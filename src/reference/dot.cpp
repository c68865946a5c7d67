#include "reference/dot.hpp"

namespace megamoe::reference::detail {
namespace {

// Separate multiply and add (no FMA contraction: ISO C++ mode), so every build agrees.
template <class S>
inline S dot_lanes(const S* a, const S* b, std::int64_t n) {
  S acc[kDotLanes] = {};
  std::int64_t k = 0;
  for (; k + kDotLanes <= n; k += kDotLanes) {
    for (int l = 0; l < kDotLanes; ++l) acc[l] += a[k + l] * b[k + l];
  }
  for (int l = 0; k + l < n; ++l) acc[l] += a[k + l] * b[k + l];
  for (int w = kDotLanes / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

}  // namespace

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define MEGAMOE_DOT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MEGAMOE_DOT_CLONES
#endif

MEGAMOE_DOT_CLONES float dot(const float* a, const float* b, std::int64_t n) {
  return dot_lanes(a, b, n);
}

MEGAMOE_DOT_CLONES double dot(const double* a, const double* b, std::int64_t n) {
  return dot_lanes(a, b, n);
}

}  // namespace megamoe::reference::detail
