#pragma once
// The token tile a call runs with, chosen on the device from the call's routing (docs/api.md,
// "Heuristics"; docs/nvfp4_kernel.md, "Tile choice on the device").
//
// The host's BLOCK_M table follows the expected tokens per expert, i.e. uniform routing. Under
// skewed routing the popular experts hold many tokens, and a small tile streams and decodes
// their weights once per tile: at dsv4-flash T = 128, Zipf(1.2), the wide kernel's 32-token
// tiles take 14-17 % less time than the table's 8 (bench/NOTES.md, runs 136 and 182), while
// under uniform routing they cost up to 15 % more. The host cannot see the counts (they are on
// the device, and the call is graph-captured), so where the choice matters it launches two
// kernels: the table's (the pipelined kernel at 8, the wide one at 16) first, which counts every
// expert's routes and records the verdict, and the wide kernel of 32-token tiles, which reads
// it; the kernel not chosen returns before it touches anything.
#include "megamoe/impls/sm90_nvfp4_mega_moe.cuh"  // Nvfp4MoeArgs

namespace megamoe::device::nvfp4_moe {

// Weight passes of a tiling: every tile of an expert streams and decodes the expert's weights
// once, so sum over experts of ceil(count / tile) is what the call's time follows.
MEGAMOE_DEVICE int weight_passes(int count, int tile) {
  return (count + tile - 1) / tile;
}

// The verdict of the routes counted in `counts[0, n)`, in every thread of the CTA (all BLOCK
// threads call it; its barriers are CTA-wide): `alt` when the table's tile BM would stream at
// least pct / 100 times the weight passes of `alt` plus `gain` passes (the larger tile's later
// start, tile_choice_min_gain_passes), else BM. `word`: one int of shared memory outside
// `counts`, free until the caller's next barrier.
template <int BM>
MEGAMOE_DEVICE int tile_rows_verdict(const int* counts, int n, int alt, int pct, int gain,
                                     int* word) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp == 0) {
    int small = 0, large = 0;
    for (int e = lane; e < n; e += 32) {
      small += weight_passes(counts[e], BM);
      large += weight_passes(counts[e], alt);
    }
    small = static_cast<int>(__reduce_add_sync(0xFFFFFFFFu, static_cast<unsigned>(small)));
    large = static_cast<int>(__reduce_add_sync(0xFFFFFFFFu, static_cast<unsigned>(large)));
    // In 64-bit integers: exact at every count (no rounding at the edge).
    if (lane == 0) {
      *word = static_cast<long long>(small) * 100 >=
                      static_cast<long long>(large) * pct + static_cast<long long>(gain) * 100
                  ? alt
                  : BM;
    }
  }
  __syncthreads();
  const int chosen = *word;
  __syncthreads();  // read by all before the caller reuses the memory
  return chosen;
}

// Every CTA, redundantly, on every rank alike: it counts all ranks' routes to all E = EL x R
// experts, so every CTA of every rank reaches the same verdict, whether one launch drives every
// rank (`local`) or each process its own (`nccl`). The verdict must not depend on how the ranks
// are driven: the pipelined and wide kernels sum K in different orders, so the tile decides the
// output's last bits in rare elements, and ranks in separate processes must compute what R
// virtual ranks compute. (Each rank's kernels meet the others only at the cross-rank barriers,
// which a rank passes once a call whichever of its kernels runs it, so ranks whose token counts
// give them different tables may still run different kernels.) With R = 1 the counts are phase
// 0's (s.count: the rank's experts are all of them; no second scan). `scratch`: (E + 1) ints of
// shared memory free until the caller's next barrier; s.src_tokens must hold every source rank's
// token count (plan_tiles). All BLOCK threads of the CTA call it.
template <int EL, int K, int R, int BM, int THREADS, class S>
MEGAMOE_DEVICE int choose_tile_rows(const Nvfp4MoeArgs& a, S& s, int* scratch, int alt, int pct) {
  if constexpr (R == 1) {
    return tile_rows_verdict<BM>(s.count, EL, alt, pct, a.tile_choice_min_gain, scratch);
  } else {
    constexpr int E = EL * R;
    const int tid = threadIdx.x;
    const bool counting = tid < THREADS;
    if (counting) {
      for (int e = tid; e < E; e += THREADS) scratch[e] = 0;
    }
    __syncthreads();
#pragma unroll
    for (int sr = 0; sr < R; ++sr) {
      const int* idx = reinterpret_cast<const int*>(a.base[sr] + a.off_topk_idx);
      const int n = s.src_tokens[sr] * K;
      for (int i = tid; counting && i < n; i += THREADS) {
        const int id = __ldg(idx + i);
        if (id >= 0 && id < E) atomicAdd(scratch + id, 1);  // masked routes (-1) take no tile
      }
    }
    __syncthreads();
    return tile_rows_verdict<BM>(scratch, E, alt, pct, a.tile_choice_min_gain, scratch + E);
  }
}

// The verdict word of a rank ("tile_choice" in its sync region): written by the rank's first CTA
// of the first kernel, read by the second after griddepcontrol.wait (the first has completed).
MEGAMOE_DEVICE volatile int* tile_choice_word(const Nvfp4MoeArgs& a, int rank) {
  return reinterpret_cast<volatile int*>(a.base[rank] + a.off_sync + a.sync_tile_choice);
}

// The table's kernel (tile BM < a.tile_choice_alt) after its phase 0 (and, ranks in separate
// processes, after the call's entry barrier), every thread of the CTA: counts the routes in
// `scratch` (SCRATCH bytes of shared memory free until the kernel's first tile), records the
// verdict (the rank's first CTA: `first_cta()`, `rank_of()`, evaluated there only, as the kernels
// derive them where used), lets the alternative's kernel launch its CTAs as this kernel's leave
// (it waits for this grid's completion before it reads the verdict), and returns whether this
// kernel runs the call. A build without room for EL x R + 1 ints traps: the host asks for a choice
// only where H and I are multiples of 384 or 512, i.e. room for >= 1568 > E + 1.
template <int EL, int K, int R, int BM, int THREADS, int SCRATCH, class S, class FirstCta,
          class RankOf>
MEGAMOE_DEVICE bool table_kernel_keeps_call(const Nvfp4MoeArgs& a, S& s, void* scratch,
                                            FirstCta first_cta, RankOf rank_of) {
  if constexpr (SCRATCH >= static_cast<int>(sizeof(int)) * (EL * R + 1)) {
    const int chosen = choose_tile_rows<EL, K, R, BM, THREADS>(
        a, s, static_cast<int*>(scratch), a.tile_choice_alt, a.tile_choice_pct);
    if (first_cta() && threadIdx.x == 0) *tile_choice_word(a, rank_of()) = chosen;
    ptx::griddep_launch_dependents();
    return chosen == BM;
  } else {
    __trap();
    return true;
  }
}

// The alternative's kernel (tile BM == a.tile_choice_alt) right after griddepcontrol.wait:
// whether the table's kernel, now complete, handed it the call. If so, that kernel has passed the
// call's entry barrier (ranks in separate processes), and this one skips it: every rank passes
// each cross-rank barrier once a call.
MEGAMOE_DEVICE bool alternative_kernel_runs(const Nvfp4MoeArgs& a, int rank, int bm) {
  return *tile_choice_word(a, rank) == bm;
}

}  // namespace megamoe::device::nvfp4_moe
