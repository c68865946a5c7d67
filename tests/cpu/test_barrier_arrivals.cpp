// The generation trick of the kernels' barriers (kernels/megamoe/comm/barrier_arrivals.cuh),
// compiled for the host: what each participant adds is simulated on a 32-bit counter in random
// arrival orders, over consecutive instances with participant counts that change between them.
// The top bit must flip exactly at the last arrival of an instance, never before, and the low 31
// bits must come back to where they started (the next instance relies on it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../../kernels/megamoe/comm/barrier_arrivals.cuh"

namespace megamoe {
namespace {

constexpr std::uint32_t kTop = 0x80000000u;

// Adds `arrivals` to `counter` in the given order; returns an empty string when the top bit flips
// exactly at the last one and the low bits end where they began, else what went wrong.
std::string run_instance(std::uint32_t& counter, const std::vector<std::uint32_t>& arrivals) {
  const std::uint32_t start = counter;
  for (std::size_t i = 0; i < arrivals.size(); ++i) {
    counter += arrivals[i];
    const bool flipped = ((counter ^ start) & kTop) != 0;
    const bool last = i + 1 == arrivals.size();
    if (flipped != last) {
      return "top bit " + std::string(flipped ? "flipped" : "unchanged") + " after arrival " +
             std::to_string(i + 1) + " of " + std::to_string(arrivals.size());
    }
  }
  if ((counter & ~kTop) != (start & ~kTop)) return "low 31 bits did not come back";
  return "";
}

TEST(BarrierArrivals, RankLocalFlipsAtTheLastOfAnyOrder) {
  std::mt19937_64 rng(std::random_device{}());
  std::uint32_t counter = 0;
  for (int instance = 0; instance < 200; ++instance) {
    const auto n = static_cast<std::uint32_t>(std::uniform_int_distribution<int>(1, 1056)(rng));
    std::vector<std::uint32_t> arrivals;
    for (std::uint32_t c = 0; c < n; ++c) arrivals.push_back(device::arrival_value(c == 0, n));
    std::shuffle(arrivals.begin(), arrivals.end(), rng);
    const std::string why = run_instance(counter, arrivals);
    EXPECT_EQ(why, "") << "instance " << instance << ", " << n << " CTAs";
  }
}

// Every CTA of every rank adds cross_rank_arrival(...) to every rank's counter. Ranks may have
// different CTA counts (each knows only its own), R need not be a power of two, and every rank's
// counter sees the arrivals in its own order.
TEST(BarrierArrivals, CrossRankFlipsEveryRanksCounterAtTheLastArrival) {
  std::mt19937_64 rng(std::random_device{}());
  for (int num_ranks = 1; num_ranks <= 8; ++num_ranks) {
    std::vector<std::uint32_t> counters(static_cast<std::size_t>(num_ranks), 0u);
    for (int instance = 0; instance < 40; ++instance) {
      std::vector<std::uint32_t> arrivals;
      for (int rank = 0; rank < num_ranks; ++rank) {
        const int n = std::uniform_int_distribution<int>(1, 132)(rng);
        for (int cta = 0; cta < n; ++cta) {
          arrivals.push_back(device::cross_rank_arrival(rank, num_ranks, cta, n));
        }
      }
      for (int p = 0; p < num_ranks; ++p) {
        std::shuffle(arrivals.begin(), arrivals.end(), rng);
        const std::string why = run_instance(counters[static_cast<std::size_t>(p)], arrivals);
        EXPECT_EQ(why, "") << "R = " << num_ranks << ", counter of rank " << p << ", instance "
                           << instance;
      }
    }
  }
}

TEST(BarrierArrivals, RankSharesSumToTwoToThe31) {
  for (int num_ranks = 1; num_ranks <= 8; ++num_ranks) {
    std::uint64_t sum = 0;
    for (int rank = 0; rank < num_ranks; ++rank) sum += device::rank_share(rank, num_ranks);
    EXPECT_EQ(sum, std::uint64_t{kTop}) << "R = " << num_ranks;
  }
}

}  // namespace
}  // namespace megamoe
