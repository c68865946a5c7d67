# Wait accounting for the wide NVFP4 kernel (bench/NOTES.md, eighteenth session): copies the
# repository's kernels/ to DEST (default build/kern_wide_wa) and instruments
# sm90_nvfp4_mega_moe_wide.cuh: per consumer warp, %globaltimer marks at the phase boundaries
# and %clock cycles in stage waits, unit waits, tile syncs and epilogues; per producer, cycles
# waiting for free stages and for token chunks. The 100th launch prints one "TLW" line per warp.
# Run the bench on it with MEGAMOE_KERNEL_DIR=DEST MEGAMOE_ALLOW_LOCAL_MEMORY=1 (printf needs
# local memory), e.g. MEGAMOE_BENCH_PRESETS=dsv4-flash MEGAMOE_BENCH_TOKENS=512
# MEGAMOE_BENCH_ROUTINGS=uniform, and read the lines with wide_wait_report.py.
#   python3 bench/probes/wide_wait_accounting.py [DEST]
# Each edit must match the kernel source exactly once; a kernel change that moves one makes the
# script stop with the pattern it missed.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_patch import SourceEdit, copy_kernels  # noqa: E402

dst = copy_kernels("kern_wide_wa")
edit = SourceEdit(os.path.join(dst, "megamoe", "impls", "sm90_nvfp4_mega_moe_wide.cuh"))
sub = edit.sub

sub("using nvfp4_pipe::PublishedUnit;", """__device__ unsigned long long g_wa[264][18][28];
__device__ unsigned g_wa_calls;
__device__ __forceinline__ unsigned wa_clk() {
  unsigned c;
  asm volatile("mov.u32 %0, %%clock;" : "=r"(c));
  return c;
}
__device__ __forceinline__ void wa_mark(int w, int i) {
  if ((threadIdx.x & 31) == 0) g_wa[blockIdx.x][w][i] = ptx::globaltimer_ns();
}
__device__ __forceinline__ void wa_put(int w, int i, unsigned long long v) {
  if ((threadIdx.x & 31) == 0) g_wa[blockIdx.x][w][i] = v;
}
// One "TLW call cta warp v0 .. v27" line per warp, from the 100th launch only.
__device__ __noinline__ void wa_print(unsigned call, int w) {
  if ((threadIdx.x & 31) != 0 || call != 100) return;
  const unsigned long long* q = g_wa[blockIdx.x][w];
  // One printf: lines of concurrent warps must not interleave.
  printf("TLW %u %u %d %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu "
         "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu\\n",
         call, blockIdx.x, w, q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10],
         q[11], q[12], q[13], q[14], q[15], q[16], q[17], q[18], q[19], q[20], q[21], q[22], q[23],
         q[24], q[25], q[26], q[27]);
}
using nvfp4_pipe::PublishedUnit;""")
sub("""                                 float (&acc)[NTL][4]) {
  using C = Chunk<CK>;""", """                                 float (&acc)[NTL][4], unsigned& wfull, int& first_mark) {
  using C = Chunk<CK>;""")
sub("""    ptx::mbarrier_wait_parity(full + pos.stage, pos.parity);
    const u8* st = ring + pos.stage * C::template kStageBytes<NS>;""", """    const unsigned t0 = wa_clk();
    ptx::mbarrier_wait_parity(full + pos.stage, pos.parity);
    wfull += wa_clk() - t0;
    if (first_mark >= 0) {
      wa_mark(threadIdx.x >> 5, first_mark);
      first_mark = -1;
    }
    const u8* st = ring + pos.stage * C::template kStageBytes<NS>;""")
sub("""  ptx::griddep_wait();

  // Tile choice on the device, this kernel the alternative""", """  ptx::griddep_wait();
  const unsigned wa_call = *reinterpret_cast<volatile unsigned*>(&g_wa_calls);
  wa_mark(warp, 0);
  const unsigned wa_c0 = wa_clk();

  // Tile choice on the device, this kernel the alternative""")
sub("""  auto total_tiles = [&] { return min(s.tile_prefix[EL], a.pool_rows / BM); };
""", """  auto total_tiles = [&] { return min(s.tile_prefix[EL], a.pool_rows / BM); };
  wa_mark(warp, 1);
""")
# producer
sub("""    auto tokens_ready = [&](int phase) {
      for (; ready_phases <= phase; ++ready_phases) {
        TokensReady::wait();
        ptx::fence_proxy_async_global();
      }
    };""", """    unsigned p_empty[2] = {0, 0}, p_tok = 0;
    bool p_first = true;
    auto tokens_ready = [&](int phase) {
      for (; ready_phases <= phase; ++ready_phases) {
        const unsigned t0 = wa_clk();
        TokensReady::wait();
        p_tok += wa_clk() - t0;
        wa_mark(kProducerWarp, 4 + ready_phases);
        ptx::fence_proxy_async_global();
      }
    };""")
sub("""        if (round > 0) ptx::mbarrier_wait_parity(s.empty + stage, (round - 1) & 1u);
        u8* dst = s.ring + stage * C::template kStageBytes<NS>;""", """        if (round > 0) {
          const unsigned t0 = wa_clk();
          ptx::mbarrier_wait_parity(s.empty + stage, (round - 1) & 1u);
          p_empty[u.phase] += wa_clk() - t0;
        }
        if (p_first) {
          p_first = false;
          wa_mark(kProducerWarp, 2);
        }
        u8* dst = s.ring + stage * C::template kStageBytes<NS>;""")
sub("""    tokens_ready(1);  // exactly the consumers' two arrivals
    return;""", """    tokens_ready(1);  // exactly the consumers' two arrivals
    wa_mark(kProducerWarp, 13);
    wa_put(kProducerWarp, 14, p_empty[0]);
    wa_put(kProducerWarp, 19, p_empty[1]);
    wa_put(kProducerWarp, 15, p_tok);
    wa_put(kProducerWarp, 23, wa_c0);
    wa_put(kProducerWarp, 24, wa_clk());
    wa_print(wa_call, kProducerWarp);
    return;""")
sub("""  grid_barrier(kPhaseRoutes);
""", """  grid_barrier(kPhaseRoutes);
  wa_mark(warp, 2);
""")
sub("""        return RowOperand{base + a.off_x + tok * a.pitch_x, base + a.off_x_sf + tok * a.pitch_x_sf};
      });
  grid_barrier(kPhaseTokens);
  TokensReady::arrive();""", """        return RowOperand{base + a.off_x + tok * a.pitch_x, base + a.off_x_sf + tok * a.pitch_x_sf};
      });
  wa_mark(warp, 3);
  grid_barrier(kPhaseTokens);
  wa_mark(warp, 4);
  TokensReady::arrive();
  unsigned w_full = 0, w_take = 0, w_sync = 0, w_epi = 0, w_units = 0;
  int wa_first = 5;""")
sub("""      consume_wide<NS, NTL, STAGES, CK>(s.ring, s.full, s.empty, pos, nch, acc);
      finish(acc);""", """      consume_wide<NS, NTL, STAGES, CK>(s.ring, s.full, s.empty, pos, nch, acc, w_full, wa_first);
      const unsigned te0 = wa_clk();
      finish(acc);
      w_epi += wa_clk() - te0;
      ++w_units;""")
# take_unit timing: wrap all take_unit calls in the consumer part
i0 = edit.text.index("  // ---- phase 1: FC1 + activation + re-quantization")
body = edit.text[i0:]
n = body.count("nvfp4_pipe::take_unit(s.unit_q, s.unit_ready, upos)")
body = body.replace("nvfp4_pipe::take_unit(s.unit_q, s.unit_ready, upos)", "wa_take()")
nsync = body.count("      Sync::sync();")
body = body.replace("      Sync::sync();", "      wa_sync();")
edit.text = edit.text[:i0] + """  auto wa_take = [&] {
    const unsigned t0 = wa_clk();
    const PublishedUnit u = nvfp4_pipe::take_unit(s.unit_q, s.unit_ready, upos);
    w_take += wa_clk() - t0;
    return u;
  };
  auto wa_sync = [&] {
    const unsigned t0 = wa_clk();
    Sync::sync();
    w_sync += wa_clk() - t0;
  };
""" + body
print("take sites", n, "sync sites", nsync)
sub("""  grid_barrier(kPhaseAfterFc1);
""", """  wa_mark(warp, 6);
  wa_put(warp, 14, w_full);
  wa_put(warp, 15, w_take);
  wa_put(warp, 16, w_sync);
  wa_put(warp, 17, w_epi);
  wa_put(warp, 18, w_units);
  w_full = w_take = w_sync = w_epi = w_units = 0;
  wa_first = 10;
  grid_barrier(kPhaseAfterFc1);
  wa_mark(warp, 7);
""")
sub("""                          base + a.off_fc2_sf + static_cast<u64>(row) * a.pitch_fc2_sf};
      });
  grid_barrier(kPhaseTokens);
  TokensReady::arrive();""", """                          base + a.off_fc2_sf + static_cast<u64>(row) * a.pitch_fc2_sf};
      });
  wa_mark(warp, 8);
  grid_barrier(kPhaseTokens);
  wa_mark(warp, 9);
  TokensReady::arrive();""")
sub("""  nvfp4_moe::barrier_before_combine<R, Sync>(a, grid_counter(), """, """  wa_mark(warp, 11);
  wa_put(warp, 19, w_full);
  wa_put(warp, 20, w_take);
  wa_put(warp, 21, w_sync);
  wa_put(warp, 22, w_epi);
  wa_put(warp, 25, w_units);
  nvfp4_moe::barrier_before_combine<R, Sync>(a, grid_counter(), """)
sub("""  nvfp4_moe::combine_rank_tokens<H, K, EL, R, TMAX, kThreads, FP8C>(
      a, mine(), rank_of(), min(s.src_tokens[rank_of()], a.out_rows[rank_of()]), cta_in_rank(),
      nctas);
}""", """  wa_mark(warp, 12);
  nvfp4_moe::combine_rank_tokens<H, K, EL, R, TMAX, kThreads, FP8C>(
      a, mine(), rank_of(), min(s.src_tokens[rank_of()], a.out_rows[rank_of()]), cta_in_rank(),
      nctas);
  wa_mark(warp, 13);
  wa_put(warp, 23, wa_c0);
  wa_put(warp, 24, wa_clk());
  wa_print(wa_call, warp);
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(&g_wa_calls, 1u);
}""")
sub("""MEGAMOE_DEVICE void decode_token_chunks(u8* scratch, u8* staging, const S& s, int total_tiles,
                                        int cta, int nctas, RowOf row_of) {""", """MEGAMOE_DEVICE void decode_token_chunks(u8* scratch, u8* staging, const S& s, int total_tiles,
                                        int cta, int nctas, RowOf row_of, int wa_slot = 26) {""")
sub("""  ptx::fence_proxy_async_global();
  ptx::fence_proxy_async_shared();
}""", """  wa_mark(threadIdx.x >> 5, wa_slot);
  ptx::fence_proxy_async_global();
  ptx::fence_proxy_async_shared();
}""")
sub("""                          base + a.off_fc2_sf + static_cast<u64>(row) * a.pitch_fc2_sf};
      });""", """                          base + a.off_fc2_sf + static_cast<u64>(row) * a.pitch_fc2_sf};
      }, 27);""")
edit.save()
print("ok")
