# Ablation copies of the wide NVFP4 MegaMoE kernel, TIMING ONLY (their results are wrong): each
# removes one part of the kernel's work, so that a bench run of every copy in one call says what
# that part costs (bench/NOTES.md, nineteenth session). Copies the repository's kernels/ into
# DEST/<name> for each name below (default DEST: build/wide_ablation):
#   noepi1       FC1's epilogue not run (the accumulators only kept alive)
#   noepi2       FC2's epilogue (bf16 combine slots) not run
#   noepi12      neither epilogue
#   mem          consume loops without decode and MMA: the stages are waited for and released
#   mem_noepi    mem + noepi12: the stream, the phases and barriers alone
#   nodec1       the FC1 token-chunk decode phase and the grid barrier after it removed
#   nodec12      both token-chunk decode phases and their grid barriers removed
#   mem_noepi_nodec12
#   nodec1_keepbarrier  the FC1 decode phase removed, the grid barrier after it kept
#   nostore1     the FC1 decode phase loads and decodes but stores nothing into the scratch
#   notok        no token chunk copied into the stages (the MMAs read stale shared memory): what
#                the token operand's share of the stream costs
#   mem_noepi_nodec12_notok  the weight stream alone
#   nobar1       the route scan's and FC1 decode's grid barriers removed (each CTA goes on after
#                its own part): the bound of per-tile readiness for FC1
#   nobar12      also the FC1 -> FC2 barrier and the FC2 decode's: every rank-local barrier but
#                the last
# and two that do one part TWICE on the same data (both kernels: block_mma is shared), whose energy
# per call against the default's (power_soak.py) is that part's energy -- removing a part instead
# changes the operands the rest sees (zeros or stale rows) and with them the power:
#   mma2         every weight MMA issued twice into its accumulator
#   dec2         every weight word decoded twice (a second decode of other bits, selected by a
#                condition false at run time that the compiler cannot see)
# (the last two tell apart what the FC1 phase costs: its barrier, its stores, or what its scratch
# writes do to L2 and HBM for the FC1 units after it).
# Run the bench on each with MEGAMOE_KERNEL_DIR=DEST/<name> (no local memory is used).
#   python3 bench/probes/wide_ablation.py [DEST]
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_patch import ROOT, WIDE, write_variant  # noqa: E402

KEEP = "if (acc[0][0] == 1.2345e-30f) s.y[threadIdx.x] = acc[0][1] + acc[0][2] + acc[0][3]"
NOEPI1 = ("""      fc1_store_by_pairs<ACT, NS, BM, kGroup, kRound, RB != 2>(
          a, s, mine(), s.y + y_buf * (kRowGroups * kGroup), u, __ldg(a.fc2_scale[rank_of()] + u.e),
          acc);""", "      " + KEEP + ";")
NOEPI2 = ("""        fc2_store_from_registers<H, TMAX, NS>(a, s, cur.sub, cur.sub_live<NS>(), cur.col, factor,
                                              acc);""", "        " + KEEP + " + factor;")
MEM = ("""      nvfp4_pipe::block_mma<CK, NTL>(words, scw, bl + d * 128, acc);""",
       """      if (words[0] == 0x12345678u && scw[0] == 0x9abcdef0u) acc[0][0] += 1.0f;""")
NODEC1 = ("""  decode_token_chunks<H, BM, EL, kThreads, CK, false>(
      mine() + a.off_token_f16, s.ring, s, total_tiles(), cta_in_rank(), nctas, [&](int row) {
        // The route list was written before the grid barrier by other CTAs: read through L2.
        const int* rl = reinterpret_cast<const int*>(mine() + a.off_route) + row * 3;
        const int sr = __ldcg(rl), tok = __ldcg(rl + 1);
        const u8* base = a.base[sr];
        return RowOperand{base + a.off_x + tok * a.pitch_x, base + a.off_x_sf + tok * a.pitch_x_sf};
      });
  grid_barrier(kPhaseTokens);""", "")
NODEC1_KEEP = (NODEC1[0], "  grid_barrier(kPhaseTokens);")
NOSTORE1 = ("        if (gg < kGroups) {\n          const ptx::u32x4 piece =",
            "        if (gg < kGroups && kCoherent) {  // ablation: FC1 (kCoherent false) stores nothing\n          const ptx::u32x4 piece =")
NODEC2 = ("""  decode_token_chunks<I, BM, EL, kThreads, CK, true>(
      mine() + a.off_token_f16, s.ring, s, total_tiles(), cta_in_rank(), nctas, [&](int row) {
        const u8* base = mine();
        return RowOperand{base + a.off_fc2_pool + static_cast<u64>(row) * a.pitch_fc2_pool,
                          base + a.off_fc2_sf + static_cast<u64>(row) * a.pitch_fc2_sf};
      });
  grid_barrier(kPhaseTokens);""", "")
NOTOK = [("      const u32 token_bytes = static_cast<u32>(rows * C::kRowBytes);",
          "      const u32 token_bytes = 0u * static_cast<u32>(rows * C::kRowBytes);"),
         ("        } else if (lane == kRowGroups) {",
          "        } else if (lane == kRowGroups && token_bytes != 0u) {")]
BAR_ROUTES = ("  grid_barrier(kPhaseRoutes);\n", "")
BAR_TOK1 = ("  grid_barrier(kPhaseTokens);\n  TokensReady::arrive();\n\n  // ---- phases 1 and 2",
            "  TokensReady::arrive();\n\n  // ---- phases 1 and 2")
BAR_FC1 = ("  grid_barrier(kPhaseAfterFc1);\n", "")
BAR_TOK2 = ("  grid_barrier(kPhaseTokens);\n  TokensReady::arrive();\n\n  // ---- phase 2:",
            "  TokensReady::arrive();\n\n  // ---- phase 2:")
PIPE = os.path.join("megamoe", "impls", "sm90_nvfp4_mega_moe_pipelined.cuh")
MMA2 = ("        ptx::mma_m16n8k16_f16(acc[nt], f.a0, f.a1, f.a2, f.a3, b0, b1);",
        "        ptx::mma_m16n8k16_f16(acc[nt], f.a0, f.a1, f.a2, f.a3, b0, b1);\n"
        "        ptx::mma_m16n8k16_f16(acc[nt], f.a0, f.a1, f.a2, f.a3, b0, b1);")
DEC2 = ("""      const nvfp4::HalfFragment f =
          nvfp4::decode_weight_word(words[q], nvfp4::scale_pair(sw, (q & 1) != 0));""",
        """      const nvfp4::HalfFragment f1 =
          nvfp4::decode_weight_word(words[q], nvfp4::scale_pair(sw, (q & 1) != 0));
      const nvfp4::HalfFragment f2 =
          nvfp4::decode_weight_word(words[q] ^ 0x5A5A5A5Au, nvfp4::scale_pair(sw, (q & 1) == 0));
      const bool use2 = (static_cast<u32>(ptx::ctaid_x()) & 0x40000000u) != 0u;
      const nvfp4::HalfFragment f{use2 ? f2.a0 : f1.a0, use2 ? f2.a1 : f1.a1,
                                  use2 ? f2.a2 : f1.a2, use2 ? f2.a3 : f1.a3};""")
# name -> (file, edits); the variants above edit the wide kernel's file
PIPE_VARIANTS = {"mma2": [MMA2], "dec2": [DEC2]}
VARIANTS = {
    "noepi1": [NOEPI1],
    "noepi2": [NOEPI2],
    "noepi12": [NOEPI1, NOEPI2],
    "mem": [MEM],
    "mem_noepi": [MEM, NOEPI1, NOEPI2],
    "nodec1": [NODEC1],
    "nodec12": [NODEC1, NODEC2],
    "mem_noepi_nodec12": [MEM, NOEPI1, NOEPI2, NODEC1, NODEC2],
    "nodec1_keepbarrier": [NODEC1_KEEP],
    "nostore1": [NOSTORE1],
    "notok": NOTOK,
    "nobar1": [BAR_ROUTES, BAR_TOK1],
    "nobar12": [BAR_ROUTES, BAR_TOK1, BAR_FC1, BAR_TOK2],
    "mem_noepi_nodec12_notok": [MEM, NOEPI1, NOEPI2, NODEC1, NODEC2] + NOTOK,
}

dest = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "wide_ablation")
for name, edits in VARIANTS.items():
    write_variant(dest, name, {WIDE: edits})
for name, edits in PIPE_VARIANTS.items():
    write_variant(dest, name, {PIPE: edits})
