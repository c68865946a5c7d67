# Ablation copies of the pipelined NVFP4 MegaMoE kernel (BLOCK_M 8 and 16: T = 1..128 at the decode
# presets), TIMING ONLY (their results are wrong): each removes part of the kernel's work, so that
# a bench run of every copy in one call says what the rest costs on its own (bench/NOTES.md,
# twenty-seventh session; run 50 measured the first of these on v13). Copies the repository's
# kernels/ into DEST/<name> for each name below (default DEST: build/pipelined_ablation):
#   mem        the staged consume loop without decode and MMA: the stages are waited for, read
#              (their words and scales) and released -- the schedule and the stream alone
#   nobar      the FC1 -> FC2 rank-local grid barrier removed (each CTA goes on to FC2 after its
#              own FC1; FC2 reads whatever fc2_pool holds): what that barrier and the CTAs'
#              spread before it cost
#   mem_nobar  both
#   noepi      FC1's and FC2's epilogues (bf16 combine slots) not run; the units' partial sums
#              and their CTA barrier stay
#   nocombine  the FC2 -> combine barrier and the combine not run
#   stream     mem, nobar, noepi and nocombine together: what is left is the kernel's skeleton --
#              the start (phase 0, the first token tile), the producer's stream through the stage
#              ring, the units' hand-over and their CTA barriers (twenty-eighth session)
# Run the bench on each with MEGAMOE_KERNEL_DIR=DEST/<name> (no local memory is used).
#   python3 bench/probes/pipelined_ablation.py [DEST]
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_patch import ROOT, write_variant  # noqa: E402

PIPE = os.path.join("megamoe", "impls", "sm90_nvfp4_mega_moe_pipelined.cuh")
MEM = ("      block_mma<KMAX, NT>(words, scw, bl, acc);",
       "      if (words[0] == 0x12345678u && scw[0] == 0x9abcdef0u) acc[0][0] += 1.0f;")
NOBAR = ("""  rank_grid_barrier<Sync>(grid_counter, cta_in_rank, nctas, a.timeout_ns, status, rank,
                          kPhaseAfterFc1);""", "  Sync::sync();")
NOEPI1 = ("""      nvfp4_moe::fc1_requantize_token<ACT>(a, s, mine, i, cur.sub * NS + i, sub_live, cur.col,
                                           pool_row0, g2, y);""",
          "      if (y(0, i) == 1.2345e-30f) s.route_w[0] = g2;")
NOEPI2 = ("      fc2_store_bf16_rows<H, TMAX, NS, kWarps>(a, s, cur.sub, sub_live, cur.col, factor, y);",
          "      if (y(0, 0) == 1.2345e-30f) s.route_w[0] = factor;")
NOCOMBINE = ("""  nvfp4_moe::barrier_before_combine<R, Sync>(a, grid_counter, cta_in_rank, nctas, status, rank);

  // ---- phase 3: combine the rank's own tokens ----------------------------------------------
  nvfp4_moe::combine_rank_tokens<H, K, EL, R, TMAX, kThreads, FP8C>(
      a, mine, rank, min(s.src_tokens[rank], a.out_rows[rank]), cta_in_rank, nctas);""",
             "  Sync::sync();")
VARIANTS = {
    "mem": [MEM],
    "nobar": [NOBAR],
    "mem_nobar": [MEM, NOBAR],
    "noepi": [NOEPI1, NOEPI2],
    "nocombine": [NOCOMBINE],
    "stream": [MEM, NOBAR, NOEPI1, NOEPI2, NOCOMBINE],
}

dest = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "pipelined_ablation")
for name, edits in VARIANTS.items():
    write_variant(dest, name, {PIPE: edits})
