#pragma once
// Barriers of the persistent NVFP4 MegaMoE kernel, on counters that live in the "sync" region
// and are never reset by the host.
//
// Generation trick (comm/barrier_arrivals.cuh): in one barrier instance the participants'
// additions sum to exactly 2^31, so the counter's top bit flips precisely when the last one
// arrives, in any arrival order, and whatever a participant reads before its own addition (a load
// ahead of its red) still carries the old top bit. Nothing needs zeroing between calls and the
// participant count may change from one call to the next.
#include "megamoe/comm/barrier_arrivals.cuh"
#include "megamoe/common.cuh"
#include "megamoe/ptx/mma_sm90.cuh"

namespace megamoe::device {

enum BarrierPhase : u32 {
  kPhaseAfterFc1 = 1,  // rank-local: fc2_pool complete before FC2
  kPhaseAfterFc2 = 2,  // cross-rank: every rank's combine slots written
  // 3 was the rank-local release of the two-level cross-rank barrier (gone): never reported.
  kPhaseEntry = 4,   // cross-rank, ranks in separate processes: every rank's inputs published
  kPhaseRoutes = 5,  // rank-local (wide kernel): every tile's routes in the route list
  kPhaseTokens = 6,  // rank-local (wide kernel): a phase's token chunks decoded
};

// The rank and status pointer of a barrier's timeout report, passed as values or as callables
// that derive them only on that cold path (a kernel at its register cap need not hold them across
// the wait).
template <class T>
MEGAMOE_DEVICE auto lazy_value(const T& v) {
  if constexpr (requires { v(); }) {
    return v();
  } else {
    return v;
  }
}

// "status" field of the sync region: {timed_out, rank, phase, spare}.
MEGAMOE_DEVICE void report_timeout_and_trap(u32* status, int rank, u32 phase) {
  volatile u32* s = status;
  s[1] = static_cast<u32>(rank);
  s[2] = phase;
  s[0] = 1u;
  ptx::fence_acq_rel_sys();
  __trap();
}

// Memory scope of a barrier's counter operations: .sys where participants may be on other GPUs
// (the cross-rank barrier), .gpu where every participant and every byte it orders live on one GPU
// (every rank-local barrier: a rank's CTAs share its GPU) -- cheaper.
enum class Scope { sys, gpu };

// Waits (one thread) until the top bit of *counter differs from that of `old`.
template <Scope kScope = Scope::sys, class StatusT = u32*, class RankT = int>
MEGAMOE_DEVICE void spin_for_flip(const u32* counter, u32 old, u64 timeout_ns, StatusT status,
                                  RankT rank, u32 phase) {
  const u64 start = ptx::globaltimer_ns();
  u32 spins = 0;
  auto load = [&] {
    return kScope == Scope::gpu ? ptx::load_acquire_gpu(counter) : ptx::load_acquire_sys(counter);
  };
  while (((load() ^ old) & 0x80000000u) == 0u) {
    if ((++spins & 1023u) == 0u && ptx::globaltimer_ns() - start > timeout_ns) {
      report_timeout_and_trap(lazy_value(status), lazy_value(rank), phase);
    }
  }
}

// The CTA-level barrier the grid barriers use around thread 0's work: N = 0, every thread of the
// CTA (__syncthreads); N > 0, named barrier 1 over the first N threads (warp-specialized kernels
// whose producer warp takes no part).
template <int N>
struct CtaBarrier {
  static_assert(N % 32 == 0, "named barriers count whole warps");
  MEGAMOE_DEVICE static void sync() {
    if constexpr (N == 0) {
      __syncthreads();
    } else {
      asm volatile("bar.sync 1, %0;" ::"n"(N) : "memory");
    }
  }
};
using CtaSync = CtaBarrier<0>;

// Named barrier ID over N threads used as a one-way signal: some warps arrive and go on, the
// others wait until all have arrived.
template <int ID, int N>
struct SignalBarrier {
  static_assert(ID > 0 && ID < 16 && N % 32 == 0, "named barriers 1..15 count whole warps");
  MEGAMOE_DEVICE static void arrive() {
    asm volatile("bar.arrive %0, %1;" ::"n"(ID), "n"(N) : "memory");
  }
  MEGAMOE_DEVICE static void wait() {
    asm volatile("bar.sync %0, %1;" ::"n"(ID), "n"(N) : "memory");
  }
};

// Barrier over the `n` CTAs of one rank, at .gpu scope: every thread's earlier global writes are
// visible to every thread of those CTAs afterwards. (Writes that other GPUs must see are ordered
// by the cross-rank barrier.)
template <class Sync = CtaSync, class StatusT = u32*, class RankT = int>
MEGAMOE_DEVICE void rank_grid_barrier(u32* counter, int cta_in_rank, int n, u64 timeout_ns,
                                      StatusT status, RankT rank, u32 phase) {
  // bar.sync orders the CTA's writes before thread 0's arrival, a release (cumulative).
  Sync::sync();
  if (threadIdx.x == 0) {
    // The top bit before this instance completes: read ahead of this CTA's own arrival (same
    // address, program order), which must land before the instance can complete. The read and
    // the arrival travel together -- a `red` awaits no reply, where an `atom` returning the old
    // value cost the last CTA to arrive one more round trip to L2 (bench/NOTES.md, v11).
    const u32 old = ptx::load_relaxed_gpu(counter);
    ptx::red_add_release_gpu(counter, arrival_value(cta_in_rank == 0, static_cast<u32>(n)));
    spin_for_flip<Scope::gpu>(counter, old, timeout_ns, status, rank, phase);
    // No fence here: the spin's ld.acquire synchronizes with every CTA's release, and the bar.sync
    // below synchronizes thread 0 with the CTA's other threads (PTX ISA, memory model,
    // "synchronizes-with": a bar.sync synchronizes with the bar.sync of the same barrier), so
    // every write before any CTA's arrival precedes every read after this barrier in causality
    // order.
  }
  Sync::sync();
}

// Barrier over every CTA of every rank, in one level. Each CTA's thread 0 arrives on every rank's
// counter (`counter_of(p)`, a peer pointer) and waits on its own rank's: rank p's CTA 0 adds
// rank_share(p) - (n - 1), its other CTAs 1, so every counter gains exactly 2^31 once the last CTA
// of the last rank arrives. Every thread's earlier writes (peer writes included) are visible to
// every thread of every rank afterwards. One NVLink crossing on the critical path: the two-level
// form (a rank-local grid barrier, CTA 0's atomics to each peer in turn, a rank-local release)
// took ~7 us on two H200s against ~1 us for a rank-local barrier (bench/NOTES.md, twenty-fourth
// session).
template <class Sync = CtaSync, class CounterOf, class RankT = int, class StatusT = u32*>
MEGAMOE_DEVICE void cross_rank_barrier(CounterOf counter_of, int num_ranks, RankT rank_arg,
                                       int cta_in_rank, int n, u64 timeout_ns, StatusT status,
                                       u32 phase = kPhaseAfterFc2) {
  // bar.sync orders the CTA's writes before thread 0's release fence (cumulative).
  Sync::sync();
  if (threadIdx.x == 0) {
    const int rank = lazy_value(rank_arg);
    const u32* own = counter_of(rank);
    // The top bit before this instance completes: read ahead of this CTA's own arrival on the
    // same address, as in rank_grid_barrier.
    const u32 old = ptx::load_relaxed_sys(own);
    const u32 arrival = cross_rank_arrival(rank, num_ranks, cta_in_rank, n);
    // One release for all R arrivals (a fence, then relaxed adds), peers first, its own last. At
    // the entry a CTA has done nothing the peers depend on; they depend on the rank's
    // pre-dispatch having written its inputs and on its previous call having read its combine
    // slots -- other kernels' work, which CTA 0 sees after griddepcontrol.wait. So CTA 0 alone
    // releases: its add precedes the counter's last value in observation order (every later add
    // is an atomic), so its release synchronizes with every peer's acquiring spin. The other CTAs
    // skip the MEMBAR.SYS (bench/NOTES.md, twenty-fifth session).
    if (phase != kPhaseEntry || cta_in_rank == 0) ptx::fence_acq_rel_sys();
    for (int k = 1; k <= num_ranks; ++k) {
      const int p = rank + k < num_ranks ? rank + k : rank + k - num_ranks;
      ptx::red_add_relaxed_sys(counter_of(p), arrival);
    }
    spin_for_flip(own, old, timeout_ns, status, rank, phase);
    // No fence here either (see rank_grid_barrier): the spin's ld.acquire.sys synchronizes with
    // every rank's release, the bar.sync below carries it to the CTA's other threads.
  }
  Sync::sync();
}

}  // namespace megamoe::device
