#pragma once
// What each participant adds to a barrier counter (comm/rank_barrier.cuh), apart from the memory
// operations that carry it, so that a CPU test can check the generation trick on the same code
// (tests/cpu/test_barrier_arrivals.cpp).
//
// Generation trick: in one barrier instance the participants' additions sum to exactly 2^31, so
// the counter's top bit flips precisely when the last participant arrives, in any arrival order,
// and its low 31 bits come back to where they were. Nothing needs zeroing between calls and the
// participant count may change from one call to the next.
#include "megamoe/common.cuh"

namespace megamoe::device {

// Rank-local barrier over n CTAs: CTA 0 adds 2^31 - (n - 1), the others 1.
MEGAMOE_DEVICE u32 arrival_value(bool first, u32 participants) {
  return first ? 0x80000000u - (participants - 1u) : 1u;
}

// Rank p's part of a cross-rank barrier instance: the parts of the R ranks sum to 2^31, so each
// rank's CTAs can split its part among themselves knowing only their own count.
MEGAMOE_DEVICE u32 rank_share(int rank, int num_ranks) {
  const u32 r = static_cast<u32>(num_ranks);
  return 0x80000000u / r + (rank == 0 ? 0x80000000u % r : 0u);
}

// Cross-rank barrier: what CTA `cta_in_rank` of a rank with n CTAs adds to every rank's counter.
MEGAMOE_DEVICE u32 cross_rank_arrival(int rank, int num_ranks, int cta_in_rank, int n) {
  return cta_in_rank == 0 ? rank_share(rank, num_ranks) - static_cast<u32>(n - 1) : 1u;
}

}  // namespace megamoe::device
