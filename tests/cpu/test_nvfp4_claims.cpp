// Claimed work units of the pipelined NVFP4 MegaMoE kernel (scheduler/nvfp4_claims.cuh), run on
// the CPU: one thread per CTA walks both phases against shared claim words, and a scheduler
// grants the word operations one at a time, always to the CTA with the earliest simulated clock
// (CTAs stream at different random rates; ties broken by a seeded draw). Checked: every unit of
// both phases runs exactly once, FC1 before FC2 in every CTA, FP8-combine column pairs back to
// back in one CTA, a CTA's own range sub-tile-major, and -- the point of stealing -- the phases
// end no later than under the static split and within a few units of the ideal.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "core/buffer_plan_detail.hpp"
#include "megamoe/scheduler/nvfp4_claims.cuh"

namespace megamoe::device::nvfp4_pipe {
namespace {

static_assert(kMaxClaimCtas == megamoe::kMaxWorkClaimCtas,
              "the sync region's work-claim slots (buffer plan) match the kernel's");

// Grants shared-word operations one at a time: a CTA thread calls turn() before each and runs
// alone until its next turn(), barrier() or done(). The grant goes to the waiting CTA with the
// smallest clock once no CTA is running.
class Interleaver {
 public:
  Interleaver(int n, std::uint64_t seed) : state_(n, kRunning), clock_(n, 0.0), rng_(seed) {}

  void turn(int c, double clock) {
    std::unique_lock<std::mutex> lk(m_);
    state_[c] = kWaiting;
    clock_[c] = clock;
    grant_locked();
    cv_.wait(lk, [&] { return granted_ == c; });
    granted_ = -1;
    state_[c] = kRunning;
  }
  // Every CTA's clock becomes the latest arrival's.
  double barrier(int c, double clock) {
    std::unique_lock<std::mutex> lk(m_);
    state_[c] = kBarrier;
    clock_[c] = clock;
    const int gen = generation_;
    if (std::count(state_.begin(), state_.end(), kBarrier) ==
        static_cast<long>(state_.size()) - std::count(state_.begin(), state_.end(), kDone)) {
      release_ = *std::max_element(clock_.begin(), clock_.end());
      for (auto& s : state_) {
        if (s == kBarrier) s = kRunning;
      }
      ++generation_;
      cv_.notify_all();
    } else {
      grant_locked();
      cv_.wait(lk, [&] { return generation_ != gen; });
    }
    return release_;
  }
  void done(int c) {
    std::unique_lock<std::mutex> lk(m_);
    state_[c] = kDone;
    grant_locked();
  }

 private:
  enum State { kRunning, kWaiting, kBarrier, kDone };
  void grant_locked() {
    if (granted_ >= 0) return;
    int best = -1, ties = 0;
    for (std::size_t i = 0; i < state_.size(); ++i) {
      if (state_[i] == kRunning) return;
      if (state_[i] != kWaiting) continue;
      const int c = static_cast<int>(i);
      if (best < 0 || clock_[i] < clock_[static_cast<std::size_t>(best)]) {
        best = c;
        ties = 1;
      } else if (clock_[i] == clock_[static_cast<std::size_t>(best)] && rng_() % ++ties == 0) {
        best = c;
      }
    }
    if (best < 0) return;
    granted_ = best;
    cv_.notify_all();
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<State> state_;
  std::vector<double> clock_;
  std::mt19937_64 rng_;
  int granted_ = -1;
  int generation_ = 0;
  double release_ = 0.0;
};

using UnitKey = std::tuple<int, int, int, int>;  // phase, tile, sub, col

struct Outcome {
  std::vector<std::vector<Unit>> units;  // per CTA, in order
  double end[2] = {0.0, 0.0};            // when the last CTA finished each phase
};

template <int EL, int BM, int NS, int CT1, int CT2>
Outcome simulate(const std::vector<int>& count, int nctas, bool steal, bool fp8_combine,
                 std::uint64_t seed) {
  std::vector<int> prefix(EL + 1, 0);
  for (int e = 0; e < EL; ++e) prefix[e + 1] = prefix[e] + (count[e] + BM - 1) / BM;
  const int tiles = prefix[EL];
  std::mt19937_64 rates_rng(seed ^ 0x5eedull);
  std::vector<double> rate(static_cast<std::size_t>(nctas));
  for (auto& r : rate) r = 0.9 + 0.2 * static_cast<double>(rates_rng() % 1000) / 1000.0;

  std::vector<ClaimWord> words(2 * static_cast<std::size_t>(nctas), 0);
  Interleaver il(nctas, seed);
  Outcome out;
  out.units.resize(static_cast<std::size_t>(nctas));
  std::vector<double> finish(2 * static_cast<std::size_t>(nctas), 0.0);

  auto body = [&](int cta) {
    Schedule<EL, BM, NS, CT1, CT2> sched{prefix.data(), count.data(), {0, 0}, {0, 0}};
    double clock = 0.0;
    int b_tile = -1, b_sub = -1, b_phase = -1;
    struct Ops {
      int cta, nctas, phase;
      std::vector<ClaimWord>* words;
      Interleaver* il;
      double* clock;
      ClaimPhase p;
      const std::vector<double>* rate;
      std::vector<Unit>* sink;
      int *b_tile, *b_sub, *b_phase;
      ClaimWord& word(int c) const { return (*words)[static_cast<std::size_t>(phase * nctas + c)]; }
      ClaimWord issue_front() const {
        il->turn(cta, *clock);
        const ClaimWord old = word(cta);
        word(cta) += kFrontClaim;
        return old;
      }
      ClaimWord resolve(ClaimWord w) const { return w; }
      ClaimWord claim_back(int v) const {
        il->turn(cta, *clock);
        const ClaimWord old = word(v);
        word(v) += kBackClaim;
        return old;
      }
      int best_victim(int& left) const {
        il->turn(cta, *clock);
        int best = cta;
        left = 0;
        for (int v = 0; v < nctas; ++v) {
          int lo, hi;
          claimable_range(p.items, v, nctas, lo, hi);
          const int n = unclaimed_items(word(v), lo, hi);
          if (v != cta && n > left) {
            left = n;
            best = v;
          }
        }
        return best;
      }
      void emit(const Unit& u) const {
        sink->push_back(u);
        // Cost: FC1 units stream twice FC2's bytes at dsv4-flash; a token tile load when the
        // (phase, tile, sub-tile) changes.
        double cost = u.phase == 0 ? 2.0 : 1.0;
        if (u.tileg != *b_tile || u.sub != *b_sub || u.phase != *b_phase) cost += 0.3;
        *b_tile = u.tileg;
        *b_sub = u.sub;
        *b_phase = u.phase;
        *clock += cost / (*rate)[static_cast<std::size_t>(cta)];
      }
    };
    for (int ph = 0; ph < 2; ++ph) {
      const ClaimPhase p = claim_phase<CT1, CT2>(ph, tiles, fp8_combine);
      Ops ops{cta,     nctas,  ph,
              &words,  &il,    &clock,
              p,       &rate,  &out.units[static_cast<std::size_t>(cta)],
              &b_tile, &b_sub, &b_phase};
      walk_claimed_phase(sched, p, cta, nctas, steal, ops);
      finish[static_cast<std::size_t>(ph * nctas + cta)] = clock;
      clock = il.barrier(cta, clock);
    }
    il.done(cta);
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(nctas));
  for (int c = 0; c < nctas; ++c) threads.emplace_back(body, c);
  for (auto& t : threads) t.join();
  out.end[0] = *std::max_element(finish.begin(), finish.begin() + nctas);
  out.end[1] = *std::max_element(finish.begin() + nctas, finish.end());
  return out;
}

template <int EL, int BM, int NS, int CT1, int CT2>
void check(const std::vector<int>& count, int nctas, bool fp8_combine, std::uint64_t seed) {
  std::vector<int> prefix(EL + 1, 0);
  for (int e = 0; e < EL; ++e) prefix[e + 1] = prefix[e] + (count[e] + BM - 1) / BM;
  const int tiles = prefix[EL];
  std::multiset<UnitKey> want;
  for (int ph = 0; ph < 2; ++ph) {
    for (int t = 0; t < tiles; ++t) {
      const int e = schedule_expert_of_tile<EL>(prefix.data(), t);
      const int live = std::min(BM, count[e] - (t - prefix[e]) * BM);
      for (int sub = 0; sub * NS < live; ++sub) {
        for (int col = 0; col < (ph == 0 ? CT1 : CT2); ++col) want.insert({ph, t, sub, col});
      }
    }
  }
  const std::string where = "seed " + std::to_string(seed) + " ctas " + std::to_string(nctas) +
                            (fp8_combine ? " fp8_combine" : "");
  Outcome fixed;
  for (bool steal : {false, true}) {
    const Outcome o = simulate<EL, BM, NS, CT1, CT2>(count, nctas, steal, fp8_combine, seed);
    std::multiset<UnitKey> got;
    for (int cta = 0; cta < nctas; ++cta) {
      const auto& us = o.units[static_cast<std::size_t>(cta)];
      int last_phase = 0;
      for (std::size_t i = 0; i < us.size(); ++i) {
        const Unit& u = us[i];
        ASSERT_GE(u.phase, last_phase) << "FC2 unit before an FC1 unit, " << where;
        last_phase = u.phase;
        if (fp8_combine && u.phase == 1 && u.col % 2 == 0) {
          ASSERT_LT(i + 1, us.size()) << "even FP8-combine column last, " << where;
          const Unit& v = us[i + 1];
          ASSERT_TRUE(v.phase == 1 && v.tileg == u.tileg && v.sub == u.sub && v.col == u.col + 1)
              << "FP8-combine column pair split, " << where;
        }
        got.insert({u.phase, u.tileg, u.sub, u.col});
      }
      if (!steal) {
        // Without thieves a CTA runs exactly its static range, sub-tile-major per tile.
        std::map<std::pair<int, int>, int> last_sub;
        for (const Unit& u : us) {
          auto [it, fresh] = last_sub.try_emplace({u.phase, u.tileg}, u.sub);
          if (!fresh) {
            ASSERT_GE(u.sub, it->second) << "sub-tiles out of order, " << where;
            it->second = u.sub;
          }
        }
      }
    }
    ASSERT_EQ(got, want) << "units missed or repeated, steal " << steal << ", " << where;
    if (!steal) {
      fixed = o;
    } else {
      for (int ph = 0; ph < 2; ++ph) {
        // One unit plus a token tile load at the slowest rate is the noise of who runs last.
        EXPECT_LE(o.end[ph], fixed.end[ph] + (ph == 0 ? 2.3 : 1.3) / 0.9)
            << "stealing ended phase " << ph << " later, " << where;
      }
    }
  }
}

template <int EL, int BM, int NS, int CT1, int CT2>
void random_cases(std::uint64_t seed, int max_count, std::initializer_list<int> ctas) {
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 8; ++round) {
    std::vector<int> count(EL, 0);
    const int mode = round % 4;
    for (int e = 0; e < EL; ++e) {
      if (mode == 0) count[e] = static_cast<int>(rng() % (max_count + 1));           // any
      if (mode == 1) count[e] = (rng() % 3 == 0) ? static_cast<int>(rng() % 4) : 0;  // sparse
    }
    if (mode == 2) count[rng() % EL] = max_count * 4;  // one hot expert
    // mode 3: no routes at all
    for (int nctas : ctas) {
      for (bool fp8 : {false, true}) {
        check<EL, BM, NS, CT1, CT2>(count, nctas, fp8, seed + static_cast<std::uint64_t>(round));
      }
    }
  }
}

TEST(Nvfp4Claims, DecodeTilesSingleSubTile) {
  random_cases<32, 8, 8, 16, 16>(std::random_device{}(), 40, {1, 3, 16, 33});
}

TEST(Nvfp4Claims, LargeTilesManySubTiles) {
  random_cases<4, 128, 16, 4, 4>(std::random_device{}(), 300, {1, 5, 16});
}

// Many items per CTA, as at dsv4-flash T = 128: stealing must beat the static split clearly when
// the CTAs' rates differ by up to 20 %.
TEST(Nvfp4Claims, StealingBalancesUnequalRates) {
  constexpr int EL = 64, BM = 8, NS = 8, CT = 32;
  const std::uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  std::vector<int> count(EL);
  for (auto& c : count) c = 1 + static_cast<int>(rng() % 8);
  const int nctas = 24;
  const Outcome fixed = simulate<EL, BM, NS, CT, CT>(count, nctas, false, false, seed);
  const Outcome stolen = simulate<EL, BM, NS, CT, CT>(count, nctas, true, false, seed);
  // Ideal: the work spread over the summed rates (each unit's cost without token tile loads).
  std::mt19937_64 rates_rng(seed ^ 0x5eedull);
  double rate_sum = 0.0;
  for (int c = 0; c < nctas; ++c)
    rate_sum += 0.9 + 0.2 * static_cast<double>(rates_rng() % 1000) / 1000.0;
  const double fc1_ideal = EL * CT * 2.0 / rate_sum;
  EXPECT_LT(stolen.end[0], fixed.end[0]) << "seed " << seed;
  EXPECT_LT(stolen.end[0], fc1_ideal * 1.04 + 3 * 2.3 / 0.9) << "seed " << seed;
}

}  // namespace
}  // namespace megamoe::device::nvfp4_pipe
