// The work-unit schedule of the pipelined NVFP4 MegaMoE kernel, walked on the CPU: over every
// CTA, each (tile, token sub-tile, column) unit of both phases is visited exactly once, FC1
// before FC2, and a CTA's units of one tile are sub-tile-major (one token-tile decode each).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "../../kernels/megamoe/scheduler/nvfp4_schedule.cuh"

namespace megamoe::device::nvfp4_pipe {
namespace {

// Item ranges as the wide kernel's producer warp cuts them (balanced_item_range): the lanes'
// expert blocks, their scan and the sums over lanes emulated here.
template <int EL, int BM, int NS>
std::pair<int, int> balanced_range(const std::vector<int>& count, int ct, int items, int cta,
                                   int nctas) {
  constexpr int kPerLane = (EL + 31) / 32;
  long long own[32], before[32], total = 0;
  for (int lane = 0; lane < 32; ++lane) {
    const int e0 = std::min(EL, lane * kPerLane), e1 = std::min(EL, e0 + kPerLane);
    own[lane] = 0;
    for (int e = e0; e < e1; ++e) own[lane] += expert_item_cost<BM, NS>(count[e], ct);
    before[lane] = total;
    total += own[lane];
  }
  auto start = [&](int k) {
    int n = 0;
    for (int lane = 0; lane < 32; ++lane) {
      const int e0 = std::min(EL, lane * kPerLane), e1 = std::min(EL, e0 + kPerLane);
      n += items_starting_before<BM, NS>(count.data(), e0, e1, ct, before[lane],
                                         share_start(total, k, nctas));
    }
    // The same cut point from one serial pass over all experts.
    EXPECT_EQ(n, (items_starting_before<BM, NS>(count.data(), 0, EL, ct, 0,
                                                share_start(total, k, nctas))));
    return std::min(n, items);
  };
  return {start(cta), start(cta + 1)};
}

enum class Split { equal_items, by_cost };

template <int EL, int BM, int NS, int CT1, int CT2>
void walk(const std::vector<int>& count, int nctas, std::uint64_t seed,
          Split split = Split::equal_items) {
  std::vector<int> prefix(EL + 1, 0);
  for (int e = 0; e < EL; ++e) prefix[e + 1] = prefix[e] + (count[e] + BM - 1) / BM;
  const int tiles = prefix[EL];
  // Every unit that must run: (phase, tile, sub, col).
  std::multiset<std::tuple<int, int, int, int>> want, got;
  for (int ph = 0; ph < 2; ++ph) {
    for (int t = 0; t < tiles; ++t) {
      const int e = schedule_expert_of_tile<EL>(prefix.data(), t);
      ASSERT_TRUE(prefix[e] <= t && t < prefix[e + 1]) << "tile " << t << " seed " << seed;
      const int live = std::min(BM, count[e] - (t - prefix[e]) * BM);
      ASSERT_GT(live, 0);
      for (int sub = 0; sub * NS < live; ++sub) {
        for (int col = 0; col < (ph == 0 ? CT1 : CT2); ++col) want.insert({ph, t, sub, col});
      }
    }
  }
  for (int cta = 0; cta < nctas; ++cta) {
    Schedule<EL, BM, NS, CT1, CT2> s{prefix.data(), count.data(), {0, 0}, {0, 0}};
    const long long items[2] = {1LL * tiles * CT1, 1LL * tiles * CT2};
    for (int ph = 0; ph < 2; ++ph) {
      if (split == Split::by_cost) {
        std::tie(s.lo[ph], s.hi[ph]) = balanced_range<EL, BM, NS>(
            count, ph == 0 ? CT1 : CT2, static_cast<int>(items[ph]), cta, nctas);
      } else {
        s.lo[ph] = equal_share_start(static_cast<int>(items[ph]), cta, nctas);
        s.hi[ph] = equal_share_start(static_cast<int>(items[ph]), cta + 1, nctas);
      }
    }
    int last_phase = 0;
    std::map<std::pair<int, int>, int> last_sub;  // (phase, tile) -> sub-tile seen last
    int steps = 0;
    for (Unit u = s.first(0); u.phase < 2; u = s.next(u)) {
      ASSERT_LT(++steps, 1 << 22) << "schedule does not end, seed " << seed;
      ASSERT_GE(u.phase, last_phase) << "FC2 unit before an FC1 unit, seed " << seed;
      last_phase = u.phase;
      const int cols = u.phase == 0 ? CT1 : CT2;
      const int item = u.tileg * cols + u.col;
      ASSERT_TRUE(item >= s.lo[u.phase] && item < s.hi[u.phase])
          << "unit outside the CTA's range, seed " << seed;
      auto [it, fresh] = last_sub.try_emplace({u.phase, u.tileg}, u.sub);
      if (!fresh) {
        ASSERT_GE(u.sub, it->second) << "sub-tiles out of order, seed " << seed;
        it->second = u.sub;
      }
      got.insert({u.phase, u.tileg, u.sub, u.col});
    }
  }
  EXPECT_EQ(got, want) << "units missed or repeated, seed " << seed;
}

template <int EL, int BM, int NS, int CT1, int CT2>
void random_cases(std::uint64_t seed, int max_count) {
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 20; ++round) {
    std::vector<int> count(EL, 0);
    const int mode = round % 4;
    for (int e = 0; e < EL; ++e) {
      if (mode == 0) count[e] = static_cast<int>(rng() % (max_count + 1));           // any
      if (mode == 1) count[e] = (rng() % 3 == 0) ? static_cast<int>(rng() % 4) : 0;  // sparse
    }
    if (mode == 2) count[rng() % EL] = max_count * 4;  // one hot expert
    // mode 3: no routes at all
    for (int nctas : {1, 3, 16, 66, 132}) {
      walk<EL, BM, NS, CT1, CT2>(count, nctas, seed);
      walk<EL, BM, NS, CT1, CT2>(count, nctas, seed, Split::by_cost);
    }
  }
}

TEST(Nvfp4Schedule, DecodeTilesSingleSubTile) {
  random_cases<32, 8, 8, 16, 16>(std::random_device{}(), 40);
}

TEST(Nvfp4Schedule, LargeTilesManySubTiles) {
  random_cases<4, 128, 16, 4, 4>(std::random_device{}(), 300);
}

TEST(Nvfp4Schedule, PresetWidths) {
  random_cases<256, 16, 16, 64, 64>(std::random_device{}(), 40);
}

// The cost model: per token sub-tile a fixed part and one per live 8-token group.
// The 32-bit path of the equal item ranges agrees with 64-bit arithmetic on both sides of its
// overflow test, and ranges of consecutive CTAs meet exactly.
TEST(Nvfp4Schedule, EqualShareStartMatchesWideArithmetic) {
  std::mt19937_64 rng(20261130);
  const int edge = static_cast<int>(0xFFFFFFFFull / 132);
  const std::vector<int> fixed = {0, 1, 383, 384, 49152, edge - 1, edge, edge + 1, 0x7FFFFFFF};
  std::vector<int> items = fixed;
  for (int i = 0; i < 200; ++i) items.push_back(static_cast<int>(rng() % 0x7FFFFFFFull));
  for (const int n : {1, 7, 132, 264}) {
    for (const int it : items) {
      for (int k = 0; k <= n; k += (k < 3 || k > n - 3) ? 1 : n / 5 + 1) {
        ASSERT_EQ(equal_share_start(it, k, n), static_cast<int>(static_cast<long long>(it) * k / n))
            << "items " << it << " k " << k << " n " << n;
      }
      ASSERT_EQ(equal_share_start(it, n, n), it);
    }
  }
}

TEST(Nvfp4Schedule, ItemCosts) {
  constexpr long long f = kSubTileCost;
  EXPECT_EQ(item_cost<32>(1), f + 1);
  EXPECT_EQ(item_cost<32>(8), f + 1);
  EXPECT_EQ(item_cost<32>(9), f + 2);
  EXPECT_EQ(item_cost<32>(32), f + 4);
  EXPECT_EQ(item_cost<16>(40), 3 * f + 2 + 2 + 1);  // three sub-tiles of 16, 16, 8
  EXPECT_EQ((expert_item_cost<32, 32>(40, 24)), 24 * (2 * f + 5));
  EXPECT_EQ((expert_item_cost<32, 32>(0, 24)), 0);
  // Items of that expert starting before a cost: 24 full-tile items of f + 4, then items of f + 1.
  EXPECT_EQ((expert_items_before<32, 32>(40, 24, 1)), 1);
  EXPECT_EQ((expert_items_before<32, 32>(40, 24, f + 4)), 1);
  EXPECT_EQ((expert_items_before<32, 32>(40, 24, f + 5)), 2);
  EXPECT_EQ((expert_items_before<32, 32>(40, 24, 24 * (f + 4) + 1)), 25);
  EXPECT_EQ((expert_items_before<32, 32>(40, 24, 24 * (f + 4) + f + 2)), 26);
  EXPECT_EQ((expert_items_before<32, 32>(40, 24, 1 << 30)), 48);
  EXPECT_EQ((expert_items_before<32, 32>(0, 24, 1 << 30)), 0);
}

// Cut by cost, the most loaded CTA carries at most one item more than its share, and never more
// than with equal item counts: uniform routing at the h6144 T = 512 tiling (16 routes per expert
// on average, 32-token tiles, 24 columns) and a skewed one.
TEST(Nvfp4Schedule, CostSplitBalancesLiveGroups) {
  constexpr int EL = 256, BM = 32, NS = 32, CT = 24, kCtas = 132;
  std::mt19937_64 rng(std::random_device{}());
  for (int skewed = 0; skewed < 2; ++skewed) {
    std::vector<int> count(EL, 0);
    std::discrete_distribution<int> pick = [&] {
      std::vector<double> w(EL);
      for (int e = 0; e < EL; ++e) w[e] = skewed ? 1.0 / std::pow(e + 1.0, 1.2) : 1.0;
      return std::discrete_distribution<int>(w.begin(), w.end());
    }();
    for (int r = 0; r < 512 * 8; ++r) ++count[pick(rng)];
    std::vector<int> prefix(EL + 1, 0);
    for (int e = 0; e < EL; ++e) prefix[e + 1] = prefix[e] + (count[e] + BM - 1) / BM;
    const int items = prefix[EL] * CT;
    auto item_cost_at = [&](int item) {
      const int t = item / CT, e = schedule_expert_of_tile<EL>(prefix.data(), t);
      return item_cost<NS>(tile_live<BM>(count.data(), prefix.data(), e, t));
    };
    long long total = 0, most = 0;
    for (int i = 0; i < items; ++i) {
      total += item_cost_at(i);
      most = std::max(most, item_cost_at(i));
    }
    long long worst_equal = 0, worst_cost = 0;
    for (int cta = 0; cta < kCtas; ++cta) {
      const auto [lo, hi] = balanced_range<EL, BM, NS>(count, CT, items, cta, kCtas);
      long long c = 0, ce = 0;
      for (int i = lo; i < hi; ++i) c += item_cost_at(i);
      const long long elo = 1LL * items * cta / kCtas, ehi = 1LL * items * (cta + 1) / kCtas;
      for (long long i = elo; i < ehi; ++i) ce += item_cost_at(static_cast<int>(i));
      EXPECT_LE(c, total / kCtas + most + 1) << "CTA " << cta << (skewed ? " skewed" : " uniform");
      worst_cost = std::max(worst_cost, c);
      worst_equal = std::max(worst_equal, ce);
    }
    EXPECT_LE(worst_cost, worst_equal) << (skewed ? "skewed" : "uniform");
  }
}

// The paired token-tile layout: the decode side (paired_word_index) writes every element of a
// row exactly once, and the 16-byte load of consume (paired_load_index) hands lane (g, t) the
// m16n8k16 B fragment of each step: b0 = k {16q + 2t, +1}, b1 = k {16q + 8 + 2t, +1}.
TEST(Nvfp4Schedule, PairedTokenLayoutFeedsEveryFragment) {
  constexpr int kK = 512;        // four 128-k blocks
  std::vector<int> pos(kK, -1);  // f16 index -> k
  for (int blk16 = 0; blk16 < kK / 16; ++blk16) {
    for (int pair = 0; pair < 8; ++pair) {
      const int w = paired_word_index(blk16, pair);
      ASSERT_GE(w, 0);
      ASSERT_LT(w, kK / 2);
      for (int e = 0; e < 2; ++e) {
        ASSERT_EQ(pos[static_cast<std::size_t>(2 * w + e)], -1) << "written twice at " << w;
        pos[static_cast<std::size_t>(2 * w + e)] = blk16 * 16 + 2 * pair + e;
      }
    }
  }
  for (int blk = 0; blk < kK / 128; ++blk) {
    for (int q2 = 0; q2 < 4; ++q2) {
      for (int t = 0; t < 4; ++t) {
        const int base = paired_load_index(blk, q2, t);
        ASSERT_EQ(base % 8, 0) << "16-byte alignment";
        for (int h = 0; h < 2; ++h) {
          const int k0 = blk * 128 + (2 * q2 + h) * 16;
          const int* f = &pos[static_cast<std::size_t>(base + 4 * h)];
          EXPECT_EQ(f[0], k0 + 2 * t);
          EXPECT_EQ(f[1], k0 + 2 * t + 1);
          EXPECT_EQ(f[2], k0 + 8 + 2 * t);
          EXPECT_EQ(f[3], k0 + 8 + 2 * t + 1);
        }
      }
    }
  }
  // Conflict-free 16-byte loads: a quarter warp (rows g, g + 1 of pitch 2 KMAX + 16 bytes, t 0..3)
  // covers 8 distinct 16-byte bank groups.
  for (int q2 = 0; q2 < 4; ++q2) {
    std::set<int> groups;
    for (int g = 0; g < 2; ++g) {
      for (int t = 0; t < 4; ++t) {
        const int bytes = g * (2 * 4096 + 16) + 2 * paired_load_index(0, q2, t);
        groups.insert((bytes % 128) / 16);
      }
    }
    EXPECT_EQ(groups.size(), 8u) << "q2 " << q2;
  }
}

// The split-K partial tiles: every (row, token) has its own slot (a permutation per row), the
// epilogue's reads of one token by 32 consecutive rows hit 32 banks, and a warp's stores of one
// m16n8 accumulator element (lane 4 g + t: row g (+ 8), token 2 t (+ 1)) at most two per bank.
template <int NS>
void check_partial_tile() {
  for (int row = 0; row < 64; ++row) {
    std::set<int> cols;
    for (int i = 0; i < NS; ++i) cols.insert(partial_column<NS>(row, i));
    EXPECT_EQ(cols.size(), static_cast<std::size_t>(NS)) << "row " << row;
    EXPECT_EQ(*cols.rbegin(), NS - 1);
  }
  for (int i = 0; i < NS; ++i) {
    for (int row0 : {0, 32}) {
      std::set<int> banks;
      for (int r = row0; r < row0 + 32; ++r) banks.insert((r * NS + partial_column<NS>(r, i)) % 32);
      EXPECT_EQ(banks.size(), 32u) << "token " << i << " rows " << row0 << "..";
    }
  }
  for (int rg = 0; rg < 4; ++rg) {
    for (int nt = 0; nt < NS / 8; ++nt) {
      for (int c = 0; c < 4; ++c) {
        int per_bank[32] = {};
        for (int lane = 0; lane < 32; ++lane) {
          const int row = rg * 16 + lane / 4 + (c / 2) * 8, i = nt * 8 + 2 * (lane % 4) + c % 2;
          ++per_bank[(row * NS + partial_column<NS>(row, i)) % 32];
        }
        for (int b : per_bank) EXPECT_LE(b, 2) << "rg " << rg << " nt " << nt << " c " << c;
      }
    }
  }
}

TEST(Nvfp4Schedule, PartialTilesAreConflictFreePermutations) {
  check_partial_tile<8>();
  check_partial_tile<16>();
}

}  // namespace
}  // namespace megamoe::device::nvfp4_pipe
