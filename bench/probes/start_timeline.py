# Start of a call of the pipelined NVFP4 kernel at small T (bench/NOTES.md, twenty-fifth session):
# copies the repository's kernels/ to DEST (default build/kern_start_timeline) with %globaltimer
# marks where the first weight request and the first token tile are made -- thread 0 on the
# consumers' side, the producer warp's lane 0 on its own -- and at the phase boundaries. At its
# 101st launch CTA 0 prints the 100th launch's marks as "T1S mark min median max" (us from the
# earliest CTA's entry; a mark right after a bar.sync may read early). Marks: 0 entry,
# 1 griddepcontrol.wait done, 2 phase 0 done, 3 producer branch, 4 first unit's expert, 17 unit
# published, 18 the stage's pointers, 19 stage armed, 5 first bulk copies issued, 6 producer after
# the first-tile wait, 7 consumers' first unit taken, 8 routes gathered, 9 token tile in, 10 first
# unit done, 11 FC1 done, 12 after the FC1 barrier, 13 first FC2 token tile, 14 FC2 done, 15 after
# the FC2 barrier, 16 end; per unit k = 0..2 of the CTA (thread 0): 20 + k FC1 unit streamed (its
# CTA barrier passed), 23 + k its epilogue done, 26 + k / 29 + k the same for FC2, 38 + k the next
# unit taken after FC2 unit k, 35 + k FC2 unit k about to stream, 32 + k its first stage full. Run
# the bench on it, e.g.
#   python3 bench/probes/start_timeline.py /tmp/kern_start
#   MEGAMOE_KERNEL_DIR=/tmp/kern_start MEGAMOE_ALLOW_LOCAL_MEMORY=1 MEGAMOE_BENCH_PRESETS=dsv4-flash \
#     MEGAMOE_BENCH_TOKENS=1 MEGAMOE_BENCH_ROUTINGS=uniform bench_nvfp4_mega_moe OUT | grep T1S
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_patch import SourceEdit, copy_kernels, timeline_source  # noqa: E402

dst = copy_kernels("kern_start_timeline")
edit = SourceEdit(os.path.join(dst, "megamoe", "impls", "sm90_nvfp4_mega_moe_pipelined.cuh"))
sub = edit.sub
NM = 41
sub("namespace megamoe::device {\nnamespace nvfp4_pipe {", """namespace megamoe::device {
""" + timeline_source("t1", NM, "T1S") + """__device__ __forceinline__ void t1_mark(unsigned n, int j) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  g_t1[n & 1u][blockIdx.x][j] = t;
}
namespace nvfp4_pipe {""")
sub("""  ptx::griddep_wait();

  // Ranks in other processes""", """  unsigned long long t1_t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1_t0));
  ptx::griddep_wait();
  const unsigned t1n = threadIdx.x == 0 ? g_t1_launch[blockIdx.x]++ : 0u;
  if (threadIdx.x == 0) {
    g_t1_cur[blockIdx.x] = t1n;
    g_t1[t1n & 1u][blockIdx.x][0] = t1_t0;
    t1_mark(t1n, 1);
  }
  t1_print(t1n, nctas);

  // Ranks in other processes""")
sub("""          a, s, first_expert);

  // Tile choice on the device""", """          a, s, first_expert);
  if (threadIdx.x == 0) t1_mark(t1n, 2);
  const unsigned t1p = g_t1_cur[blockIdx.x];

  // Tile choice on the device""")
sub("""      int stage = 0;
      u32 round = 0;""", """      if (lane == 0) t1_mark(t1p, 3);
      bool t1_first = true;
      int stage = 0;
      u32 round = 0;""")
sub("""          prev_tile = u.tileg;
        }""", """          prev_tile = u.tileg;
        }
        if (lane == 0 && t1_first) t1_mark(t1p, 4);""")
sub("""        ++seq;
        const int nb = u.phase == 0 ? H / 128 : I / 128;""", """        ++seq;
        if (lane == 0 && t1_first) t1_mark(t1p, 17);
        const int nb = u.phase == 0 ? H / 128 : I / 128;""")
sub("""        constexpr int kStep = KW * SB;  // blocks per row group and stage""", """        if (lane == 0 && t1_first) {
          unsigned long long t;
          asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "l"(q), "l"(sf));
          g_t1[t1p & 1u][blockIdx.x][18] = t;
        }
        constexpr int kStep = KW * SB;  // blocks per row group and stage""")
sub("""          __syncwarp();  // the stage's byte count is armed before any of its copies lands""", """          __syncwarp();  // the stage's byte count is armed before any of its copies lands
          if (lane == 0 && t1_first) t1_mark(t1p, 19);""")
sub("""            ptx::bulk_load(dst + kStep * 1024, sf + blk * 128, kStep * 128, s.full + stage, policy);
          }""", """            ptx::bulk_load(dst + kStep * 1024, sf + blk * 128, kStep * 128, s.full + stage, policy);
          }
          if (lane == 0 && t1_first) t1_mark(t1p, 5);
          t1_first = false;""")
sub("""            FirstTileReady::wait();
            first_tile_ready = true;
          }
        }""", """            FirstTileReady::wait();
            if (lane == 0) t1_mark(t1p, 6);
            first_tile_ready = true;
          }
        }""")
sub("""  Stream cs = stream_of(cur, Stream{nullptr, nullptr, 0, RING, -1, 0});""",
    """  Stream cs = stream_of(cur, Stream{nullptr, nullptr, 0, RING, -1, 0});
  if (threadIdx.x == 0) t1_mark(t1n, 7);
  bool t1_c = true;
  int t1_u = 0;  // units of the current phase""")
sub("""      if (warp == 0) nvfp4_moe::gather_tile_routes<K, R, BM>(a, s, first_expert + e, tile);
      Sync::sync();""", """      if (warp == 0) nvfp4_moe::gather_tile_routes<K, R, BM>(a, s, first_expert + e, tile);
      Sync::sync();
      if (threadIdx.x == 0 && t1_c) t1_mark(t1n, 8);""")
sub("""      if (kStaged && !first_tile_ready) {
        FirstTileReady::arrive();
        first_tile_ready = true;
      }""", """      if (kStaged && !first_tile_ready) {
        FirstTileReady::arrive();
        first_tile_ready = true;
      }
      if (threadIdx.x == 0 && t1_c) t1_mark(t1n, 9);""")
sub("""    const float g2 = __ldg(a.fc2_scale[rank] + e);
    stream_unit(ns);""", """    const float g2 = __ldg(a.fc2_scale[rank] + e);
    stream_unit(ns);
    if (threadIdx.x == 0 && t1_c) t1_mark(t1n, 10);
    if (threadIdx.x == 0 && t1_u < 3) t1_mark(t1n, 20 + t1_u);
    t1_c = false;""")
sub("""  // The ring already holds the first FC2 blocks""", """  if (threadIdx.x == 0) t1_mark(t1n, 11);
  // The ring already holds the first FC2 blocks""")
sub("""  // ---- phase 2: FC2 into the source ranks' combine slots""", """  if (threadIdx.x == 0) t1_mark(t1n, 12);
  t1_c = true;
  t1_u = 0;
  // ---- phase 2: FC2 into the source ranks' combine slots""")
sub("""          [&](int i) { return mine + a.off_fc2_sf + static_cast<u64>(row0 + i) * a.pitch_fc2_sf; });
      Sync::sync();""", """          [&](int i) { return mine + a.off_fc2_sf + static_cast<u64>(row0 + i) * a.pitch_fc2_sf; });
      Sync::sync();
      if (threadIdx.x == 0 && t1_c) t1_mark(t1n, 13);
      t1_c = false;""")
sub("""  nvfp4_moe::barrier_before_combine<R, Sync>(a, grid_counter, cta_in_rank,""",
    """  if (threadIdx.x == 0) t1_mark(t1n, 14);
  nvfp4_moe::barrier_before_combine<R, Sync>(a, grid_counter, cta_in_rank,""")
sub("""  // ---- phase 3: combine the rank's own tokens""", """  if (threadIdx.x == 0) t1_mark(t1n, 15);
  // ---- phase 3: combine the rank's own tokens""")
sub("""      a, mine, rank, min(s.src_tokens[rank], a.out_rows[rank]), cta_in_rank, nctas);
}
""", """      a, mine, rank, min(s.src_tokens[rank], a.out_rows[rank]), cta_in_rank, nctas);
  if (threadIdx.x == 0) t1_mark(t1n, 16);
}
""")
sub("""    end_unit(nx, ns);
  }

  if (kStaged && !first_tile_ready) FirstTileReady::arrive();""", """    if (threadIdx.x == 0 && t1_u < 3) t1_mark(t1n, 23 + t1_u);
    ++t1_u;
    end_unit(nx, ns);
  }

  if (kStaged && !first_tile_ready) FirstTileReady::arrive();""")
sub("""    const float factor = __fmul_rn(__ldg(a.fc2_scale[rank] + e), __ldg(a.alpha2[rank] + e));
    stream_unit(ns);""", """    const float factor = __fmul_rn(__ldg(a.fc2_scale[rank] + e), __ldg(a.alpha2[rank] + e));
    if constexpr (kStaged) {
      if (threadIdx.x == 0 && t1_u < 3) {
        t1_mark(t1n, 35 + t1_u);
        ptx::mbarrier_wait_parity(s.full + pos.stage, pos.parity);
        t1_mark(t1n, 32 + t1_u);
      }
    }
    stream_unit(ns);
    if (threadIdx.x == 0 && t1_u < 3) t1_mark(t1n, 26 + t1_u);""")
sub("""      fc2_store_bf16_rows<H, TMAX, NS, kWarps>(a, s, cur.sub, sub_live, cur.col, factor, y);
    }
    end_unit(nx, ns);""", """      fc2_store_bf16_rows<H, TMAX, NS, kWarps>(a, s, cur.sub, sub_live, cur.col, factor, y);
    }
    if (threadIdx.x == 0 && t1_u < 3) t1_mark(t1n, 29 + t1_u);
    ++t1_u;
    end_unit(nx, ns);
    if (threadIdx.x == 0 && t1_u <= 3) t1_mark(t1n, 37 + t1_u);""")
edit.save()
print("instrumented", edit.path)
