#pragma once
// Pipelined variant of the SM90 NVFP4 MegaMoE kernel (docs/nvfp4_kernel.md, "Versions"): the same
// phases and numerics as sm90_nvfp4_mega_moe.cuh, but the weights stream without a break across
// work items, across token sub-tiles and from the last FC1 item into the first FC2 item (so the
// FC2 weights are in flight while the rank-local barrier waits), and the token tile in shared
// memory is decoded once per (tile, sub-tile) and reused by every column item of that tile the CTA
// owns. Work units are ordered (tile, sub-tile, column). Two ways to stream the weights:
//   STAGES = 0  every warp keeps a ring of RING blocks in registers (ld.global.nc);
//   STAGES > 0  one producer warp fills a ring of STAGES shared-memory stages with bulk copies
//               (one stage = SB blocks of 128 k for every consumer warp), the consumer warps wait
//               on each stage's mbarrier and release it; no weight bytes in registers.
#include "megamoe/impls/sm90_nvfp4_mega_moe.cuh"
#include "megamoe/ptx/bulk_copy.cuh"
#include "megamoe/scheduler/nvfp4_schedule.cuh"
#include "megamoe/scheduler/tile_rows_choice.cuh"

namespace megamoe::device {
namespace nvfp4_pipe {

// The ring depth (blocks of 128 k in flight per warp) is the kernel's RING parameter: deeper
// rings hide more memory latency for more registers. KW warps split K (KW = 2: 8 warps, rings of
// 4-8; KW = 4: 16 warps under a 128-register cap, rings of 2-4): more warps per scheduler hide
// the fixed-latency chains of the decode, which ncu named the limiter (bench/NOTES.md, v4).

// One warp's view of one unit's weights: blocks kh, kh + KW, ... of its row group.
struct Stream {
  const u8* q;
  const u8* sf;
  int nbw;    // blocks of this warp
  int w;      // ring slots the unit occupies: nbw rounded up to RING, at least RING
  int tileg;  // the unit's global tile and its expert (the binary search runs once per tile)
  int expert;
};

template <int RING>
struct Ring {
  ptx::u32x4 q0[RING], q1[RING], sc[RING];
};

template <int KW>
MEGAMOE_DEVICE void load_slot(ptx::u32x4& q0, ptx::u32x4& q1, ptx::u32x4& sc, const Stream& s,
                              int j, int kh, int lane) {
  const int blk = kh + KW * j;
  const u8* q = s.q + blk * 1024 + lane * 16;
  q0 = ptx::load_stream_16(q);
  q1 = ptx::load_stream_16(q + 512);
  sc = ptx::load_stream_16(s.sf + blk * 128 + (lane >> 2) * 16);
}

template <int RING, int KW>
MEGAMOE_DEVICE void prime(Ring<RING>& ring, const Stream& s, int kh, int lane) {
#pragma unroll
  for (int p = 0; p < RING; ++p) {
    if (p < s.nbw) load_slot<KW>(ring.q0[p], ring.q1[p], ring.sc[p], s, p, kh, lane);
  }
}

// Decodes rows [0, NS) of the token tile into s.b in the paired layout
// (paired_word_index, scheduler/nvfp4_schedule.cuh; conflict-free for consume: a quarter warp
// reads rows g, g + 1, 16 B apart mod 128, at t * 32 + h * 16 bytes); rows past `live` are zero,
// so the MMAs of every 8-row tile may run whether or not it holds a live token (no warp-divergent
// test per MMA). All of a thread's loads are issued before its first decode.
template <int KD, int KMAX, int NS, int THREADS, bool kCoherent, class RowPtr, class SfPtr>
MEGAMOE_DEVICE void load_token_tile_paired(u16* b, int live, RowPtr row_ptr, SfPtr sf_ptr) {
  constexpr int kBlocks = KD / 16;
  constexpr int kBatch = 4;
  constexpr int units = NS * kBlocks;
  for (int u0 = threadIdx.x; u0 < units; u0 += kBatch * THREADS) {
    u32 lo[kBatch], hi[kBatch], sc[kBatch];
#pragma unroll
    for (int m = 0; m < kBatch; ++m) {
      const int u = u0 + m * THREADS;
      const int i = u / kBlocks;
      const int blk = u - i * kBlocks;
      lo[m] = 0;
      hi[m] = 0;
      sc[m] = 0;
      if (u < units && i < live) {
        const u8* q = row_ptr(i) + blk * 8;
        if constexpr (kCoherent) {
          ptx::load_8(q, lo[m], hi[m]);
          sc[m] = __ldcg(sf_ptr(i) + blk);
        } else {
          ptx::load_nc_8(q, lo[m], hi[m]);
          sc[m] = __ldg(sf_ptr(i) + blk);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kBatch; ++m) {
      const int u = u0 + m * THREADS;
      if (u < units) {
        const int i = u / kBlocks;
        const int blk = u - i * kBlocks;
        u32 v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (i < live) nvfp4::decode_activation_block(lo[m], hi[m], sc[m], v);
        u32* row = reinterpret_cast<u32*>(b + i * (KMAX + 8));
#pragma unroll
        for (int p = 0; p < 8; ++p) row[paired_word_index(blk, p)] = v[p];
      }
    }
  }
}

// This lane's view of the token tile at 128-k block `blk` (its row g and quad t): block_mma
// reads from here, and the next block of the warp is `KW * 128` elements further.
template <int KMAX>
MEGAMOE_DEVICE const u16* lane_token_block(const u16* b, int blk) {
  const int lane = threadIdx.x & 31;
  return b + (lane >> 2) * (KMAX + 8) + paired_load_index(blk, 0, lane & 3);
}

// acc[nt] += one block of the warp's weights (16 rows x 128 k: `words` = its 8 nibble words,
// `scw` = its 16 scale bytes, as this lane holds them) x the token tile's rows of that block
// (`bl` = lane_token_block; all NT 8-row tiles: rows past the live tokens are zero).
template <int KMAX, int NT>
MEGAMOE_DEVICE void block_mma(const u32 (&words)[8], const u32 (&scw)[4], const u16* bl,
                              float (&acc)[NT][4]) {
#pragma unroll
  for (int q2 = 0; q2 < 4; ++q2) {
    // Steps 2 q2 and 2 q2 + 1: one 16-byte B load per token tile.
    ptx::u32x4 bv[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      bv[nt] = *reinterpret_cast<const ptx::u32x4*>(bl + nt * 8 * (KMAX + 8) +
                                                    paired_load_index(0, q2, 0));
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int q = 2 * q2 + h;
      const u32 sw = scw[q >> 1];
      const nvfp4::HalfFragment f =
          nvfp4::decode_weight_word(words[q], nvfp4::scale_pair(sw, (q & 1) != 0));
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const u32 b0 = h == 0 ? bv[nt].x : bv[nt].z;
        const u32 b1 = h == 0 ? bv[nt].y : bv[nt].w;
        ptx::mma_m16n8k16_f16(acc[nt], f.a0, f.a1, f.a2, f.a3, b0, b1);
      }
    }
  }
}

// Register ring (STAGES = 0): acc[nt] += the unit's weights x the token tile; refills every freed
// ring slot with the next block of `cur`, or past its end with the first blocks of `nxt`.
template <int KMAX, int NT, int RING, int KW>
MEGAMOE_DEVICE void consume(Ring<RING>& ring, const Stream& cur, const Stream& nxt, const u16* b,
                            float (&acc)[NT][4]) {
  const int lane = threadIdx.x & 31;
  const int kh = (threadIdx.x >> 5) >> 2;
  const u16* bl = lane_token_block<KMAX>(b, kh);
  for (int j0 = 0; j0 < cur.w; j0 += RING) {
#pragma unroll
    for (int p = 0; p < RING; ++p) {
      const int j = j0 + p;
      const u32 words[8] = {ring.q0[p].x, ring.q0[p].y, ring.q0[p].z, ring.q0[p].w,
                            ring.q1[p].x, ring.q1[p].y, ring.q1[p].z, ring.q1[p].w};
      const u32 scw[4] = {ring.sc[p].x, ring.sc[p].y, ring.sc[p].z, ring.sc[p].w};
      if (j < cur.nbw) block_mma<KMAX, NT>(words, scw, bl + KW * 128 * j, acc);
      // Refill the slot once its words are decoded (a refill before the decode would make the
      // compiler copy the 12 live words aside: 24 moves per block).
      const int jn = j + RING;
      if (jn < cur.w) {
        if (jn < cur.nbw) load_slot<KW>(ring.q0[p], ring.q1[p], ring.sc[p], cur, jn, kh, lane);
      } else if (jn - cur.w < nxt.nbw) {
        load_slot<KW>(ring.q0[p], ring.q1[p], ring.sc[p], nxt, jn - cur.w, kh, lane);
      }
    }
  }
}

// Shared-memory stages (STAGES > 0), SB blocks per consumer warp each. Stage layout, per row
// group rg: the nibbles of its SB * KW blocks of this step (SB * KW x 1024 B, contiguous in the
// weights too), then their scales (SB * KW x 128 B). Block d * KW + kh of the step is warp kh's
// d-th. Two (four) blocks per stage halve (quarter) the waits, releases and ring arithmetic per
// block.
template <int KW, int SB>
inline constexpr int kStageBytes = KW * 1152 * 4 * SB;

// Where the consumer warps are in the stage ring: the next stage they read and the parity of its
// "full" phase they wait for.
struct StagePosition {
  int stage;
  u32 parity;
};

// Staged: acc[nt] += the unit's weights x the token tile, one stage per SB blocks of this warp
// (nbw, a multiple of SB). Barrier full[stage]: the producer's expect_tx arrival + the stage's
// bytes complete a phase; empty[stage]: every consumer thread arrives once it has read the stage.
template <int KMAX, int NT, int KW, int STAGES, int SB>
MEGAMOE_DEVICE void consume_staged(const u8* ring, u64* full, u64* empty, StagePosition& pos,
                                   int nbw, const u16* b, float (&acc)[NT][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rg = warp & 3, kh = warp >> 2;
  const int q_off = rg * SB * KW * 1152 + kh * 1024 + lane * 16;
  const int s_off = rg * SB * KW * 1152 + SB * KW * 1024 + kh * 128 + (lane >> 2) * 16;
  const u16* bl = lane_token_block<KMAX>(b, kh);
  for (int j = 0; j < nbw; j += SB) {
    ptx::mbarrier_wait_parity(full + pos.stage, pos.parity);
    const u8* st = ring + pos.stage * kStageBytes<KW, SB>;
#pragma unroll
    for (int d = 0; d < SB; ++d, bl += KW * 128) {
      const ptx::u32x4 q0 = *reinterpret_cast<const ptx::u32x4*>(st + q_off + d * KW * 1024);
      const ptx::u32x4 q1 = *reinterpret_cast<const ptx::u32x4*>(st + q_off + d * KW * 1024 + 512);
      const ptx::u32x4 sc = *reinterpret_cast<const ptx::u32x4*>(st + s_off + d * KW * 128);
      const u32 words[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
      const u32 scw[4] = {sc.x, sc.y, sc.z, sc.w};
      // After the stage's last read, every lane releases its own reads (the arrival has
      // release semantics): no warp sync.
      if (d == SB - 1) ptx::mbarrier_arrive(empty + pos.stage);
      block_mma<KMAX, NT>(words, scw, bl, acc);
    }
    if (++pos.stage == STAGES) {
      pos.stage = 0;
      pos.parity ^= 1u;
    }
  }
}

// Floats of one unit's split-K partial sums: every K slice's 64 x NS result tile,
// [kh][row][token ^ swizzle(row)] (f32).
template <int NT, int KW>
inline constexpr int kPartialFloats = KW * 64 * NT * 8;

// Units the producer has published ahead of the consumers (STAGES > 0): a ring of slots, each
// with an mbarrier the producer arrives on once the slot holds the unit. The producer is at most
// STAGES stages -- so at most STAGES units, each at least one stage -- ahead of the consumers'
// releases, and a consumer reads a unit's slot before it releases any stage of that unit, so
// more slots than stages are never overwritten unread.
inline constexpr int kUnitSlots = 16;

// Consumers' side of the unit ring: the next unit's sequence number.
struct UnitPosition {
  int seq;
};

// A unit as the producer publishes it: with its tile's expert and live routes, which the consumer
// warps would otherwise search tile_prefix for (binary searches of dependent shared loads: ~2 % of
// the wide kernel's stall samples at h6144 T = 512, run 77). The register ring (no producer)
// leaves e = -1: its consumers search.
struct PublishedUnit : Unit {
  int e, live;
  // Live routes of this unit's token sub-tile of NS (1..NS).
  template <int NS>
  MEGAMOE_DEVICE int sub_live() const {
    return min(NS, live - sub * NS);
  }
};
inline constexpr int kUnitFieldBits = 10;  // sub and col share a slot word with the phase

// Producer's side, lane 0: the unit into slot seq % kUnitSlots, then the slot's arrival (a
// release at CTA scope: the consumers' wait acquires the slot's contents).
MEGAMOE_DEVICE void publish_unit(ptx::u32x4* slots, u64* ready, int seq, const Unit& u, int e,
                                 int live) {
  const int q = seq % kUnitSlots;
  slots[q] = ptx::u32x4{static_cast<u32>(u.tileg), static_cast<u32>(e), static_cast<u32>(live),
                        static_cast<u32>(u.sub) | static_cast<u32>(u.col) << kUnitFieldBits |
                            static_cast<u32>(u.phase) << (2 * kUnitFieldBits)};
  ptx::mbarrier_arrive(ready + q);
}

// Every consumer thread: the next unit (waits for its slot's phase seq / kUnitSlots).
MEGAMOE_DEVICE PublishedUnit take_unit(const ptx::u32x4* slots, u64* ready, UnitPosition& pos) {
  const int q = pos.seq % kUnitSlots;
  ptx::mbarrier_wait_parity(ready + q, static_cast<u32>(pos.seq / kUnitSlots) & 1u);
  const ptx::u32x4 v = slots[q];
  ++pos.seq;
  constexpr u32 kMask = (1u << kUnitFieldBits) - 1;
  return PublishedUnit{{static_cast<int>(v.x), static_cast<int>(v.w & kMask),
                        static_cast<int>((v.w >> kUnitFieldBits) & kMask),
                        static_cast<int>(v.w >> (2 * kUnitFieldBits))},
                       static_cast<int>(v.y),
                       static_cast<int>(v.z)};
}

// Shared memory of one CTA (dynamic; src/runtime/register_nvfp4_mega_moe.cpp mirrors its size).
// ring / full / empty: the weight stages; unit_ready / unit_q: the published units; b: the token
// tile, f16 [NS][KMAX + 8] in the paired layout; red: RB buffers of a unit's split-K partials
// (units alternate between two, or reuse one behind an extra barrier).
template <int EL, int BM, int NS, int KMAX, int KW, int STAGES, int SB, int RB, int FP8C>
struct Smem {
  // Weight stages and their barriers (STAGES > 0; a token 16 B otherwise).
  u8 ring[STAGES > 0 ? STAGES* kStageBytes<KW, SB> : 16];
  u64 full[STAGES > 0 ? STAGES : 1], empty[STAGES > 0 ? STAGES : 1];
  u64 unit_ready[STAGES > 0 ? kUnitSlots : 1];
  ptx::u32x4 unit_q[STAGES > 0 ? kUnitSlots : 1];
  u16 b[NS * (KMAX + 8)];
  float red[RB * kPartialFloats<NS / 8, KW>];
  int count[EL];
  int tile_prefix[EL + 1];
  int src_tokens[8];  // live tokens of each source rank
  int route_src[BM], route_tok[BM], route_k[BM];
  float route_w[BM], route_alpha[BM];
  float ypair[FP8C ? 128 * NS : 1];  // fp8_combine: y of a 128-row block (two column tiles)
};

// Every consumer warp leaves its accumulators in its K slice's tile of `red` (one unit's
// buffer); the caller's CTA barrier then makes them readable by unit_sum. No warp waits for a
// partial sum of another: the epilogue's readers add the KW partials themselves.
template <int NT>
MEGAMOE_DEVICE void store_partials(float* red, const float (&acc)[NT][4]) {
  constexpr int NS = NT * 8;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = threadIdx.x & 31;
  const int rg = warp & 3, kh = warp >> 2, g = lane >> 2, t = lane & 3;
  float* tile = red + kh * 64 * NS;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      // m16n8 accumulator element c: row g (+ 8 for c >= 2), token 2 t (+ 1 for odd c).
      const int row = rg * 16 + g + (c >> 1) * 8, i = nt * 8 + 2 * t + (c & 1);
      tile[row * NS + partial_column<NS>(row, i)] = acc[nt][c];
    }
  }
}

// The unit's raw result at tile row `row` (0..63) and token `i` of the sub-tile: the KW partials
// summed in kh order (the order of the earlier kh = 0 pass, so the sums are unchanged bit for
// bit).
template <int NT, int KW>
MEGAMOE_DEVICE float unit_sum(const float* red, int row, int i) {
  constexpr int NS = NT * 8;
  const float* p = red + row * NS + partial_column<NS>(row, i);
  float v = p[0];
#pragma unroll
  for (int kh = 1; kh < KW; ++kh) v += p[kh * 64 * NS];
  return v;
}

// FC2 epilogue, bf16 slots: warp w takes token w / 2 and rows (w % 2) * 32 + lane of the 64-row
// tile `col`; eight lanes gather their bf16 values by shuffles and the first stores them
// (16 bytes) into the route's combine slot (peer writes). `y(row, i)`: the raw result.
template <int H, int TMAX, int NS, int WARPS, class S, class Y>
MEGAMOE_DEVICE void fc2_store_bf16_rows(const Nvfp4MoeArgs& a, const S& s, int sub, int sub_live,
                                        int col, float factor, Y y) {
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = threadIdx.x & 31;
  for (int task = warp; task < 2 * sub_live; task += WARPS) {  // warp-uniform: shuffles are safe
    const int i = task >> 1, row = (task & 1) * 32 + lane;
    const u32 v = ptx::f32_to_bf16_rn(__fmul_rn(y(row, i) * nvfp4::kWeightUnscale, factor));
    const u32 pair = v | (__shfl_down_sync(0xFFFFFFFFu, v, 1) << 16);
    const u32 p2 = __shfl_down_sync(0xFFFFFFFFu, pair, 2);
    const u32 p4 = __shfl_down_sync(0xFFFFFFFFu, pair, 4);
    const u32 p6 = __shfl_down_sync(0xFFFFFFFFu, pair, 6);
    if ((lane & 7) == 0) {
      const int r = sub * NS + i;
      u8* slot =
          a.base[s.route_src[r]] + a.off_combine +
          ((static_cast<u64>(s.route_k[r]) * TMAX + s.route_tok[r]) * H + col * 64 + row) * 2;
      ptx::store_global_16(slot, ptx::u32x4{pair, p2, p4, p6});
    }
  }
}

}  // namespace nvfp4_pipe

// Warp roles: warps 0 .. 4 KW - 1 are consumers (row group = warp % 4, K slice kh = warp / 4:
// blocks kh, kh + KW, ...); with STAGES > 0, warp 4 KW is the producer (its lanes 0..3 issue
// the bulk copies; it leaves after phase 0 and takes no part in the consumers' barriers).
template <int H, int I, int EL, int K, int R, int BM, int TMAX, int NS, int ACT, int RING = 4,
          int KW = 2, int STAGES = 0, int SB = 1, int RB = 1, int FP8C = 0>
__global__ void __launch_bounds__(128 * KW + (STAGES > 0 ? 32 : 0), 1)
    nvfp4_mega_moe_pipelined_kernel(const __grid_constant__ Nvfp4MoeArgs a) {
  static_assert(H % 128 == 0 && I % 128 == 0, "H and I must be multiples of 128");
  static_assert(NS % 8 == 0 && BM % NS == 0, "token sub-tile must divide BLOCK_M");
  static_assert(R >= 1 && R <= kNvfp4MaxRanks, "1..8 ranks");
  static_assert(KW == 2 || KW == 4, "K split over 2 or 4 warps per row group");
  static_assert(RB == 1 || RB == 2, "one or two split-K exchange buffers");
  static_assert(RING >= 2 && RING <= 8 && (KW == 2 || RING <= 4),
                "ring depth 2..8 (2..4 under the 16-warp register cap)");
  static_assert(STAGES == 0 || (STAGES >= 2 && STAGES <= 8), "0 (register ring) or 2..8 stages");
  static_assert(STAGES < nvfp4_pipe::kUnitSlots, "more unit slots than stages (see kUnitSlots)");
  static_assert(FP8C == 0 || FP8C == 1, "fp8_combine is a flag");
  static_assert(SB == 1 || SB == 2 || SB == 4, "1, 2 or 4 blocks per consumer warp and stage");
  static_assert(BM / NS < (1 << nvfp4_pipe::kUnitFieldBits) &&
                    I / 32 < (1 << nvfp4_pipe::kUnitFieldBits) &&
                    H / 64 < (1 << nvfp4_pipe::kUnitFieldBits),
                "sub-tile and column indices fit their fields of a published unit");
  static_assert(STAGES == 0 || ((H / 128) % (KW * SB) == 0 && (I / 128) % (KW * SB) == 0),
                "stages hold SB blocks per consumer warp: H / 128 and I / 128 multiples of KW SB");
  using namespace nvfp4_pipe;
  constexpr int kThreads = 128 * KW;  // consumer threads
  constexpr int kWarps = 4 * KW;      // consumer warps
  constexpr bool kStaged = STAGES > 0;
  // The consumers' CTA barrier: all threads, or named barrier 1 over the consumers once the
  // producer warp has gone its own way.
  using Sync = CtaBarrier<kStaged ? kThreads : 0>;
  // Named barrier 2, with STAGES > 0: every consumer thread arrives once its CTA's first token
  // tile is in shared memory (or at the end of FC1 if it has none); the producer waits on it
  // after its first stage. Were all stages requested at once, every CTA's would be ~20 MB of
  // weights queued ahead of the token-row loads, which then took ~4 us (bench/NOTES.md, v11).
  using FirstTileReady = SignalBarrier<2, kThreads + 32>;
  constexpr int KMAX = H > I ? H : I;
  constexpr int NT = NS / 8;
  constexpr int CT = I / 32;  // FC1 column tiles (32 gate + 32 up rows each)
  constexpr int HT = H / 64;  // FC2 row tiles
  using S = nvfp4_pipe::Smem<EL, BM, NS, KMAX, KW, STAGES, SB, RB, FP8C>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  S& s = nvfp4_moe::dynamic_smem_as<S>(smem_raw);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int rg = warp & 3, kh = warp >> 2;
  const int cta_in_rank = static_cast<int>(blockIdx.x) % a.ctas_per_rank;
  const int rank = a.first_rank + static_cast<int>(blockIdx.x) / a.ctas_per_rank;
  const int nctas = a.ctas_per_rank;
  u8* const mine = a.base[rank];
  u8* const sync = mine + a.off_sync;
  u32* const grid_counter = reinterpret_cast<u32*>(sync + a.sync_grid);
  u32* const status = reinterpret_cast<u32*>(sync + a.sync_status);
  const int first_expert = rank * EL;

  if (kStaged && tid == 0) {
    // full[s]: 1 arrival (the producer's expect_tx) + the stage's bytes; empty[s]: one arrival
    // per consumer thread (each releases its own reads). Visible to the copy engine and every
    // warp after phase 0's barriers.
    for (int p = 0; p < (kStaged ? STAGES : 0); ++p) {
      ptx::mbarrier_init(s.full + p, 1);
      ptx::mbarrier_init(s.empty + p, kThreads);
    }
    // unit_ready[q]: one arrival (the producer's lane 0, once slot q holds its next unit).
    for (int q = 0; q < (kStaged ? kUnitSlots : 0); ++q) ptx::mbarrier_init(s.unit_ready + q, 1);
    ptx::fence_mbarrier_init();
  }

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
  const int total_tiles =
      nvfp4_moe::plan_tiles<EL, K, R, BM, TMAX, kThreads, kThreads + (kStaged ? 32 : 0)>(
          a, s, first_expert);

  // Tile choice on the device: the wide kernel launched after this one takes the call instead
  // when the routing favours its tile (the verdict is the same in every CTA of every rank); the
  // routes are counted in the token tile's memory, free until the first tile.
  if (a.tile_choice_alt > BM &&
      !nvfp4_moe::table_kernel_keeps_call<EL, K, R, BM, kThreads, sizeof(s.b)>(
          a, s, s.b, [&] { return cta_in_rank == 0; }, [&] { return rank; })) {
    return;
  }

  Schedule<EL, BM, NS, CT, HT> sched;
  sched.tile_prefix = s.tile_prefix;
  sched.count = s.count;
  {
    const int items[2] = {total_tiles * CT, total_tiles * HT};
#pragma unroll
    for (int ph = 0; ph < 2; ++ph) {
      int lo = equal_share_start(items[ph], cta_in_rank, nctas);
      int hi = equal_share_start(items[ph], cta_in_rank + 1, nctas);
      if (FP8C && ph == 1) {
        // FP8 combine blocks are 128 rows = two FC2 column tiles: every CTA owns whole pairs
        // (H / 64 is even, so the pair boundaries are even item indices).
        lo &= ~1;
        hi = cta_in_rank + 1 == nctas ? items[ph] : (hi & ~1);
      }
      sched.lo[ph] = lo;
      sched.hi[ph] = hi;
    }
  }
  if constexpr (kStaged) {
    if (warp == kWarps) {
      // Producer: the warp walks the CTA's units, publishes each into the unit ring (the
      // consumers read them there instead of walking the schedule themselves) and fills one
      // stage per step j with blocks [KW SB j, KW SB (j + 1)) of the unit's four row groups, once
      // every consumer thread has released the stage's previous contents. Lane r < 4 copies row
      // group r (two bulk copies: nibbles and scales are contiguous per row group); lane 0
      // publishes.
      int stage = 0;
      u32 round = 0;
      int prev_tile = -1, e = 0, seq = 0;
      bool first_tile_ready = false;
      const u64 policy = ptx::l2_evict_first_policy();
      auto emit = [&](const Unit& u) {
        if (u.tileg != prev_tile) {
          e = schedule_expert_of_tile_warp<EL>(s.tile_prefix, u.tileg);
          prev_tile = u.tileg;
        }
        if (lane == 0) {
          publish_unit(s.unit_q, s.unit_ready, seq, u, e,
                       tile_live<BM>(s.count, s.tile_prefix, e, u.tileg));
        }
        ++seq;
        const int nb = u.phase == 0 ? H / 128 : I / 128;
        const u64 mat = u.phase == 0 ? static_cast<u64>(e) * (2ull * I * H / 2)
                                     : static_cast<u64>(e) * (static_cast<u64>(H) * I / 2);
        const u64 blk0 = (static_cast<u64>(u.col) * 4 + lane) * nb;  // this lane's row group
        const u8* q = (u.phase == 0 ? a.w13[rank] : a.w2[rank]) + mat + blk0 * 1024;
        const u8* sf = (u.phase == 0 ? a.w13_sf[rank] : a.w2_sf[rank]) + mat / 8 + blk0 * 128;
        constexpr int kStep = KW * SB;  // blocks per row group and stage
        for (int j = 0; j < nb / kStep; ++j) {
          if (round > 0) ptx::mbarrier_wait_parity(s.empty + stage, (round - 1) & 1u);
          u8* dst = s.ring + stage * kStageBytes<KW, SB> + lane * kStep * 1152;
          if (lane == 0) ptx::mbarrier_arrive_expect_tx(s.full + stage, kStageBytes<KW, SB>);
          __syncwarp();  // the stage's byte count is armed before any of its copies lands
          if (lane < 4) {
            const u64 blk = static_cast<u64>(j) * kStep;
            ptx::bulk_load(dst, q + blk * 1024, kStep * 1024, s.full + stage, policy);
            ptx::bulk_load(dst + kStep * 1024, sf + blk * 128, kStep * 128, s.full + stage, policy);
          }
          if (++stage == STAGES) {
            stage = 0;
            ++round;
          }
          if (!first_tile_ready) {
            FirstTileReady::wait();
            first_tile_ready = true;
          }
        }
      };
      for (Unit u = sched.first(0); u.phase < 2; u = sched.next(u)) emit(u);
      if (lane == 0) publish_unit(s.unit_q, s.unit_ready, seq, Unit{0, 0, 0, 2}, 0, 0);
      if (!first_tile_ready) FirstTileReady::wait();
      return;
    }
  }

  // The warp's weight stream of a unit; `prev` is the stream of the unit before it.
  auto stream_of = [&](const PublishedUnit& u, const Stream& prev) {
    Stream st{nullptr, nullptr, 0, RING, -1, 0};
    if (u.phase >= 2) return st;
    const int e = u.e >= 0                ? u.e
                  : u.tileg == prev.tileg ? prev.expert
                                          : schedule_expert_of_tile<EL>(s.tile_prefix, u.tileg);
    st.tileg = u.tileg;
    st.expert = e;
    const int nb = u.phase == 0 ? H / 128 : I / 128;
    const u64 mat = u.phase == 0 ? static_cast<u64>(e) * (2ull * I * H / 2)
                                 : static_cast<u64>(e) * (static_cast<u64>(H) * I / 2);
    const u64 blk0 = static_cast<u64>(u.col * 4 + rg) * nb;
    st.q = (u.phase == 0 ? a.w13[rank] : a.w2[rank]) + mat + blk0 * 1024;
    st.sf = (u.phase == 0 ? a.w13_sf[rank] : a.w2_sf[rank]) + mat / 8 + blk0 * 128;
    st.nbw = (nb - kh + KW - 1) / KW;
    st.w = st.nbw <= RING ? RING : (st.nbw + RING - 1) / RING * RING;
    return st;
  };

  const u64 topk_pitch = static_cast<u64>(K) * 4;
  // Live routes of the unit's tile: published with the unit (stages), counted here otherwise.
  auto unit_live = [&](const PublishedUnit& u, int e) {
    return kStaged ? u.live : tile_live<BM>(s.count, s.tile_prefix, e, u.tileg);
  };
  float acc[NT][4];
  Ring<RING> ring;           // STAGES = 0
  StagePosition pos{0, 0u};  // STAGES > 0
  UnitPosition upos{0};      // STAGES > 0
  // The units: with stages, as the producer publishes them; else the static schedule.
  auto next_unit = [&] { return take_unit(s.unit_q, s.unit_ready, upos); };
  // The register ring walks the schedule itself (e = -1: stream_of searches the expert).
  PublishedUnit cur = kStaged ? next_unit() : PublishedUnit{sched.first(0), -1, 0};
  Stream cs = stream_of(cur, Stream{nullptr, nullptr, 0, RING, -1, 0});
  if constexpr (!kStaged) prime<RING, KW>(ring, cs, kh, lane);
  // One unit's MMAs over the token sub-tile (`ns`: the next unit's stream, which the register
  // ring starts loading at the end of this one); its split-K partials land in `red` (the unit's
  // exchange buffer) and one CTA barrier makes them readable to the epilogue.
  int red_buf = 0;
  const float* red = s.red;
  auto stream_unit = [&](const Stream& ns) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[nt][c] = 0.0f;
    if constexpr (kStaged) {
      consume_staged<KMAX, NT, KW, STAGES, SB>(s.ring, s.full, s.empty, pos, cs.nbw, s.b, acc);
    } else {
      consume<KMAX, NT, RING, KW>(ring, cs, ns, s.b, acc);
    }
    float* const buffer = s.red + red_buf * kPartialFloats<NT, KW>;
    store_partials<NT>(buffer, acc);
    red = buffer;
    Sync::sync();
  };
  // The unit's raw result at tile row `row`, token `i` (after stream_unit's barrier).
  auto y = [&](int row, int i) { return unit_sum<NT, KW>(red, row, i); };
  // After the epilogue: with two exchange buffers the next unit writes the other one (every
  // thread has left this epilogue before it passes the next unit's barrier, so the unit after
  // that may overwrite this buffer); with one, a barrier keeps this epilogue's reads first. Then
  // on to the next unit: the producer's next (stages) or the schedule's `nx` (register ring).
  auto end_unit = [&](const PublishedUnit& nx, const Stream& ns) {
    if constexpr (RB == 2) {
      red_buf ^= 1;
    } else {
      Sync::sync();
    }
    if constexpr (kStaged) {
      cur = next_unit();
      cs = stream_of(cur, cs);
    } else {
      cur = nx;
      cs = ns;
    }
  };

  // ---- phase 1: FC1 + activation + re-quantization ----------------------------------------
  int b_tile = -1, b_sub = -1;
  bool first_tile_ready = false;             // FirstTileReady signalled
  float route_w = 0.0f, route_alpha = 0.0f;  // this thread's route (tid < live) of a new tile
  bool fresh_routes = false;
  while (cur.phase == 0) {
    // The register ring needs the next unit's stream now (it starts loading it during this
    // one); with stages the producer may not have published it yet.
    const PublishedUnit nx = kStaged ? cur : PublishedUnit{sched.next(cur), -1, 0};
    const Stream ns = kStaged ? cs : stream_of(nx, cs);
    const int e = cs.expert;
    const int tile = cur.tileg - s.tile_prefix[e];
    const int live = unit_live(cur, e);
    const int pool_row0 = (s.tile_prefix[e] + tile) * BM;
    if (cur.tileg != b_tile) {
      b_tile = cur.tileg;
      b_sub = -1;
      Sync::sync();  // the previous tile's routes are no longer read
      if (warp == 0) nvfp4_moe::gather_tile_routes<K, R, BM>(a, s, first_expert + e, tile);
      Sync::sync();
      if (tid < live) {
        // Issued here, stored after the token tile: the two loads' latencies overlap.
        const int sr = s.route_src[tid], tok = s.route_tok[tid], k = s.route_k[tid];
        const u8* sb = a.base[sr];
        route_w = __ldg(reinterpret_cast<const float*>(sb + a.off_topk_w + tok * topk_pitch) + k);
        route_alpha = __fmul_rn(__ldg(reinterpret_cast<const float*>(sb + a.off_x_global) + tok),
                                __ldg(a.alpha1[rank] + e));
        fresh_routes = true;
      }
    }
    const int sub_live = min(NS, live - cur.sub * NS);
    if (cur.sub != b_sub) {
      b_sub = cur.sub;
      Sync::sync();  // s.b is no longer read
      const int sub = cur.sub;
      load_token_tile_paired<H, KMAX, NS, kThreads, false>(
          s.b, sub_live, [&](int i) { return nvfp4_moe::fc1_token_row(a, s, sub * NS + i); },
          [&](int i) { return nvfp4_moe::fc1_token_sf_row(a, s, sub * NS + i); });
      Sync::sync();
      if (kStaged && !first_tile_ready) {
        FirstTileReady::arrive();
        first_tile_ready = true;
      }
    }
    if (fresh_routes) {
      // Read by the epilogue only, after stream_unit's barrier.
      s.route_w[tid] = route_w;
      s.route_alpha[tid] = route_alpha;
      fresh_routes = false;
    }
    if (cur.col == 0 && cur.sub == 0 && tid < live) {
      int* rl = reinterpret_cast<int*>(mine + a.off_route) + (pool_row0 + tid) * 3;
      rl[0] = s.route_src[tid];
      rl[1] = s.route_tok[tid];
      rl[2] = s.route_k[tid];
    }
    // Loaded before the stream so that its latency hides behind it (not after the barriers).
    const float g2 = __ldg(a.fc2_scale[rank] + e);
    stream_unit(ns);
    // Warp -> live token (the bound is warp-uniform, so the shuffles inside stay whole; warps
    // past the live tokens go on at once), lane -> column (one 16-column block per half-warp).
    for (int i = warp; i < sub_live; i += kWarps) {
      nvfp4_moe::fc1_requantize_token<ACT>(a, s, mine, i, cur.sub * NS + i, sub_live, cur.col,
                                           pool_row0, g2, y);
    }
    end_unit(nx, ns);
  }

  if (kStaged && !first_tile_ready) FirstTileReady::arrive();

  // The ring already holds the first FC2 blocks: they stream while the barrier waits. Rank-local
  // at .gpu scope for any R: fc2_pool is written and read by this rank's CTAs on this GPU only.
  rank_grid_barrier<Sync>(grid_counter, cta_in_rank, nctas, a.timeout_ns, status, rank,
                          kPhaseAfterFc1);

  // ---- phase 2: FC2 into the source ranks' combine slots -----------------------------------
  b_tile = -1;
  b_sub = -1;
  int route_src = 0, route_tok = 0, route_k = 0;  // this thread's route (tid < live) of a new tile
  while (cur.phase == 1) {
    const PublishedUnit nx = kStaged ? cur : PublishedUnit{sched.next(cur), -1, 0};
    const Stream ns = kStaged ? cs : stream_of(nx, cs);
    const int e = cs.expert;
    const int tile = cur.tileg - s.tile_prefix[e];
    const int live = unit_live(cur, e);
    const int pool_row0 = (s.tile_prefix[e] + tile) * BM;
    if (cur.tileg != b_tile) {
      b_tile = cur.tileg;
      b_sub = -1;
      Sync::sync();
      if (tid < live) {
        // Issued here, stored after the token tile (which does not need them): the route list
        // and token tile loads overlap.
        const volatile int* rl =
            reinterpret_cast<const volatile int*>(mine + a.off_route) + (pool_row0 + tid) * 3;
        route_src = rl[0];
        route_tok = rl[1];
        route_k = rl[2];
        fresh_routes = true;
      }
    }
    const int sub_live = min(NS, live - cur.sub * NS);
    if (cur.sub != b_sub) {
      b_sub = cur.sub;
      Sync::sync();
      const int row0 = pool_row0 + cur.sub * NS;
      load_token_tile_paired<I, KMAX, NS, kThreads, true>(
          s.b, sub_live,
          [&](int i) {
            return mine + a.off_fc2_pool + static_cast<u64>(row0 + i) * a.pitch_fc2_pool;
          },
          [&](int i) { return mine + a.off_fc2_sf + static_cast<u64>(row0 + i) * a.pitch_fc2_sf; });
      Sync::sync();
    }
    if (fresh_routes) {
      // Read by the epilogue's stores only, after stream_unit's barrier.
      s.route_src[tid] = route_src;
      s.route_tok[tid] = route_tok;
      s.route_k[tid] = route_k;
      fresh_routes = false;
    }
    const float factor = __fmul_rn(__ldg(a.fc2_scale[rank] + e), __ldg(a.alpha2[rank] + e));
    stream_unit(ns);
    if constexpr (FP8C) {
      // y of this column tile into its half of the 128-row FP8 block. The even tile's half waits
      // for the odd one, this CTA's next unit (whole pairs per CTA, and the columns of one
      // (tile, sub-tile) run in order); rewritten only after the next pair's barriers.
      const int half = (cur.col & 1) * 64;
      for (int u = tid; u < 64 * sub_live; u += kThreads) {
        const int i = u / 64, row = u - i * 64;
        s.ypair[(half + row) * NS + i] = __fmul_rn(y(row, i) * nvfp4::kWeightUnscale, factor);
      }
      if (half != 0) {
        Sync::sync();  // both halves written
        // One warp per token, lane l holds rows 4 l .. 4 l + 3 of the block: finite amax, f32
        // scale amax / 448, e4m3 codes of y / scale (the oracle's 1x128 recipe), 4 bytes a lane
        // and the scale into the source rank's slot (peer writes).
        for (int i = warp; i < sub_live; i += kWarps) {
          const int r = cur.sub * NS + i;
          // Read twice from shared memory rather than held: 16-token tiles are at the
          // 128-register cap.
          auto y_of = [&](int j) { return s.ypair[(lane * 4 + j) * NS + i]; };
          float amax = 0.0f;
#pragma unroll 1
          for (int j = 0; j < 4; ++j) amax = exact::amax2(amax, exact::finite_abs(y_of(j)));
#pragma unroll
          for (int d = 16; d >= 1; d >>= 1) {
            amax = exact::amax2(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, d));
          }
          const float scale = exact::fp8_f32_scale(amax);
          u32 packed = 0;
#pragma unroll 1
          for (int j = 0; j < 4; ++j) {
            packed |= exact::e4m3_code(__fdiv_rn(y_of(j), scale)) << (8 * j);
          }
          const u64 row = static_cast<u64>(s.route_k[r]) * TMAX + s.route_tok[r];
          u8* base = a.base[s.route_src[r]];
          const int blk = cur.col >> 1;
          *reinterpret_cast<u32*>(base + a.off_combine + row * H + blk * 128 + lane * 4) = packed;
          if (lane == 0) {
            *reinterpret_cast<float*>(base + a.off_combine_sf + row * a.pitch_combine_sf +
                                      blk * 4) = scale;
          }
        }
      }
    } else {
      fc2_store_bf16_rows<H, TMAX, NS, kWarps>(a, s, cur.sub, sub_live, cur.col, factor, y);
    }
    end_unit(nx, ns);
  }

  nvfp4_moe::barrier_before_combine<R, Sync>(a, grid_counter, cta_in_rank, nctas, status, rank);

  // ---- phase 3: combine the rank's own tokens ----------------------------------------------
  nvfp4_moe::combine_rank_tokens<H, K, EL, R, TMAX, kThreads, FP8C>(
      a, mine, rank, min(s.src_tokens[rank], a.out_rows[rank]), cta_in_rank, nctas);
}

}  // namespace megamoe::device
