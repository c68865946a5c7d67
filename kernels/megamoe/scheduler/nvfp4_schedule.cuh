#pragma once
// Work units of the pipelined and wide SM90 NVFP4 MegaMoE kernels (sm90_nvfp4_mega_moe_*.cuh),
// host-compilable so that tests/cpu/test_nvfp4_schedule.cpp can walk every CTA's units.
//
// Each phase has items (expert tile, column tile): FC1 columns = 32 intermediate columns, FC2
// columns = 64 hidden rows. A CTA owns the contiguous item range [lo, hi) of each phase (equal
// item counts in the pipelined kernel; the wide kernel cuts the ranges by cost, below) and runs
// it as units (tile, token sub-tile, column), tile-major, so that the token sub-tile in shared
// memory is decoded once and reused by every column of that tile the CTA owns.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define MEGAMOE_SCHED_FN __host__ __device__ __forceinline__
#else
#define MEGAMOE_SCHED_FN inline
#endif

namespace megamoe::device::nvfp4_pipe {

// Index of the expert owning global tile `tileg`: the last e with tile_prefix[e] <= tileg
// (experts without tiles share their successor's prefix and precede it, so they are skipped).
template <int EL>
MEGAMOE_SCHED_FN int schedule_expert_of_tile(const int* tile_prefix, int tileg) {
  int lo = 0, hi = EL - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tile_prefix[mid] <= tileg) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// The same index found by a whole warp (every lane gets it): tile_prefix is non-decreasing from
// tile_prefix[0] = 0, so the experts with tile_prefix[e] <= tileg are exactly [0, answer]; each
// lane counts its share and one warp sum gives answer + 1. Independent shared loads and a
// reduction instead of log2(EL) dependent loads: the producer's first weight request waits on
// this search (bench/NOTES.md, run 108).
template <int EL>
__device__ __forceinline__ int schedule_expert_of_tile_warp(const int* tile_prefix, int tileg) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  int n = 0;
#pragma unroll
  for (int e = lane; e < EL; e += 32) n += tile_prefix[e] <= tileg ? 1 : 0;
  return static_cast<int>(__reduce_add_sync(0xFFFFFFFFu, static_cast<unsigned>(n))) - 1;
}
#endif

// First item of CTA k's share when `items` items are cut into n equal ranges: items * k / n,
// in 32-bit arithmetic where the product fits (every launch but the very largest pools: ptxas
// turns the 64-bit division into a call of ~0.1 us on the producer's path to its first request).
MEGAMOE_SCHED_FN int equal_share_start(int items, int k, int n) {
  if (static_cast<unsigned long long>(items) * static_cast<unsigned>(n) <= 0xFFFFFFFFull) {
    return static_cast<int>(static_cast<unsigned>(items) * static_cast<unsigned>(k) /
                            static_cast<unsigned>(n));
  }
  return static_cast<int>(static_cast<long long>(items) * k / n);
}

// Live routes (1..BM) of global tile `tileg`, a tile of expert e.
template <int BM>
MEGAMOE_SCHED_FN int tile_live(const int* count, const int* tile_prefix, int e, int tileg) {
  const int n = count[e] - (tileg - tile_prefix[e]) * BM;
  return n < BM ? n : BM;
}

// Token tile layout of the pipelined kernel (rows of f16, one row per token): within each group
// of 64 k, the B fragment registers {b0, b1} of two consecutive k16 steps of lane quad t are 16
// contiguous bytes, so one 16-byte shared load feeds two MMAs. Element k of a group (step
// q = k / 16, r = k % 16 = 2t + e or 8 + 2t + e) sits at f16 index
// t * 16 + (q / 2) * 8 + (q % 2) * 4 + (r >= 8) * 2 + e.
//
// u32 index within the row of f16 pair `pair` (0..7: elements 2 pair, 2 pair + 1) of the 16-k
// activation block `blk16`.
MEGAMOE_SCHED_FN int paired_word_index(int blk16, int pair) {
  const int q = blk16 & 3, t = pair & 3, hi = pair >> 2;
  return (blk16 >> 2) * 32 + t * 8 + (q >> 1) * 4 + (q & 1) * 2 + hi;
}
// f16 index within the row of lane quad t's 16-byte load for steps 2 q2 and 2 q2 + 1 (q2 0..3)
// of 128-k block `blk128`: {b0, b1} of step 2 q2, then {b0, b1} of step 2 q2 + 1.
MEGAMOE_SCHED_FN int paired_load_index(int blk128, int q2, int t) {
  return blk128 * 128 + (q2 >> 1) * 64 + t * 16 + (q2 & 1) * 8;
}

// Split-K partial tiles of the pipelined kernel ([kh][row 0..63][NS tokens] f32): the column of
// token i in row `row`. 32 / NS consecutive rows start in the same bank; XOR-ing the token with
// the row's group index gives the 32 rows an epilogue warp reads for one token 32 different
// banks, and the stores of one MMA accumulator element by a warp's 32 lanes (8 rows x 4 token
// pairs) at most two ways. A permutation of the tokens within each row.
template <int NS>
MEGAMOE_SCHED_FN int partial_column(int row, int i) {
  return i ^ ((row / (32 / NS)) % NS);
}

struct Unit {
  int tileg, sub, col, phase;  // phase 0 = FC1, 1 = FC2, 2 = past the end
};

template <int EL, int BM, int NS, int CT1, int CT2>
struct Schedule {
  const int* tile_prefix;  // [EL + 1] padded tile prefix of the rank's experts
  const int* count;        // [EL] routes per expert
  int lo[2], hi[2];        // the CTA's item ranges

  MEGAMOE_SCHED_FN static constexpr int cols(int ph) { return ph == 0 ? CT1 : CT2; }
  // Selects instead of indexing: a run-time index would put the struct in local memory.
  MEGAMOE_SCHED_FN int lo_of(int ph) const { return ph == 0 ? lo[0] : lo[1]; }
  MEGAMOE_SCHED_FN int hi_of(int ph) const { return ph == 0 ? hi[0] : hi[1]; }
  MEGAMOE_SCHED_FN int live(int tileg) const {
    return tile_live<BM>(count, tile_prefix, schedule_expert_of_tile<EL>(tile_prefix, tileg),
                         tileg);
  }
  MEGAMOE_SCHED_FN Unit first(int ph) const {
    for (; ph < 2; ++ph) {
      if (lo_of(ph) < hi_of(ph)) return {lo_of(ph) / cols(ph), 0, lo_of(ph) % cols(ph), ph};
    }
    return {0, 0, 0, 2};
  }
  MEGAMOE_SCHED_FN int col_begin(int ph, int tileg) const {
    return tileg == lo_of(ph) / cols(ph) ? lo_of(ph) % cols(ph) : 0;
  }
  MEGAMOE_SCHED_FN int col_end(int ph, int tileg) const {
    return tileg == (hi_of(ph) - 1) / cols(ph) ? (hi_of(ph) - 1) % cols(ph) + 1 : cols(ph);
  }
  MEGAMOE_SCHED_FN Unit next(const Unit& u) const {
    if (u.phase >= 2) return u;
    const int ph = u.phase;
    if (u.col + 1 < col_end(ph, u.tileg)) return {u.tileg, u.sub, u.col + 1, ph};
    if ((u.sub + 1) * NS < live(u.tileg)) return {u.tileg, u.sub + 1, col_begin(ph, u.tileg), ph};
    if (u.tileg + 1 <= (hi_of(ph) - 1) / cols(ph)) {
      return {u.tileg + 1, 0, col_begin(ph, u.tileg + 1), ph};
    }
    return first(ph + 1);
  }
};

// ---- Cost-balanced item ranges (the wide kernel) ------------------------------------------
// Equal item counts per CTA leave the grid barriers after FC1 and FC2 waiting on the CTAs whose
// ranges fell on tiles with more live 8-token groups (ncu, run 75: ~8 % of h6144 T = 512 spent
// there). CTA k's range instead starts where the running cost crosses k / n of the total. An item
// (tile, column) costs, per token sub-tile of the tile, kSubTileCost for the weights it streams and
// decodes plus one per live 8-token group. The consume loop's instructions per weight block (130 /
// 139 / 154 / 161 for 1..4 groups) would say 12, but time grows faster with the groups than the
// instructions (the MMAs of more groups hold the tensor pipe, epilogues scale with the tokens):
// measured side by side, 6 beat 12 and 24 (run 77; -2 % at h6144 T = 512 uniform, -5 % zipf), and
// once the consumers took each unit's expert from the producer, 4 beat 6 (runs 79, 80: -1 to -3 %
// at h6144 T = 384..682, mostly level at dsv4-flash).
constexpr int kSubTileCost = 4;

// Cost of one item of a tile with `live` routes (1..BM).
template <int NS>
MEGAMOE_SCHED_FN long long item_cost(int live) {
  const int full = live / NS, rem = live % NS;
  return static_cast<long long>(full) * (kSubTileCost + NS / 8) +
         (rem > 0 ? kSubTileCost + (rem + 7) / 8 : 0);
}

// Cost of all items of an expert with `count` routes (ct items per tile).
template <int BM, int NS>
MEGAMOE_SCHED_FN long long expert_item_cost(int count, int ct) {
  if (count <= 0) return 0;
  const int tiles = (count + BM - 1) / BM;
  return static_cast<long long>(ct) *
         ((tiles - 1) * item_cost<NS>(BM) + item_cost<NS>(count - (tiles - 1) * BM));
}

// Items of an expert with `count` routes whose running cost (from the expert's first item) starts
// before x.
template <int BM, int NS>
MEGAMOE_SCHED_FN int expert_items_before(int count, int ct, long long x) {
  if (count <= 0 || x <= 0) return 0;
  const int tiles = (count + BM - 1) / BM;
  const long long wf = item_cost<NS>(BM);
  const long long full = static_cast<long long>(tiles - 1) * ct * wf;
  if (x <= full) return static_cast<int>((x + wf - 1) / wf);
  const long long wl = item_cost<NS>(count - (tiles - 1) * BM);
  const long long n = static_cast<long long>(tiles - 1) * ct + (x - full + wl - 1) / wl;
  return static_cast<int>(n < static_cast<long long>(tiles) * ct ? n : tiles * ct);
}

// Experts [e0, e1), whose items start at running cost `before`: how many of their items start
// before `target`. Summed over all experts this is the first item of the CTA whose share starts
// at `target` (every item costs > 0, so the ranges of consecutive CTAs meet exactly).
template <int BM, int NS>
MEGAMOE_SCHED_FN int items_starting_before(const int* count, int e0, int e1, int ct,
                                           long long before, long long target) {
  int n = 0;
  for (int e = e0; e < e1; ++e) {
    n += expert_items_before<BM, NS>(count[e], ct, target - before);
    before += expert_item_cost<BM, NS>(count[e], ct);
  }
  return n;
}

// Where CTA k of n starts when the total cost is `total`.
MEGAMOE_SCHED_FN long long share_start(long long total, int k, int n) {
  return total * k / n;
}

}  // namespace megamoe::device::nvfp4_pipe
