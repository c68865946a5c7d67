# Phase timeline of the pipelined NVFP4 kernel, one line per phase boundary, for telling where an
# expert-parallel decode call spends its time against one rank (bench/NOTES.md, twenty-fourth
# session). Copies the repository's kernels/ to DEST (default build/kern_ep_timeline) and makes
# thread 0 of every CTA record %globaltimer at the kernel's entry, after griddepcontrol.wait,
# after the entry barrier (ranks in separate processes), after phase 0, around the FC1 -> FC2
# barrier, around the FC2 barrier (cross-rank for R > 1) and at its end. At its 101st launch,
# CTA 0 prints the 100th launch's marks as "EPTL rank mark min median max" (us from the earliest
# CTA's entry; "EPTL_T0 rank ns" is that entry on the GPU's %globaltimer), marks 9-14 from inside
# the cross-rank barriers (thread 0: after its release fence, which at the entry only CTA 0 runs,
# after its arrivals, after its spin). Run the bench on it with MEGAMOE_KERNEL_DIR=DEST
# MEGAMOE_ALLOW_LOCAL_MEMORY=1, e.g.
#   python3 bench/probes/ep_timeline.py /tmp/kern_eptl
#   MEGAMOE_KERNEL_DIR=/tmp/kern_eptl MEGAMOE_ALLOW_LOCAL_MEMORY=1 \
#     megamoe bench --ranks 2 --tokens 1 --preset dsv4-flash | grep EPTL
# Each edit must match the kernel source exactly once; a kernel change that moves one makes the
# script stop with the pattern it missed.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_patch import SourceEdit, copy_kernels, timeline_source  # noqa: E402

dst = copy_kernels("kern_ep_timeline")
edit = SourceEdit(os.path.join(dst, "megamoe", "impls", "sm90_nvfp4_mega_moe_pipelined.cuh"))
sub = edit.sub

MARKS = ["entry", "griddep", "entry_barrier", "phase0", "fc1_done", "fc1_barrier", "fc2_done",
         "fc2_barrier", "end", "entry_fenced", "entry_arrived", "entry_flipped", "fc2_fenced",
         "fc2_arrived", "fc2_flipped"]

barrier = SourceEdit(os.path.join(dst, "megamoe", "comm", "rank_barrier.cuh"))
barrier.sub("namespace megamoe::device {\n", """namespace megamoe::device {

// Marks of a launch in buffer (launch & 1), so that launch n + 1 reads launch n's complete marks
// while it writes its own; each CTA counts its own launches (one CTA per index and launch).
""" + timeline_source("eptl", len(MARKS), "EPTL", with_rank=True) + """__device__ __forceinline__ void eptl_mark(unsigned n, int j, unsigned long long t) {
  if (threadIdx.x == 0) g_eptl[n & 1u][blockIdx.x][j] = t;
}
__device__ __forceinline__ unsigned long long eptl_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
""")
# Inside the one-level cross-rank barrier: after the release fence, after the arrivals, after the
# spin (marks 9-11 at the entry barrier, 12-14 at the FC2 barrier).
barrier.sub("""    if (phase != kPhaseEntry || cta_in_rank == 0) ptx::fence_acq_rel_sys();
    for (int k = 1; k <= num_ranks; ++k) {""", """    const int eptl_j = phase == kPhaseEntry ? 9 : 12;
    const unsigned eptl_n = g_eptl_cur[blockIdx.x];
    if (phase != kPhaseEntry || cta_in_rank == 0) ptx::fence_acq_rel_sys();
    eptl_mark(eptl_n, eptl_j, eptl_now());
    for (int k = 1; k <= num_ranks; ++k) {""")
barrier.sub("""      ptx::red_add_relaxed_sys(counter_of(p), arrival);
    }
    spin_for_flip(own, old, timeout_ns, status, rank, phase);
""", """      ptx::red_add_relaxed_sys(counter_of(p), arrival);
    }
    eptl_mark(eptl_n, eptl_j + 1, eptl_now());
    spin_for_flip(own, old, timeout_ns, status, rank, phase);
    eptl_mark(eptl_n, eptl_j + 2, eptl_now());
""")
barrier.save()

sub("""  ptx::griddep_wait();

  // Ranks in other processes""", """  const unsigned long long eptl_t0 = ptx::globaltimer_ns();
  ptx::griddep_wait();
  const unsigned eptl_n = threadIdx.x == 0 ? g_eptl_launch[blockIdx.x]++ : 0u;
  if (threadIdx.x == 0) g_eptl_cur[blockIdx.x] = eptl_n;
  eptl_print(eptl_n, rank, nctas);
  eptl_mark(eptl_n, 0, eptl_t0);
  eptl_mark(eptl_n, 1, ptx::globaltimer_ns());

  // Ranks in other processes""")
sub("""        R, rank, cta_in_rank, nctas, a.timeout_ns, status, kPhaseEntry);
  }
""", """        R, rank, cta_in_rank, nctas, a.timeout_ns, status, kPhaseEntry);
  }
  eptl_mark(eptl_n, 2, ptx::globaltimer_ns());
""")
sub("""          a, s, first_expert);

  // Tile choice on the device""", """          a, s, first_expert);
  eptl_mark(eptl_n, 3, ptx::globaltimer_ns());

  // Tile choice on the device""")
sub("""  // The ring already holds the first FC2 blocks: they stream while the barrier waits. Rank-local
""", """  eptl_mark(eptl_n, 4, ptx::globaltimer_ns());
  // The ring already holds the first FC2 blocks: they stream while the barrier waits. Rank-local
""")
sub("""  // ---- phase 2: FC2 into the source ranks' combine slots""",
    """  eptl_mark(eptl_n, 5, ptx::globaltimer_ns());
  // ---- phase 2: FC2 into the source ranks' combine slots""")
sub("""  nvfp4_moe::barrier_before_combine<R, Sync>(a, grid_counter, cta_in_rank,""",
    """  eptl_mark(eptl_n, 6, ptx::globaltimer_ns());
  nvfp4_moe::barrier_before_combine<R, Sync>(a, grid_counter, cta_in_rank,""")
sub("""  // ---- phase 3: combine the rank's own tokens""", """  eptl_mark(eptl_n, 7, ptx::globaltimer_ns());
  // ---- phase 3: combine the rank's own tokens""")
sub("""      a, mine, rank, min(s.src_tokens[rank], a.out_rows[rank]), cta_in_rank, nctas);
}
""", """      a, mine, rank, min(s.src_tokens[rank], a.out_rows[rank]), cta_in_rank, nctas);
  eptl_mark(eptl_n, 8, ptx::globaltimer_ns());
}
""")
edit.save()
print("instrumented", edit.path, "marks:", " ".join(f"{j}={m}" for j, m in enumerate(MARKS)))
