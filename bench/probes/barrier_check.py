# Barrier check for the NVFP4 MegaMoE kernels (bench/NOTES.md, eighteenth session): copies the
# repository's kernels/ to DEST (default build/kern_barrier_check) and makes every rank-local grid
# barrier count its arrivals per instance in a device array (each CTA's thread 0: one atomic add
# before it arrives on the barrier's counter) and, once released, check that all n CTAs of the
# instance had arrived -- independent of any timer. CTA 0 prints a running total of violations at
# every FC1 -> FC2 barrier. Run the bench (or a test) with MEGAMOE_KERNEL_DIR=DEST
# MEGAMOE_ALLOW_LOCAL_MEMORY=1 and grep BCHK; "viol 0" is the expected answer.
#   python3 bench/probes/barrier_check.py [DEST]
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_patch import SourceEdit, copy_kernels  # noqa: E402

dst = copy_kernels("kern_barrier_check")
edit = SourceEdit(os.path.join(dst, "megamoe", "comm", "rank_barrier.cuh"))
sub = edit.sub
sub("namespace megamoe::device {", """namespace megamoe::device {
__device__ unsigned g_bchk_cnt[4096];  // arrivals per barrier instance (instances wrap at 4096)
__device__ unsigned g_bchk_idx[1024];  // each CTA's next instance
__device__ unsigned g_bchk_viol;
__device__ unsigned g_bchk_worst;""")
sub("""    ptx::red_add_release_gpu(counter, arrival_value(cta_in_rank == 0, static_cast<u32>(n)));
""", """    const unsigned bk = g_bchk_idx[blockIdx.x] & 4095u;
    atomicAdd(&g_bchk_cnt[bk], 1u);
    __threadfence();
    ptx::red_add_release_gpu(counter, arrival_value(cta_in_rank == 0, static_cast<u32>(n)));
""")
sub("""    spin_for_flip<Scope::gpu>(counter, old, timeout_ns, status, rank, phase);
""", """    spin_for_flip<Scope::gpu>(counter, old, timeout_ns, status, rank, phase);
    __threadfence();  // the check's own count is read after the release it checks
    const unsigned seen = atomicAdd(&g_bchk_cnt[bk], 0u);
    if (seen < static_cast<unsigned>(n)) {
      atomicAdd(&g_bchk_viol, 1u);
      atomicMax(&g_bchk_worst, static_cast<unsigned>(n) - seen);
    }
    ++g_bchk_idx[blockIdx.x];
    if (blockIdx.x == 0 && phase == kPhaseAfterFc1) {
      printf("BCHK instance %u viol %u worst-missing %u\\n", bk, g_bchk_viol, g_bchk_worst);
    }
""")
edit.save()
print("instrumented", edit.path)
