#pragma once
// The SM90 NVFP4 x NVFP4 MegaMoE layer: one persistent launch for every driven rank
// (docs/nvfp4_kernel.md). Phases, per rank:
//   0  every CTA counts the routes of all source ranks to the rank's local experts (peer reads
//      of "topk_idx") and derives the padded pool layout; no barrier is needed for that.
//   1  FC1 work items (expert, token tile, 32 intermediate columns): gather the tile's tokens
//      (peer reads of "x"), decode them exactly to f16 in shared memory, stream the 64 weight
//      rows (gate and up of the same columns), activation, route weight, NVFP4 re-quantization
//      with the expert's fc2_input_scale into "fc2_pool". Items with column tile 0 also write
//      the tile's "route_list" entries.   -- rank-local grid barrier --
//   2  FC2 work items (expert, token tile, 64 hidden rows): y rounded to bf16 into the source
//      rank's "combine" slot [k][token] (peer writes).   -- cross-rank barrier (rank-local
//      at R = 1: barrier_before_combine) --
//   3  combine: out[t] = sum over k of the token's live slots, in k order, f32 -> bf16.
// MMA: weights on the M side (m16n8k16, A decoded in registers), tokens on N.
#include "megamoe/comm/rank_barrier.cuh"
#include "megamoe/common.cuh"
#include "megamoe/formats/exact_codecs.cuh"
#include "megamoe/formats/exact_math.cuh"
#include "megamoe/formats/nvfp4_fragment_decode.cuh"
#include "megamoe/ptx/mma_sm90.cuh"
#include "megamoe/ptx/pdl.cuh"
#include "megamoe/ptx/vector_memory.cuh"
#include "megamoe/scheduler/nvfp4_schedule.cuh"

namespace megamoe::device {

inline constexpr int kNvfp4MaxRanks = 8;
inline constexpr int kNvfp4Threads = 256;  // 8 warps: 4 row groups x 2 K halves

enum Nvfp4Activation : int { kActSwiglu = 0, kActGeglu = 1, kActSwigluOai = 2 };

struct Nvfp4MoeArgs {
  u8* base[kNvfp4MaxRanks];  // symmetric buffer of each rank (peer pointers)
  const u8* w13[kNvfp4MaxRanks];
  const u8* w13_sf[kNvfp4MaxRanks];
  const u8* w2[kNvfp4MaxRanks];
  const u8* w2_sf[kNvfp4MaxRanks];
  const float* alpha1[kNvfp4MaxRanks];     // w13 global scale per local expert
  const float* alpha2[kNvfp4MaxRanks];     // w2 global scale
  const float* fc2_scale[kNvfp4MaxRanks];  // global scale of the re-quantized intermediate
  u16* out[kNvfp4MaxRanks];
  u64 out_pitch[kNvfp4MaxRanks];  // elements between output rows
  int out_rows[kNvfp4MaxRanks];
  // Region offsets and row pitches (bytes) of the plan.
  u64 off_x, off_x_sf, off_x_global, off_topk_idx, off_topk_w, off_num_tokens;
  u64 off_route, off_fc2_pool, off_fc2_sf, off_combine, off_sync;
  u64 pitch_x, pitch_x_sf, pitch_fc2_pool, pitch_fc2_sf;
  u64 off_combine_sf, pitch_combine_sf;  // fp8_combine: f32 scale per 128 values of a slot
  u64 off_token_f16;  // wide kernel: the decoded token chunks ("token_f16"; 0 without one)
  u64 sync_grid, sync_rank_barrier, sync_status;  // field offsets inside "sync"
  u64 timeout_ns;
  int pool_rows;
  int first_rank;  // driven ranks: first_rank .. first_rank + num_driven - 1
  int num_driven;
  int ctas_per_rank;
  float clamp;  // swiglu / geglu: 0 = off
  float oai_alpha, oai_limit;
  // Tile choice on the device (scheduler/tile_rows_choice.cuh): 0, or the wide kernel's tile
  // that the table's kernel (a smaller tile: it decides) hands the call to when the routing
  // favours it (by pct / 100 weight passes plus min_gain passes; the kernel of that tile reads the
  // verdict); the verdict word's offset inside "sync".
  u64 sync_tile_choice;
  int tile_choice_alt, tile_choice_pct, tile_choice_min_gain;
};

namespace nvfp4_moe {

// The kernel's dynamic shared memory as S. The host sizes it from a mirror of S
// (src/runtime/register_nvfp4_mega_moe.cpp): a mismatch traps rather than corrupting.
template <class S>
MEGAMOE_DEVICE S& dynamic_smem_as(unsigned char* raw) {
  u32 dyn;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
  if (dyn < sizeof(S)) __trap();
  return *reinterpret_cast<S*>(raw);
}

template <int ACT>
MEGAMOE_DEVICE float activate(float gate, float up, const Nvfp4MoeArgs& a) {
  if constexpr (ACT == kActSwigluOai) {
    const float c = a.oai_limit;
    gate = gate > c ? c : gate;
    up = up > c ? c : (up < -c ? -c : up);
    return (up + 1.0f) * (gate * exact::sigmoid_fp32(a.oai_alpha * gate));
  } else {
    if (a.clamp > 0.0f) {
      const float c = a.clamp;
      gate = gate > c ? c : gate;
      up = up > c ? c : (up < -c ? -c : up);
    }
    if constexpr (ACT == kActSwiglu) {
      return gate * exact::sigmoid_fp32(gate) * up;
    } else {
      // Each step rounded on its own (no contraction into FMAs), as in the CPU reference.
      const float cube = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, gate), gate), gate);
      const float inner = __fmul_rn(0.7978845608028654f, __fadd_rn(gate, cube));
      const float t = __fadd_rn(1.0f, exact::tanh_fp32(inner));
      return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, gate), t), up);
    }
  }
}

// Shared memory of one CTA (dynamic). B: the token tile, f16 [NS][KMAX + 8] (the 16-byte row
// pad keeps the fragment reads conflict-free).
template <int EL, int BM, int NS, int KMAX>
struct Smem {
  u16 b[NS * (KMAX + 8)];
  float red[4 * 32 * (NS / 8) * 4];  // split-K partials of the kh = 1 warps
  float tile[64 * NS];               // the CTA's 64 x NS result tile (rows x tokens)
  int count[EL];
  int tile_prefix[EL + 1];
  int src_tokens[8];  // live tokens of each source rank
  int route_src[BM], route_tok[BM], route_k[BM];
  float route_w[BM], route_alpha[BM];
};

// Decodes rows [0, ceil8(live)) of the token tile into s.b: row i < live from `row_ptr(i)`
// (nibbles) and `sf_ptr(i)` (scale bytes); rows past `live` are zero.
template <int KD, int KMAX, bool kCoherent, class RowPtr, class SfPtr>
MEGAMOE_DEVICE void load_token_tile(u16* b, int live, RowPtr row_ptr, SfPtr sf_ptr) {
  constexpr int kBlocks = KD / 16;
  const int rows = (live + 7) & ~7;
  for (int u = threadIdx.x; u < rows * kBlocks; u += kNvfp4Threads) {
    const int i = u / kBlocks;
    const int blk = u - i * kBlocks;
    u32 v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (i < live) {
      const u8* q = row_ptr(i) + blk * 8;
      u32 lo, hi, sc;
      if constexpr (kCoherent) {
        ptx::load_8(q, lo, hi);
        sc = __ldcg(sf_ptr(i) + blk);
      } else {
        ptx::load_nc_8(q, lo, hi);
        sc = __ldg(sf_ptr(i) + blk);
      }
      nvfp4::decode_activation_block(lo, hi, sc, v);
    }
    uint4* dst = reinterpret_cast<uint4*>(b + i * (KMAX + 8) + blk * 16);
    dst[0] = make_uint4(v[0], v[1], v[2], v[3]);
    dst[1] = make_uint4(v[4], v[5], v[6], v[7]);
  }
}

// One warp: acc[nt] += W[16 rows of the warp's row group, its half of K] x B[K, 8 tokens of nt].
// `wq` / `wsf`: the row group's weight stream (kernel layout, transform docs); B in s.b.
template <int KD, int KMAX, int NT>
MEGAMOE_DEVICE void warp_gemm(const u8* wq, const u8* wsf, const u16* b, int live_tiles,
                              float (&acc)[NT][4]) {
  constexpr int kNb = KD / 128;  // blocks of 128 k: 1024 nibble bytes + 128 scale bytes
  constexpr int P = 4;           // blocks in flight per warp
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int kh = (threadIdx.x >> 5) >> 2;
  const int nbw = (kNb - kh + 1) / 2;  // this warp's blocks: kh, kh + 2, ...
  const u8* qp = wq + lane * 16;
  const u8* sp = wsf + g * 16;
  const u16* brow = b + g * (KMAX + 8) + 2 * t;

  ptx::u32x4 q0[P], q1[P], sc[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    if (p < nbw) {
      const int blk = kh + 2 * p;
      q0[p] = ptx::load_stream_16(qp + blk * 1024);
      q1[p] = ptx::load_stream_16(qp + blk * 1024 + 512);
      sc[p] = ptx::load_stream_16(sp + blk * 128);
    }
  }
  for (int j0 = 0; j0 < nbw; j0 += P) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int j = j0 + p;
      if (j < nbw) {
        const int blk = kh + 2 * j;
        const u32 words[8] = {q0[p].x, q0[p].y, q0[p].z, q0[p].w,
                              q1[p].x, q1[p].y, q1[p].z, q1[p].w};
        const u32 scw[4] = {sc[p].x, sc[p].y, sc[p].z, sc[p].w};
        const int jn = j + P;
        if (jn < nbw) {
          const int nb = kh + 2 * jn;
          q0[p] = ptx::load_stream_16(qp + nb * 1024);
          q1[p] = ptx::load_stream_16(qp + nb * 1024 + 512);
          sc[p] = ptx::load_stream_16(sp + nb * 128);
        }
        const u16* bk = brow + blk * 128;
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const u32 sw = scw[q >> 1];
          const nvfp4::HalfFragment f =
              nvfp4::decode_weight_word(words[q], nvfp4::scale_pair(sw, (q & 1) != 0));
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            if (nt < live_tiles) {
              const u16* bp = bk + nt * 8 * (KMAX + 8) + q * 16;
              const u32 b0 = *reinterpret_cast<const u32*>(bp);
              const u32 b1 = *reinterpret_cast<const u32*>(bp + 8);
              ptx::mma_m16n8k16_f16(acc[nt], f.a0, f.a1, f.a2, f.a3, b0, b1);
            }
          }
        }
      }
    }
  }
}

// Sums the two K halves and leaves the CTA's 64 x NS tile (raw accumulators) in s.tile.
template <int NT, class S>
MEGAMOE_DEVICE void reduce_tile(S& s, float (&acc)[NT][4]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rg = warp & 3, kh = warp >> 2;
  float* red = s.red + (rg * 32 + lane) * NT * 4;
  if (kh == 1) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) red[nt * 4 + c] = acc[nt][c];
  }
  __syncthreads();
  if (kh == 0) {
    const int g = lane >> 2, t = lane & 3;
    constexpr int NS = NT * 8;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float v = acc[nt][c] + red[nt * 4 + c];
        const int row = rg * 16 + g + (c >= 2 ? 8 : 0);
        const int col = nt * 8 + 2 * t + (c & 1);
        s.tile[row * NS + col] = v;
      }
    }
  }
  __syncthreads();
}

// Phase 0 (every CTA, redundantly): each source rank's live token count, the routes it sends to
// this rank's local experts (shared-memory atomics: the counts are order independent) and the
// padded tile prefix, ceil(count / BM) tiles per expert. Threads [0, THREADS) count; all BLOCK
// threads of the CTA take part in its barriers. Returns the rank's tile count, clamped to the
// pool: tiles past its capacity (only reachable with repeated expert ids in one token's top-k,
// which the planner excludes) are dropped rather than written out of bounds.
template <int EL, int K, int R, int BM, int TMAX, int THREADS, int BLOCK, class S>
MEGAMOE_DEVICE int plan_tiles(const Nvfp4MoeArgs& a, S& s, int first_expert) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  constexpr bool kEveryThread = THREADS == BLOCK;
  if (tid < R) {
    const int n = *reinterpret_cast<const volatile int*>(a.base[tid] + a.off_num_tokens);
    s.src_tokens[tid] = n < 0 ? 0 : (n > TMAX ? TMAX : n);
  }
  const bool counts = kEveryThread || tid < THREADS;
  if (counts) {
    for (int e = tid; e < EL; e += THREADS) s.count[e] = 0;
  }
  // Every rank's first THREADS ids are requested before its token count is known (TMAX K ids
  // are always there to read): at decode sizes these are all of them, and the two loads'
  // latencies overlap instead of adding up.
  int first_id[R];
#pragma unroll
  for (int sr = 0; sr < R; ++sr) {
    const int* idx = reinterpret_cast<const int*>(a.base[sr] + a.off_topk_idx);
    first_id[sr] = counts && tid < TMAX * K ? __ldg(idx + tid) : -1;
  }
  __syncthreads();
  auto count = [&](int id) {
    id -= first_expert;
    if (id >= 0 && id < EL) atomicAdd(&s.count[id], 1);
  };
#pragma unroll
  for (int sr = 0; sr < R; ++sr) {
    const int* idx = reinterpret_cast<const int*>(a.base[sr] + a.off_topk_idx);
    const int n = s.src_tokens[sr] * K;
    if (counts && tid < n) count(first_id[sr]);
    for (int i = tid + THREADS; counts && i < n; i += THREADS) count(__ldg(idx + i));
  }
  __syncthreads();
  if (warp == 0) {
    constexpr int kPer = (EL + 31) / 32;
    int local = 0;
    for (int i = 0; i < kPer; ++i) {
      const int e = lane * kPer + i;
      if (e < EL) local += (s.count[e] + BM - 1) / BM;
    }
    int incl = local;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int v = __shfl_up_sync(0xFFFFFFFFu, incl, d);
      if (lane >= d) incl += v;
    }
    int run = incl - local;
    for (int i = 0; i < kPer; ++i) {
      const int e = lane * kPer + i;
      if (e < EL) {
        s.tile_prefix[e] = run;
        run += (s.count[e] + BM - 1) / BM;
      }
    }
    if (lane == 31) s.tile_prefix[EL] = incl;
  }
  __syncthreads();
  const int total_tiles = s.tile_prefix[EL];
  return total_tiles * BM > a.pool_rows ? a.pool_rows / BM : total_tiles;
}

// FC1 token operand of route r of the current tile (s.route_src / s.route_tok): the token's
// NVFP4 row and its scale row in the source rank's buffer.
template <class S>
MEGAMOE_DEVICE const u8* fc1_token_row(const Nvfp4MoeArgs& a, const S& s, int r) {
  return a.base[s.route_src[r]] + a.off_x + s.route_tok[r] * a.pitch_x;
}
template <class S>
MEGAMOE_DEVICE const u8* fc1_token_sf_row(const Nvfp4MoeArgs& a, const S& s, int r) {
  return a.base[s.route_src[r]] + a.off_x_sf + s.route_tok[r] * a.pitch_x_sf;
}

// One warp: the routes of expert `want` (global id) in (src_rank, token, k) order; route p of
// [tile * BM, tile * BM + BM) goes to sink(p - tile * BM, src_rank, token, k). Eight independent
// loads per lane before the first ballot: the scan is latency bound.
template <int K, int R, int BM, class S, class Sink>
MEGAMOE_DEVICE void scan_tile_routes(const Nvfp4MoeArgs& a, const S& s, int want, int tile,
                                     Sink sink) {
  const int lane = threadIdx.x & 31;
  const int r0 = tile * BM, r1 = r0 + BM;
  int pos = 0;
  for (int sr = 0; sr < R && pos < r1; ++sr) {
    const int* idx = reinterpret_cast<const int*>(a.base[sr] + a.off_topk_idx);
    const int n = s.src_tokens[sr] * K;
    for (int base = 0; base < n && pos < r1; base += 256) {
      int ids[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int i = base + u * 32 + lane;
        ids[u] = i < n ? __ldg(idx + i) : -1;
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int i = base + u * 32 + lane;
        const bool m = ids[u] == want;
        const u32 bal = __ballot_sync(0xFFFFFFFFu, m);
        if (m) {
          const int p = pos + __popc(bal & ((1u << lane) - 1u));
          if (p >= r0 && p < r1) sink(p - r0, sr, i / K, i - (i / K) * K);
        }
        pos += __popc(bal);
      }
    }
  }
}

// One warp: the tile's routes into s.route_src / route_tok / route_k.
template <int K, int R, int BM, class S>
MEGAMOE_DEVICE void gather_tile_routes(const Nvfp4MoeArgs& a, S& s, int want, int tile) {
  scan_tile_routes<K, R, BM>(a, s, want, tile, [&](int j, int sr, int tok, int k) {
    s.route_src[j] = sr;
    s.route_tok[j] = tok;
    s.route_k[j] = k;
  });
}

// FC1's activation of one (column, token): gate and up from their raw tensor-core results
// (x kWeightUnscale, x the route's alpha); the caller multiplies by the route weight.
template <int ACT>
MEGAMOE_DEVICE float fc1_activation(float gate_raw, float up_raw, float alpha,
                                    const Nvfp4MoeArgs& a) {
  const float gate = __fmul_rn(gate_raw * nvfp4::kWeightUnscale, alpha);
  const float up = __fmul_rn(up_raw * nvfp4::kWeightUnscale, alpha);
  return activate<ACT>(gate, up, a);
}

// FC1 epilogue of token i of the sub-tile (route r of the tile), one warp, lane = column of the
// 32-column tile `col`: gate and up (`y(row, i)`: the raw result of tile row `row`, gate rows
// 0..31, up rows 32..63), activation, route weight, NVFP4 re-quantization in 16-column blocks
// with the expert's fc2_input_scale g2, into row pool_row0 + r of the rank's fc2_pool. Every
// lane runs it (the shuffles), i < sub_live writes.
template <int ACT, class S, class Y>
MEGAMOE_DEVICE void fc1_requantize_token(const Nvfp4MoeArgs& a, const S& s, u8* mine, int i, int r,
                                         int sub_live, int col, int pool_row0, float g2, Y y) {
  const int lane = threadIdx.x & 31;
  float v = 0.0f;
  if (i < sub_live) {
    v = s.route_w[r] * fc1_activation<ACT>(y(lane, i), y(32 + lane, i), s.route_alpha[r], a);
  }
  float amax = exact::finite_abs(v);
#pragma unroll
  for (int d = 8; d >= 1; d >>= 1) {
    amax = exact::amax2(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, d));
  }
  const u32 code = exact::nvfp4_block_code(amax, g2);
  const float denom = __fmul_rn(exact::ue4m3_value(code), g2);
  const u32 q = exact::e2m1_code(__fdiv_rn(v, denom));
  const u32 q_next = __shfl_down_sync(0xFFFFFFFFu, q, 1);
  if (i < sub_live) {
    const u64 prow = static_cast<u64>(pool_row0 + r);
    u8* pool = mine + a.off_fc2_pool + prow * a.pitch_fc2_pool;
    if ((lane & 1) == 0) pool[(col * 32 + lane) / 2] = static_cast<u8>(q | (q_next << 4));
    if ((lane & 15) == 0) {
      (mine + a.off_fc2_sf + prow * a.pitch_fc2_sf)[col * 2 + lane / 16] = static_cast<u8>(code);
    }
  }
}

// FC2 epilogue, bf16 slots: y of the 64-row tile `col` for the sub-tile's tokens, staged as
// [token][64] bf16 in `ys`, then 16-byte peer stores into each route's combine slot. Sync is
// the CTA barrier of the THREADS participating threads.
template <int H, int TMAX, int NS, int THREADS, class Sync, class S>
MEGAMOE_DEVICE void fc2_store_bf16_slots(const Nvfp4MoeArgs& a, const S& s, u16* ys, int sub,
                                         int sub_live, int col, float factor) {
  const int tid = threadIdx.x;
  for (int u = tid; u < 64 * sub_live; u += THREADS) {
    const int i = u / 64, row = u - i * 64;
    const float y = __fmul_rn(s.tile[row * NS + i] * nvfp4::kWeightUnscale, factor);
    ys[i * 64 + row] = ptx::f32_to_bf16_rn(y);
  }
  Sync::sync();
  for (int u = tid; u < 8 * sub_live; u += THREADS) {
    const int i = u >> 3, chunk = u & 7;
    const int r = sub * NS + i;
    u8* slot =
        a.base[s.route_src[r]] + a.off_combine +
        ((static_cast<u64>(s.route_k[r]) * TMAX + s.route_tok[r]) * H + col * 64 + chunk * 8) * 2;
    ptx::store_global_16(slot, *reinterpret_cast<const ptx::u32x4*>(ys + i * 64 + chunk * 8));
  }
}

// The barrier between FC2 and the combine. One rank: its CTAs are every writer of its combine
// slots, so a rank-local grid barrier (.gpu scope) orders them. More ranks: the slots are written
// by every rank's CTAs (peer stores), so every CTA of every rank meets (.sys scope). `rank` and
// `status` may be values or callables (lazy_value), as the kernels keep them.
template <int R, class Sync, class RankT, class StatusT>
MEGAMOE_DEVICE void barrier_before_combine(const Nvfp4MoeArgs& a, u32* grid_counter,
                                           int cta_in_rank, int nctas, StatusT status, RankT rank) {
  if constexpr (R == 1) {
    rank_grid_barrier<Sync>(grid_counter, cta_in_rank, nctas, a.timeout_ns, status, rank,
                            kPhaseAfterFc2);
  } else {
    cross_rank_barrier<Sync>(
        [&](int p) { return reinterpret_cast<u32*>(a.base[p] + a.off_sync + a.sync_rank_barrier); },
        R, rank, cta_in_rank, nctas, a.timeout_ns, status);
  }
}

// Phase 3: out[t] = bf16(sum over the token's live routes, in k order, of its combine slots),
// f32; `rows` tokens of this rank over its CTAs. FP8C: slots hold e4m3 codes with an f32 scale
// per 128 values, dequantized (code value x scale, the values by the hardware's exact e4m3 -> f16
// conversion) before the sum. A thread asks for all K ids, then for every live route's slot, then
// sums: two round trips to L2. (Loading each slot inside its route's branch put every load behind
// the previous route's sum: K + 1 in a row.)
template <int H, int K, int EL, int R, int TMAX, int THREADS, int FP8C>
MEGAMOE_DEVICE void combine_rank_tokens(const Nvfp4MoeArgs& a, u8* mine, int rank, int rows,
                                        int cta_in_rank, int nctas) {
  // The last phase: the next kernel on the stream may launch its CTAs now (with PDL it waits
  // for this grid's completion before it reads anything).
  ptx::griddep_launch_dependents();
  constexpr int kChunks = H / 8;
  const int* idx = reinterpret_cast<const int*>(mine + a.off_topk_idx);
  const u8* slots = mine + a.off_combine;
  u16* out = a.out[rank];
  for (int u = cta_in_rank * THREADS + static_cast<int>(threadIdx.x); u < rows * kChunks;
       u += nctas * THREADS) {
    const int t = u / kChunks, c = u - t * kChunks;
    bool live[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int id = __ldg(idx + t * K + k);
      live[k] = id >= 0 && id < EL * R;
    }
    float sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if constexpr (FP8C) {
      u32 q[K][2];
      float scale[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        q[k][0] = q[k][1] = 0u;
        scale[k] = 0.0f;
        if (live[k]) {
          const u64 row = static_cast<u64>(k) * TMAX + t;
          ptx::load_8(slots + row * H + c * 8, q[k][0], q[k][1]);
          scale[k] = ptx::load_f32_cg(mine + a.off_combine_sf + row * a.pitch_combine_sf +
                                      (c * 8 / 128) * 4);
        }
      }
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (!live[k]) continue;
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
          float lo, hi;
          exact::e4m3x2_values(q[k][j >> 2] >> (8 * (j & 3)), lo, hi);
          sum[j] += __fmul_rn(lo, scale[k]);
          sum[j + 1] += __fmul_rn(hi, scale[k]);
        }
      }
    } else {
      ptx::u32x4 v[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        v[k] = ptx::u32x4{0u, 0u, 0u, 0u};
        if (live[k]) {
          const u64 row = static_cast<u64>(k) * TMAX + t;
          v[k] = ptx::load_16(slots + (row * H + c * 8) * 2);
        }
      }
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (!live[k]) continue;
        const u32 w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          sum[2 * j] += ptx::bf16_to_f32(w[j] & 0xFFFFu);
          sum[2 * j + 1] += ptx::bf16_to_f32(w[j] >> 16);
        }
      }
    }
    u32 ow[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      ow[j] = static_cast<u32>(ptx::f32_to_bf16_rn(sum[2 * j])) |
              (static_cast<u32>(ptx::f32_to_bf16_rn(sum[2 * j + 1])) << 16);
    }
    ptx::store_global_16(out + static_cast<u64>(t) * a.out_pitch[rank] + c * 8,
                         ptx::u32x4{ow[0], ow[1], ow[2], ow[3]});
  }
}

}  // namespace nvfp4_moe

template <int H, int I, int EL, int K, int R, int BM, int TMAX, int NS, int ACT>
__global__ void __launch_bounds__(kNvfp4Threads, 1)
    nvfp4_mega_moe_kernel(const __grid_constant__ Nvfp4MoeArgs a) {
  static_assert(H % 128 == 0 && I % 128 == 0, "H and I must be multiples of 128");
  static_assert(NS % 8 == 0 && BM % NS == 0, "token sub-tile must divide BLOCK_M");
  static_assert(R >= 1 && R <= kNvfp4MaxRanks, "1..8 ranks");
  constexpr int KMAX = H > I ? H : I;
  constexpr int NT = NS / 8;
  constexpr int CT = I / 32;  // FC1 column tiles (32 gate + 32 up rows each)
  constexpr int HT = H / 64;  // FC2 row tiles
  using S = nvfp4_moe::Smem<EL, BM, NS, KMAX>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  S& s = nvfp4_moe::dynamic_smem_as<S>(smem_raw);

  const int tid = threadIdx.x, warp = tid >> 5;
  const int cta_in_rank = static_cast<int>(blockIdx.x) % a.ctas_per_rank;
  const int rank = a.first_rank + static_cast<int>(blockIdx.x) / a.ctas_per_rank;
  const int nctas = a.ctas_per_rank;
  u8* const mine = a.base[rank];
  u8* const sync = mine + a.off_sync;
  u32* const grid_counter = reinterpret_cast<u32*>(sync + a.sync_grid);
  u32* const status = reinterpret_cast<u32*>(sync + a.sync_status);

  // Launched with programmatic dependent launch: the previous kernel on the stream (the
  // pre-dispatch, or the previous call) may still be running. No global memory is touched
  // before it has completed and its writes are visible.
  ptx::griddep_wait();

  // Ranks in other processes (NCCL provider): wait until every rank's pre-dispatch of this call
  // is complete -- which also means every rank finished the previous call, so its inputs and
  // combine slots may be overwritten. One launch for all ranks (local provider) needs no wait.
  // Its own counter (the second half of the "rank_barrier" field): with one counter per barrier
  // a rank can add to a counter's next generation only after all ranks finished its current one.
  if (R > 1 && a.num_driven < R) {
    cross_rank_barrier(
        [&](int p) {
          return reinterpret_cast<u32*>(a.base[p] + a.off_sync + a.sync_rank_barrier + 32);
        },
        R, rank, cta_in_rank, nctas, a.timeout_ns, status, kPhaseEntry);
  }

  // ---- phase 0: route counts and the padded pool layout (every CTA, redundantly) ----------
  const int first_expert = rank * EL;
  const int total_tiles =
      nvfp4_moe::plan_tiles<EL, K, R, BM, TMAX, kNvfp4Threads, kNvfp4Threads>(a, s, first_expert);
  const int* const src_tokens = s.src_tokens;

  const u64 topk_pitch = static_cast<u64>(K) * 4;
  float acc[NT][4];

  // ---- phase 1: FC1 + activation + re-quantization ----------------------------------------
  {
    const int items = total_tiles * CT;
    const int lo = static_cast<int>((static_cast<long long>(items) * cta_in_rank) / nctas);
    const int hi = static_cast<int>((static_cast<long long>(items) * (cta_in_rank + 1)) / nctas);
    int cur_tile = -1, e = 0, tile = 0, live = 0;
    for (int item = lo; item < hi; ++item) {
      const int tileg = item / CT;
      const int ct = item - tileg * CT;
      if (tileg != cur_tile) {
        cur_tile = tileg;
        e = nvfp4_pipe::schedule_expert_of_tile<EL>(s.tile_prefix, tileg);
        tile = tileg - s.tile_prefix[e];
        live = min(BM, s.count[e] - tile * BM);
        __syncthreads();  // the previous tile's routes are no longer read
        if (warp == 0) nvfp4_moe::gather_tile_routes<K, R, BM>(a, s, first_expert + e, tile);
        __syncthreads();
        if (tid < live) {
          const int sr = s.route_src[tid], tok = s.route_tok[tid], k = s.route_k[tid];
          const u8* sb = a.base[sr];
          s.route_w[tid] =
              __ldg(reinterpret_cast<const float*>(sb + a.off_topk_w + tok * topk_pitch) + k);
          s.route_alpha[tid] =
              __fmul_rn(__ldg(reinterpret_cast<const float*>(sb + a.off_x_global) + tok),
                        __ldg(a.alpha1[rank] + e));
        }
        __syncthreads();
      }
      const int pool_row0 = (s.tile_prefix[e] + tile) * BM;
      if (ct == 0 && tid < live) {
        int* rl = reinterpret_cast<int*>(mine + a.off_route) + (pool_row0 + tid) * 3;
        rl[0] = s.route_src[tid];
        rl[1] = s.route_tok[tid];
        rl[2] = s.route_k[tid];
      }
      const float g2 = __ldg(a.fc2_scale[rank] + e);
      const int rg = warp & 3;
      const u64 mat = static_cast<u64>(e) * (2ull * I * H / 2);
      const u64 blk0 = static_cast<u64>(ct * 4 + rg) * (H / 128);
      const u8* wq = a.w13[rank] + mat + blk0 * 1024;
      const u8* wsf = a.w13_sf[rank] + mat / 8 + blk0 * 128;
      for (int sub = 0; sub * NS < live; ++sub) {
        const int sub_live = min(NS, live - sub * NS);
        __syncthreads();  // s.b and s.tile are free
        nvfp4_moe::load_token_tile<H, KMAX, false>(
            s.b, sub_live, [&](int i) { return nvfp4_moe::fc1_token_row(a, s, sub * NS + i); },
            [&](int i) { return nvfp4_moe::fc1_token_sf_row(a, s, sub * NS + i); });
        __syncthreads();
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[nt][c] = 0.0f;
        nvfp4_moe::warp_gemm<H, KMAX, NT>(wq, wsf, s.b, (sub_live + 7) / 8, acc);
        nvfp4_moe::reduce_tile<NT>(s, acc);
        // Activation and NVFP4 re-quantization: warp -> token, lane -> column (two blocks of
        // 16 columns per warp, one per half-warp).
#pragma unroll
        for (int it = 0; it < NT; ++it) {
          const int i = it * 8 + warp;
          nvfp4_moe::fc1_requantize_token<ACT>(
              a, s, mine, i, sub * NS + i, sub_live, ct, pool_row0, g2,
              [&](int row, int tok) { return s.tile[row * NS + tok]; });
        }
      }
    }
  }

  // Rank-local: fc2_pool is written and read by this rank's CTAs on this GPU only.
  rank_grid_barrier(grid_counter, cta_in_rank, nctas, a.timeout_ns, status, rank, kPhaseAfterFc1);

  // ---- phase 2: FC2 into the source ranks' combine slots -----------------------------------
  {
    const int items = total_tiles * HT;
    const int lo = static_cast<int>((static_cast<long long>(items) * cta_in_rank) / nctas);
    const int hi = static_cast<int>((static_cast<long long>(items) * (cta_in_rank + 1)) / nctas);
    int cur_tile = -1, e = 0, tile = 0, live = 0;
    for (int item = lo; item < hi; ++item) {
      const int tileg = item / HT;
      const int ht = item - tileg * HT;
      if (tileg != cur_tile) {
        cur_tile = tileg;
        e = nvfp4_pipe::schedule_expert_of_tile<EL>(s.tile_prefix, tileg);
        tile = tileg - s.tile_prefix[e];
        live = min(BM, s.count[e] - tile * BM);
        __syncthreads();
        if (tid < live) {
          const volatile int* rl = reinterpret_cast<const volatile int*>(mine + a.off_route) +
                                   ((s.tile_prefix[e] + tile) * BM + tid) * 3;
          s.route_src[tid] = rl[0];
          s.route_tok[tid] = rl[1];
          s.route_k[tid] = rl[2];
        }
        __syncthreads();
      }
      const int pool_row0 = (s.tile_prefix[e] + tile) * BM;
      const float factor = __fmul_rn(__ldg(a.fc2_scale[rank] + e), __ldg(a.alpha2[rank] + e));
      const int rg = warp & 3;
      const u64 mat = static_cast<u64>(e) * (static_cast<u64>(H) * I / 2);
      const u64 blk0 = static_cast<u64>(ht * 4 + rg) * (I / 128);
      const u8* wq = a.w2[rank] + mat + blk0 * 1024;
      const u8* wsf = a.w2_sf[rank] + mat / 8 + blk0 * 128;
      for (int sub = 0; sub * NS < live; ++sub) {
        const int sub_live = min(NS, live - sub * NS);
        __syncthreads();
        nvfp4_moe::load_token_tile<I, KMAX, true>(
            s.b, sub_live,
            [&](int i) {
              return mine + a.off_fc2_pool +
                     static_cast<u64>(pool_row0 + sub * NS + i) * a.pitch_fc2_pool;
            },
            [&](int i) {
              return mine + a.off_fc2_sf +
                     static_cast<u64>(pool_row0 + sub * NS + i) * a.pitch_fc2_sf;
            });
        __syncthreads();
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[nt][c] = 0.0f;
        nvfp4_moe::warp_gemm<I, KMAX, NT>(wq, wsf, s.b, (sub_live + 7) / 8, acc);
        nvfp4_moe::reduce_tile<NT>(s, acc);
        // y -> bf16, staged as [token][64] in s.b (free now), then 16-byte peer stores.
        nvfp4_moe::fc2_store_bf16_slots<H, TMAX, NS, kNvfp4Threads, CtaSync>(a, s, s.b, sub,
                                                                             sub_live, ht, factor);
      }
    }
  }

  nvfp4_moe::barrier_before_combine<R, CtaSync>(a, grid_counter, cta_in_rank, nctas, status, rank);

  // ---- phase 3: combine the rank's own tokens ----------------------------------------------
  nvfp4_moe::combine_rank_tokens<H, K, EL, R, TMAX, kNvfp4Threads, 0>(
      a, mine, rank, min(src_tokens[rank], a.out_rows[rank]), cta_in_rank, nctas);
}

}  // namespace megamoe::device
