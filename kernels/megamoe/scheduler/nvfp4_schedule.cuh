#pragma once
// Work units of the pipelined SM90 NVFP4 MegaMoE kernel (sm90_nvfp4_mega_moe_pipelined.cuh),
// host-compilable so that tests/cpu/test_nvfp4_schedule.cpp can walk every CTA's units.
//
// Each phase has items (expert tile, column tile): FC1 columns = 32 intermediate columns, FC2
// columns = 64 hidden rows. A CTA owns the contiguous item range [lo, hi) of each phase and runs
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
    const int e = schedule_expert_of_tile<EL>(tile_prefix, tileg);
    const int n = count[e] - (tileg - tile_prefix[e]) * BM;
    return n < BM ? n : BM;
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

}  // namespace megamoe::device::nvfp4_pipe
