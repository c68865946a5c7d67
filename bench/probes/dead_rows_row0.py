# Kernel variant for an A/B run (bench/NOTES.md, twenty-sixth session; run 228: level): copies
# the repository's kernels/ to DEST (default build/kern_dead_rows_row0) and makes the pipelined
# kernel's lanes of dead token rows read row 0's B fragments when the token tile is one 8-row
# group (NT = 1) -- their MMA columns are never read, and a warp's B loads then touch fewer
# distinct shared-memory addresses (one row's at T = 1). The consume loops keep their
# instructions (564 / 563 a stage of four blocks at dsv4-flash T = 1, checked with jit_sass.py);
# the outputs must stay bitwise equal. Pair it with `MMA_PROBE_T1=1 mma_rate_probe`, which times
# the same change in the block body alone. Run the bench with MEGAMOE_KERNEL_DIR=DEST against the
# repository's kernels in the same call.
#   python3 bench/probes/dead_rows_row0.py [DEST]
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_patch import SourceEdit, copy_kernels  # noqa: E402

dst = copy_kernels("kern_dead_rows_row0")
edit = SourceEdit(os.path.join(dst, "megamoe", "impls", "sm90_nvfp4_mega_moe_pipelined.cuh"))
sub = edit.sub
sub("""template <int KMAX>
MEGAMOE_DEVICE const u16* lane_token_block(const u16* b, int blk) {
  const int lane = threadIdx.x & 31;
  return b + (lane >> 2) * (KMAX + 8) + paired_load_index(blk, 0, lane & 3);
}""", """template <int KMAX, int NT>
MEGAMOE_DEVICE const u16* lane_token_block(const u16* b, int blk, int live) {
  const int lane = threadIdx.x & 31;
  const int row = NT == 1 && (lane >> 2) >= live ? 0 : lane >> 2;
  return b + row * (KMAX + 8) + paired_load_index(blk, 0, lane & 3);
}""")
sub("""MEGAMOE_DEVICE void consume(Ring<RING>& ring, const Stream& cur, const Stream& nxt, const u16* b,
                            float (&acc)[NT][4]) {""", """MEGAMOE_DEVICE void consume(Ring<RING>& ring, const Stream& cur, const Stream& nxt, const u16* b,
                            int live, float (&acc)[NT][4]) {""")
sub("""                                   int nbw, const u16* b, float (&acc)[NT][4]) {""",
    """                                   int nbw, const u16* b, int live, float (&acc)[NT][4]) {""")
sub("""  const u16* bl = lane_token_block<KMAX>(b, kh);""",
    """  const u16* bl = lane_token_block<KMAX, NT>(b, kh, live);""", count=2)
sub("""  auto stream_unit = [&](const Stream& ns) {""",
    """  auto stream_unit = [&](const Stream& ns, int sub_live) {""")
sub("""      consume_staged<KMAX, NT, KW, STAGES, SB>(s.ring, s.full, s.empty, pos, cs.nbw, s.b, acc);""",
    """      consume_staged<KMAX, NT, KW, STAGES, SB>(s.ring, s.full, s.empty, pos, cs.nbw, s.b, sub_live,
                                               acc);""")
sub("""      consume<KMAX, NT, RING, KW>(ring, cs, ns, s.b, acc);""",
    """      consume<KMAX, NT, RING, KW>(ring, cs, ns, s.b, sub_live, acc);""")
sub("""    stream_unit(ns);""", """    stream_unit(ns, sub_live);""", count=2)
edit.save()
print("patched", edit.path)
