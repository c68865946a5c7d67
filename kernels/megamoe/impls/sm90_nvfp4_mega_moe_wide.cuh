#pragma once
// Wide variant of the SM90 NVFP4 MegaMoE kernel (docs/nvfp4_kernel.md, "Versions"): the default
// from BLOCK_M 16 on (T = 512 at the decode presets). The pipelined kernel keeps a CTA's token
// sub-tile in shared memory as f16 over all of K, which caps it at 16 tokens (8 at H = 6144) next
// to its stages: every further 8 or 16 routes of an expert stream and decode its weights once
// more. Here the token operand streams with the weights instead:
//   * before FC1 (FC2) the rank's CTAs decode every tile's token rows (FC2: the fc2_pool rows)
//     once, exactly, into the "token_f16" scratch as chunks of CK k ([tile][chunk][BM rows]
//     [CK + 8] f16, the pipelined kernel's paired layout), then a rank-local grid barrier;
//   * a unit is 256 weight rows (16 row groups, one per consumer warp) over all of K, so there is
//     no split-K exchange; each stage carries CK k of every row group's weights and the same CK k
//     of the sub-tile's token chunk (bulk copies). Without a resident token tile, sub-tiles of
//     up to 32 tokens run with two or more stages at any H;
//   * the MMAs run only over the sub-tile's live 8-token groups (a warp-uniform choice per unit).
//   * both epilogues run from the warps' accumulators without a CTA barrier: FC2's from each
//     warp's own (FP8 combine slots: the 8 warps of a 1x128 block share their amax through
//     shared memory), FC1's by pairs of warps (the gate rows of 16 columns and their up rows),
//     which swap half their accumulators through shared memory.
// Numerics are the pipelined kernel's: the same exact decode of both operands, FC1's epilogue the
// operations of nvfp4_moe::fc1_requantize_token, FC2 rounded as nvfp4_pipe::fc2_store_bf16_rows.
#include "megamoe/impls/sm90_nvfp4_mega_moe_pipelined.cuh"

namespace megamoe::device {
namespace nvfp4_wide {

using nvfp4_pipe::PublishedUnit;
using nvfp4_pipe::StagePosition;
using nvfp4_pipe::Unit;
using nvfp4_pipe::UnitPosition;

// A compile-time int as a value (selects the MMA width of a unit).
template <int N>
struct IntConst {
  static constexpr int value = N;
};

inline constexpr int kRowGroups = 16;  // consumer warps = 16-row groups of a 256-row unit

// Warp roles. 17 warps at one CTA per SM leave ptxas 96 registers a thread (no setmaxnreg: the
// producer is one warp, not a warpgroup); the 32-token consume loop fits them only with nothing
// else held across it (the kernel re-derives rank, tile facts and pointers where used).
// Warps 0..15 consume (row group = warp); warp 16 produces (bulk copies, the unit ring).
inline constexpr int kProducerWarp = kRowGroups;

// One stage covers CK k (CK / 128 blocks of every row group; the kernel's stage_blocks): per row
// group the nibbles of its blocks (CK / 128 x 1024 B), then their scales (CK / 128 x 128 B),
// contiguous in the kernel weight layout too; then CK k of the sub-tile's token chunk. Token rows
// of a chunk are CK + 8 f16 apart: the 16-byte pad keeps a quarter warp's B loads (rows g, g + 1)
// in different banks, as in the pipelined kernel's token tile.
template <int CK>
struct Chunk {
  static_assert(CK == 256 || CK == 384 || CK == 512, "chunks of 256, 384 or 512 k");
  static constexpr int kBlocks = CK / 128;
  static constexpr int kPitch = CK + 8;
  static constexpr int kRowBytes = kPitch * 2;
  static constexpr int kGroupBytes = kBlocks * 1152;
  static constexpr int kWeightBytes = kRowGroups * kGroupBytes;
  template <int NS>
  static constexpr int kStageBytes = kWeightBytes + NS* kRowBytes;
  // Scratch byte offset of row `row` of chunk `c` of tile `tileg` ([tile][chunk][BM rows]).
  template <int BM>
  MEGAMOE_DEVICE static u64 row_offset(int tileg, int nch, int c, int row) {
    return ((static_cast<u64>(tileg) * nch + c) * BM + row) * kRowBytes;
  }
};

// Shared memory of one CTA (dynamic; src/runtime/register_nvfp4_mega_moe.cpp mirrors its size).
// ring / full / empty: the stages (weights, then the token chunk); unit_ready / unit_q: the units
// the producer published; y: FC1's exchange between warp pairs (fc1_store_by_pairs), RB buffers of
// a region of 16 x NS floats per warp, or with RB = 0 one region of kPairRoundFloats per warp (two
// 8-token groups a round: 8 KB where no whole buffer fits beside the stages). FC2 units store from
// registers; with FP8 combine slots they keep their per-warp amax rows in y.
inline constexpr int kPairRoundGroups = 2;
inline constexpr int kPairRoundFloats = kPairRoundGroups * 2 * 32;  // a warp's half, 2 groups
template <int EL, int BM, int NS, int STAGES, int RB, int CK>
struct Smem {
  u8 ring[STAGES * Chunk<CK>::template kStageBytes<NS>];
  u64 full[STAGES], empty[STAGES];
  u64 unit_ready[nvfp4_pipe::kUnitSlots];
  ptx::u32x4 unit_q[nvfp4_pipe::kUnitSlots];
  float y[RB == 0 ? kRowGroups * kPairRoundFloats : RB * kRowGroups * 16 * NS];
  int count[EL];
  int tile_prefix[EL + 1];
  int src_tokens[8];
  int route_src[BM], route_tok[BM], route_k[BM];
  float route_w[BM], route_alpha[BM];
};

// Where a pool row's NVFP4 operand lives: its nibbles (KD / 2 bytes) and its scale bytes (KD / 16).
struct RowOperand {
  const u8* q;
  const u8* sf;
};

// Every 16-k block of rows [0, ceil8(live)) of every tile of the rank, decoded exactly into the
// scratch (rows past `live` as zeros: the MMAs read whole 8-token groups). One warp a row, the
// rank's rows dealt round-robin over its CTAs' consumer warps (`THREADS` a CTA); lane l takes the
// 64-k groups l, l + 32, ... of the row: 32 bytes of nibbles and 4 scale bytes each, every load of
// the lane issued before its first decode, and a group's 64 products are 32 contiguous words of
// the paired layout (paired_word_index). The groups of a chunk are contiguous in the scratch, so
// a pass's 32 groups leave through the warp's 4 KB of `staging` (shared memory idle in this
// phase): each lane writes its group's 8 16-byte pieces there (piece p at slot p ^ (l & 7): no two
// lanes of a quarter warp in one bank group), then every store instruction of the warp writes 4
// groups, 512 contiguous bytes of the scratch (two runs of 256 where a 384-k chunk ends among
// them) -- a lane's own 128 bytes stored directly took 32 separate half sectors per instruction
// (bench/NOTES.md, nineteenth session). row_of(row) gives a live row's operand; kCoherent reads it
// through L2 (written earlier in this launch), else through the read-only path.
inline constexpr int kDecodeStagingBytes = 32 * 128;  // per consumer warp
template <int KD, int BM, int EL, int THREADS, int CK, bool kCoherent, class S, class RowOf>
MEGAMOE_DEVICE void decode_token_chunks(u8* scratch, u8* staging, const S& s, int total_tiles,
                                        int cta, int nctas, RowOf row_of) {
  static_assert(KD % CK == 0 && CK % 64 == 0, "whole 64-k groups in whole chunks");
  constexpr int kGroups = KD / 64;
  constexpr int kGroupsPerLane = (kGroups + 31) / 32;
  constexpr int kChunks = KD / CK;
  constexpr int kGroupsPerChunk = CK / 64;
  constexpr int kWarps = THREADS / 32;
  const int lane = threadIdx.x & 31;
  u8* own_staging = staging + (threadIdx.x >> 5) * kDecodeStagingBytes;
  // Rows in the order (row within the tile, tile): a warp's rows spread over every row index
  // (tile-major order with a stride that is a multiple of BM gave each warp one fixed row index,
  // so the warps of rows past the live ones had nothing to do and the others twice the work).
  const int rows = total_tiles * BM;
  for (int slot = cta * kWarps + (threadIdx.x >> 5); slot < rows; slot += nctas * kWarps) {
    const int i = slot / total_tiles, tileg = slot - i * total_tiles;
    const int row = tileg * BM + i;
    const int live = nvfp4_pipe::tile_live<BM>(
        s.count, s.tile_prefix, nvfp4_pipe::schedule_expert_of_tile<EL>(s.tile_prefix, tileg),
        tileg);
    if (i >= ((live + 7) & ~7)) continue;  // warp-uniform: rows no MMA reads
    const bool real = i < live;
    ptx::u32x4 q0[kGroupsPerLane], q1[kGroupsPerLane];
    u32 sc[kGroupsPerLane];
    const RowOperand op = real ? row_of(row) : RowOperand{nullptr, nullptr};
#pragma unroll
    for (int j = 0; j < kGroupsPerLane; ++j) {
      const int g = lane + 32 * j;
      q0[j] = q1[j] = ptx::u32x4{0u, 0u, 0u, 0u};
      sc[j] = 0u;
      if (real && g < kGroups) {
        const u8* q = op.q + g * 32;
        const auto* sf = reinterpret_cast<const unsigned*>(op.sf + g * 4);
        if constexpr (kCoherent) {
          q0[j] = ptx::load_16(q);
          q1[j] = ptx::load_16(q + 16);
          sc[j] = __ldcg(sf);
        } else {
          q0[j] = ptx::load_global_nc_16(q);
          q1[j] = ptx::load_global_nc_16(q + 16);
          sc[j] = __ldg(sf);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kGroupsPerLane; ++j) {
      const int g = lane + 32 * j;
      __syncwarp();  // the previous pass's pieces have been read
      if (g < kGroups) {
        u32 v[4][8];
        const u32 nib[8] = {q0[j].x, q0[j].y, q0[j].z, q0[j].w, q1[j].x, q1[j].y, q1[j].z, q1[j].w};
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          if (real) {
            nvfp4::decode_activation_block(nib[2 * b], nib[2 * b + 1], sc[j] >> (8 * b), v[b]);
          } else {
#pragma unroll
            for (int p = 0; p < 8; ++p) v[b][p] = 0u;
          }
        }
        // Pieces 2 t and 2 t + 1: words 8 t .. 8 t + 7 of the group's 32 (paired layout).
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          *reinterpret_cast<ptx::u32x4*>(own_staging + lane * 128 + ((2 * t) ^ (lane & 7)) * 16) =
              ptx::u32x4{v[0][t], v[0][t + 4], v[1][t], v[1][t + 4]};
          *reinterpret_cast<ptx::u32x4*>(own_staging + lane * 128 +
                                         ((2 * t + 1) ^ (lane & 7)) * 16) =
              ptx::u32x4{v[2][t], v[2][t + 4], v[3][t], v[3][t + 4]};
        }
      }
      __syncwarp();  // every lane's pieces are in place
      // Store instruction k: lanes 8 m .. 8 m + 7 write the 8 pieces of the pass's group 4 k + m
      // (not unrolled: with every piece loaded first, the H = 6144 shapes spilled).
#pragma unroll 1
      for (int k = 0; k < 8; ++k) {
        const int gl = 4 * k + (lane >> 3), p = lane & 7;
        const int gg = 32 * j + gl;
        if (gg < kGroups) {
          const ptx::u32x4 piece =
              *reinterpret_cast<const ptx::u32x4*>(own_staging + gl * 128 + (p ^ (gl & 7)) * 16);
          ptx::store_global_16(
              scratch +
                  Chunk<CK>::template row_offset<BM>(tileg, kChunks, gg / kGroupsPerChunk, i) +
                  (gg % kGroupsPerChunk) * 128 + p * 16,
              piece);
        }
      }
    }
  }
  // The producers' bulk copies (async proxy) read these words after the grid barrier, and write
  // the staging bytes (their stages) after TokensReady.
  ptx::fence_proxy_async_global();
  ptx::fence_proxy_async_shared();
}

// acc[nt] (nt < NTL) += this warp's row group x the sub-tile's first 8 NTL tokens over `nch`
// stages. Barrier full[stage]: the producer's expect_tx arrival + the stage's bytes (weights and
// token chunk) complete a phase; empty[stage]: every consumer thread arrives after its last read
// of the stage (the token chunk's B loads of its last block).
template <int NS, int NTL, int STAGES, int CK>
MEGAMOE_DEVICE void consume_wide(const u8* ring, u64* full, u64* empty, StagePosition& pos, int nch,
                                 float (&acc)[NTL][4]) {
  using C = Chunk<CK>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int q_off = warp * C::kGroupBytes + lane * 16;
  const int s_off = warp * C::kGroupBytes + C::kBlocks * 1024 + (lane >> 2) * 16;
  const int b_off = C::kWeightBytes / 2 + (lane >> 2) * C::kPitch +
                    nvfp4_pipe::paired_load_index(0, 0, lane & 3);  // f16 index
  for (int j = 0; j < nch; ++j) {
    ptx::mbarrier_wait_parity(full + pos.stage, pos.parity);
    const u8* st = ring + pos.stage * C::template kStageBytes<NS>;
    const u16* bl = reinterpret_cast<const u16*>(st) + b_off;
#pragma unroll
    for (int d = 0; d < C::kBlocks; ++d) {
      const ptx::u32x4 q0 = *reinterpret_cast<const ptx::u32x4*>(st + q_off + d * 1024);
      const ptx::u32x4 q1 = *reinterpret_cast<const ptx::u32x4*>(st + q_off + d * 1024 + 512);
      const ptx::u32x4 sc = *reinterpret_cast<const ptx::u32x4*>(st + s_off + d * 128);
      const u32 words[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
      const u32 scw[4] = {sc.x, sc.y, sc.z, sc.w};
      nvfp4_pipe::block_mma<CK, NTL>(words, scw, bl + d * 128, acc);
    }
    // Every lane releases its own reads (the arrival has release semantics): no warp sync.
    ptx::mbarrier_arrive(empty + pos.stage);
    if (++pos.stage == STAGES) {
      pos.stage = 0;
      pos.parity ^= 1u;
    }
  }
}

// FC2's epilogue straight from this warp's accumulators, no shared memory and no CTA barrier:
// its 16 output columns (of the unit's 256) of every live token of the sub-tile, bf16 of y x
// kWeightUnscale x factor exactly as nvfp4_pipe::fc2_store_bf16_rows rounds them, into the
// source rank's combine slot (routes of the tile in s.route_*). Lanes of even g take token 2 t of
// each 8-token group, odd g token 2 t + 1; rows pair with the neighbouring lane's (lane ^ 4:
// row g ^ 1) for 4-byte stores of rows (g & ~1, + 1) and (+ 8, + 9).
template <int H, int TMAX, int NS, class S, int NT>
MEGAMOE_DEVICE void fc2_store_from_registers(const Nvfp4MoeArgs& a, const S& s, int sub,
                                             int sub_live, int col, float factor,
                                             const float (&acc)[NT][4]) {
  const int tid = ptx::tid_x();
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const bool odd = (g & 1) != 0;
  const int h0 = col * 256 + warp * 16 + (g & ~1);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    // m16n8 accumulator element c: row g (+ 8 for c >= 2), token 2 t (+ 1 for odd c).
    u32 v[4], x[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      v[c] = ptx::f32_to_bf16_rn(__fmul_rn(acc[nt][c] * nvfp4::kWeightUnscale, factor));
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) x[c] = __shfl_xor_sync(0xFFFFFFFFu, v[c], 4);
    const int i = nt * 8 + 2 * t + (odd ? 1 : 0);
    if (i < sub_live) {
      const u32 lo = odd ? (x[1] | v[1] << 16) : (v[0] | x[0] << 16);
      const u32 hi = odd ? (x[3] | v[3] << 16) : (v[2] | x[2] << 16);
      const int r = sub * NS + i;
      u8* slot = a.base[s.route_src[r]] + a.off_combine +
                 ((static_cast<u64>(s.route_k[r]) * TMAX + s.route_tok[r]) * H + h0) * 2;
      *reinterpret_cast<u32*>(slot) = lo;
      *reinterpret_cast<u32*>(slot + 16) = hi;  // rows + 8, + 9
    }
  }
}

// Named barrier of the 8 warps of one 128-column FP8 block of an FC2 unit (warps 8 h .. 8 h + 7
// for block h): IDs 11 and 12. 256 arrivals, all threads of those warps, once per FC2 unit: after
// each warp wrote its amax row, before any warp reads the block's rows.
MEGAMOE_DEVICE void fp8_block_sync(int block) {
  asm volatile("bar.sync %0, 256;" ::"r"(11 + block) : "memory");
}

// FC2's epilogue into FP8 combine slots (config.fp8_combine) from this warp's accumulators. The
// unit's 256 output columns are two 1x128 FP8 blocks of 8 warps each, so the amax crosses warps:
// each warp reduces the finite amax of its 16 columns per token (a lane's rows g and g + 8, then
// over g), writes it into its row of `amax` (kRowGroups rows of NS floats; units alternate
// between two such buffers, so a warp of the next unit never overwrites a row that a slower warp
// of its block still reads: it first passes that unit's block barrier), the block's warps meet,
// and each lane takes the max of the block's 8 rows (lane g reads warp g's, then over g). Then
// the pipelined kernel's operations: scale amax / 448, e4m3 codes of y / scale -- max is exact in
// any order, so the bytes are the pipelined kernel's. The codes gather by shuffles into lanes
// g = 0 (token 2 t) and g = 1 (token 2 t + 1): one 16-byte store of the warp's 16 columns per
// token (peer writes), and the first warp of a block stores the token's f32 scale.
template <int H, int TMAX, int NS, class S, int NT>
MEGAMOE_DEVICE void fc2_store_fp8_from_registers(const Nvfp4MoeArgs& a, const S& s, float* amax,
                                                 int sub, int sub_live, int col, float factor,
                                                 const float (&acc)[NT][4]) {
  const int tid = ptx::tid_x();
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int block = warp >> 3;
  // m16n8 accumulator element c: row g (+ 8 for c >= 2), token 2 t (+ 1 for odd c).
  float y[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int c = 0; c < 4; ++c) y[nt][c] = __fmul_rn(acc[nt][c] * nvfp4::kWeightUnscale, factor);
    float m0 = exact::amax2(exact::finite_abs(y[nt][0]), exact::finite_abs(y[nt][2]));
    float m1 = exact::amax2(exact::finite_abs(y[nt][1]), exact::finite_abs(y[nt][3]));
#pragma unroll
    for (int d = 4; d <= 16; d <<= 1) {  // over g
      m0 = exact::amax2(m0, __shfl_xor_sync(0xFFFFFFFFu, m0, d));
      m1 = exact::amax2(m1, __shfl_xor_sync(0xFFFFFFFFu, m1, d));
    }
    if (g == 0) *reinterpret_cast<float2*>(amax + warp * NS + nt * 8 + 2 * t) = float2{m0, m1};
  }
  fp8_block_sync(block);
  const float* rows = amax + (block * 8 + g) * NS;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int i0 = nt * 8 + 2 * t;
    const float2 m = *reinterpret_cast<const float2*>(rows + i0);
    float m0 = m.x, m1 = m.y;
#pragma unroll
    for (int d = 4; d <= 16; d <<= 1) {
      m0 = exact::amax2(m0, __shfl_xor_sync(0xFFFFFFFFu, m0, d));
      m1 = exact::amax2(m1, __shfl_xor_sync(0xFFFFFFFFu, m1, d));
    }
    const float s0 = exact::fp8_f32_scale(m0), s1 = exact::fp8_f32_scale(m1);
    // Bytes: rows g and g + 8 of token i0, then of token i0 + 1.
    const u32 v = exact::e4m3_code(__fdiv_rn(y[nt][0], s0)) |
                  exact::e4m3_code(__fdiv_rn(y[nt][2], s0)) << 8 |
                  exact::e4m3_code(__fdiv_rn(y[nt][1], s1)) << 16 |
                  exact::e4m3_code(__fdiv_rn(y[nt][3], s1)) << 24;
    // Row g ^ 1's bytes: even g keeps token i0's rows (g, g + 1, g + 8, g + 9), odd g token i0 +
    // 1's rows (g - 1, g, g + 7, g + 8); lane pair p = g / 2 now holds rows 2 p, 2 p + 1 (low half)
    // and 2 p + 8, 2 p + 9 (high half) of its token.
    const u32 x = __shfl_xor_sync(0xFFFFFFFFu, v, 4);
    const u32 w = (g & 1) != 0 ? ptx::prmt(v, x, 0x3726u) : ptx::prmt(v, x, 0x5140u);
    // Pair p ^ 1 (same token): even p holds rows 2 p .. 2 p + 3 and 2 p + 8 .. 2 p + 11.
    const u32 z = __shfl_xor_sync(0xFFFFFFFFu, w, 8);
    const u32 lo = ptx::prmt(w, z, 0x5410u), hi = ptx::prmt(w, z, 0x7632u);
    // g ^ 4: lanes g = 0, 1 take rows 4 .. 7 and 12 .. 15 from g = 4, 5.
    const u32 lo2 = __shfl_xor_sync(0xFFFFFFFFu, lo, 16);
    const u32 hi2 = __shfl_xor_sync(0xFFFFFFFFu, hi, 16);
    const int i = i0 + (g & 1);
    if (g < 2 && i < sub_live) {
      const int r = sub * NS + i;
      const u64 row = static_cast<u64>(s.route_k[r]) * TMAX + s.route_tok[r];
      u8* base = a.base[s.route_src[r]];
      ptx::store_global_16(base + a.off_combine + row * H + col * 256 + warp * 16,
                           ptx::u32x4{lo, lo2, hi, hi2});
      if ((warp & 7) == 0) {
        *reinterpret_cast<float*>(base + a.off_combine_sf + row * a.pitch_combine_sf +
                                  (col * 2 + block) * 4) = g != 0 ? s1 : s0;
      }
    }
  }
}

// Named barrier of the warp pair (gate warp 4 c + m, up warp 4 c + m + 2) of column tile c and
// half m: IDs 3..10 (1: the consumers' CTA barrier, 2: TokensReady, 11 and 12: fp8_block_sync).
// 64 arrivals, both warps' threads: after each round's exchange writes, and before a round writes
// a region that still holds values the partner reads (fc1_store_by_pairs).
MEGAMOE_DEVICE void pair_sync(int warp) {
  const int id = 3 + 2 * (warp >> 2) + (warp & 1);
  asm volatile("bar.sync %0, 64;" ::"r"(id) : "memory");
}

// One 8-token group nt of fc1_store_by_pairs (below): columns g and g + 8 of the warp's 16-column
// block for token i = 8 nt + 2 t (gate warp) or + 1 (up warp); `acc` = this warp's m16n8
// accumulators of the group, o0 / o1 = the partner's values of rows g and g + 8 for token i.
template <int ACT, int NS, int BM, class S>
MEGAMOE_DEVICE void fc1_finish_pair_group(const Nvfp4MoeArgs& a, const S& s, u8* mine,
                                          const PublishedUnit& u, float g2, int nt,
                                          const float (&acc)[4], float o0, float o1) {
  const int tid = ptx::tid_x();
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const bool up_warp = (warp & 2) != 0;
  const int half = warp & 1;                // NVFP4 block of the 32-column tile
  const int col = u.col * 4 + (warp >> 2);  // 32-column tile of the intermediate
  const float m0 = up_warp ? acc[1] : acc[0];
  const float m1 = up_warp ? acc[3] : acc[2];
  const int i = nt * 8 + 2 * t + (up_warp ? 1 : 0);
  const int r = u.sub * NS + i;
  const bool live = i < u.sub_live<NS>();
  float v0 = 0.0f, v1 = 0.0f;
  if (live) {
    const float alpha = s.route_alpha[r], w = s.route_w[r];
    v0 = w * nvfp4_moe::fc1_activation<ACT>(up_warp ? o0 : m0, up_warp ? m0 : o0, alpha, a);
    v1 = w * nvfp4_moe::fc1_activation<ACT>(up_warp ? o1 : m1, up_warp ? m1 : o1, alpha, a);
  }
  float amax = exact::amax2(exact::finite_abs(v0), exact::finite_abs(v1));
#pragma unroll
  for (int d = 4; d <= 16; d <<= 1) {
    amax = exact::amax2(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, d));  // over g
  }
  const u32 code = exact::nvfp4_block_code(amax, g2);
  const float denom = __fmul_rn(exact::ue4m3_value(code), g2);
  const u32 q0 = exact::e2m1_code(__fdiv_rn(v0, denom));
  const u32 q1 = exact::e2m1_code(__fdiv_rn(v1, denom));
  const u32 q0_next = __shfl_down_sync(0xFFFFFFFFu, q0, 4);  // column g + 1
  const u32 q1_next = __shfl_down_sync(0xFFFFFFFFu, q1, 4);
  if (live) {
    const u64 prow = static_cast<u64>(u.tileg) * BM + r;
    u8* pool = mine + a.off_fc2_pool + prow * a.pitch_fc2_pool;
    const int c0 = col * 32 + half * 16 + g;
    if ((g & 1) == 0) {
      pool[c0 / 2] = static_cast<u8>(q0 | (q0_next << 4));
      pool[(c0 + 8) / 2] = static_cast<u8>(q1 | (q1_next << 4));
    }
    if (g == 0) {
      (mine + a.off_fc2_sf + prow * a.pitch_fc2_sf)[col * 2 + half] = static_cast<u8>(code);
    }
  }
}

// FC1's epilogue from registers, by warp pairs. A unit's 256 rows are 4 column tiles of 64 (32
// gate rows, then the same 32 columns' up rows), so warp 4 c + m holds the gate rows of columns
// 16 m .. 16 m + 15 of tile c and warp 4 c + m + 2 their up rows, lane for lane (m16n8 element
// c0 / c1: row g, tokens 2 t / 2 t + 1; c2 / c3: row g + 8). Each warp writes the half its partner
// needs into its own region of `x` (GROUP floats; the gate warp tokens 2 t + 1, the up warp tokens
// 2 t), the pair meets at its named barrier, and each finishes one token of every pair:
// activation, the amax of the token's 16 columns (exactly one NVFP4 block: the warp's), codes and
// the scale byte into the tile's fc2_pool rows -- nvfp4_moe::fc1_requantize_token's operations,
// bit for bit (the shared fc1_activation). ROUND 8-token groups at a time; kReuse: the
// region still holds the previous round's (or unit's) values, so the pair meets first (the partner
// has read them).
template <int ACT, int NS, int BM, int GROUP, int ROUND, bool kReuse, class S, int NTL>
MEGAMOE_DEVICE void fc1_store_by_pairs(const Nvfp4MoeArgs& a, const S& s, u8* mine, float* x,
                                       const PublishedUnit& u, float g2,
                                       const float (&acc)[NTL][4]) {
  static_assert(2 * ROUND * 32 <= GROUP, "a round of the warp's half fits its region");
  const int tid = ptx::tid_x();
  const int warp = tid >> 5, lane = tid & 31;
  const bool up_warp = (warp & 2) != 0;
  float* own = x + warp * GROUP;
  const float* other = x + (warp ^ 2) * GROUP;
#pragma unroll
  for (int n0 = 0; n0 < NTL; n0 += ROUND) {
    if (kReuse) pair_sync(warp);
#pragma unroll
    for (int nt = n0; nt < NTL && nt < n0 + ROUND; ++nt) {
      own[(2 * (nt - n0)) * 32 + lane] = up_warp ? acc[nt][0] : acc[nt][1];
      own[(2 * (nt - n0) + 1) * 32 + lane] = up_warp ? acc[nt][2] : acc[nt][3];
    }
    pair_sync(warp);
#pragma unroll
    for (int nt = n0; nt < NTL && nt < n0 + ROUND; ++nt) {
      fc1_finish_pair_group<ACT, NS, BM>(a, s, mine, u, g2, nt, acc[nt],
                                         other[(2 * (nt - n0)) * 32 + lane],
                                         other[(2 * (nt - n0) + 1) * 32 + lane]);
    }
  }
}

// The calling warp's (the producer's) item range [lo, hi) of one phase: ct items per tile, `items`
// in all, cut by cost (nvfp4_pipe::items_starting_before; every CTA computes the same cut points,
// so CTA k's hi is CTA k + 1's lo). Each lane sums 1 / 32 of the experts; a scan over the lanes
// gives each lane its experts' starting cost.
template <int EL, int BM, int NS>
MEGAMOE_DEVICE void balanced_item_range(const int* count, int ct, int items, int cta, int nctas,
                                        int& lo, int& hi) {
  const int lane = threadIdx.x & 31;
  constexpr int kPerLane = (EL + 31) / 32;
  const int e0 = min(EL, lane * kPerLane), e1 = min(EL, e0 + kPerLane);
  long long own = 0;
  for (int e = e0; e < e1; ++e) own += nvfp4_pipe::expert_item_cost<BM, NS>(count[e], ct);
  long long incl = own;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const long long v = __shfl_up_sync(0xFFFFFFFFu, incl, d);
    if (lane >= d) incl += v;
  }
  const long long total = __shfl_sync(0xFFFFFFFFu, incl, 31);
  auto start = [&](int k) {
    int n = nvfp4_pipe::items_starting_before<BM, NS>(count, e0, e1, ct, incl - own,
                                                      nvfp4_pipe::share_start(total, k, nctas));
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) n += __shfl_xor_sync(0xFFFFFFFFu, n, d);
    return min(n, items);
  };
  lo = start(cta);
  hi = start(cta + 1);
}

}  // namespace nvfp4_wide

// Warp roles: warps 0..15 are consumers (warp w: row group w of every 256-row unit); warp 16 is
// the producer (lanes 0..15 copy one row group's weights each, lane 16 the token chunk, lane 0
// publishes the units; it leaves after phase 0 and takes no part in the consumers' barriers).
template <int H, int I, int EL, int K, int R, int BM, int TMAX, int NS, int ACT, int STAGES, int RB,
          int CK, int FP8C>
__global__ void __launch_bounds__((nvfp4_wide::kProducerWarp + 1) * 32, 1)
    nvfp4_mega_moe_wide_kernel(const __grid_constant__ Nvfp4MoeArgs a) {
  static_assert(H % 256 == 0 && I % 128 == 0,
                "H a multiple of 256 (FC2 units, FC1 chunks), I of 128 (FC1 units)");
  static_assert(H % CK == 0 && I % CK == 0, "whole chunks of CK k in both phases");
  static_assert((NS == 8 || NS == 16 || NS == 32) && BM % NS == 0,
                "sub-tiles of 8, 16 or 32 tokens dividing BM");
  static_assert(R >= 1 && R <= kNvfp4MaxRanks, "1..8 ranks");
  static_assert(STAGES >= 2 && STAGES < nvfp4_pipe::kUnitSlots, "2..15 stages (see kUnitSlots)");
  static_assert(RB >= 0 && RB <= 2, "FC1 exchange: one two-group region (0), one or two buffers");
  static_assert(FP8C == 0 || FP8C == 1, "fp8_combine is a flag");
  static_assert(BM / NS < (1 << nvfp4_pipe::kUnitFieldBits) &&
                    I / 128 < (1 << nvfp4_pipe::kUnitFieldBits) &&
                    H / 256 < (1 << nvfp4_pipe::kUnitFieldBits),
                "sub-tile and column indices fit their fields of a published unit");
  using namespace nvfp4_wide;
  constexpr int kWarps = kRowGroups;  // consumer warps
  constexpr int kThreads = kWarps * 32;
  constexpr int NT = NS / 8;
  constexpr int CT1 = I / 128;  // FC1 units per tile: 4 column tiles of 32 gate + 32 up rows
  constexpr int CT2 = H / 256;  // FC2 units per tile: 4 row tiles of 64
  // The consumers' CTA barrier (named barrier 1; the producer has gone its own way).
  using Sync = CtaBarrier<kThreads>;
  // Named barrier 2: the consumers arrive once a phase's token chunks are complete in the
  // scratch (after its grid barrier), the producer waits before that phase's first token copy.
  // Exactly two instances: FC1's chunks, FC2's.
  using TokensReady = SignalBarrier<2, kThreads + 32>;
  using S = nvfp4_wide::Smem<EL, BM, NS, STAGES, RB, CK>;
  static_assert(sizeof(S::y) >= 2 * kRowGroups * NS * sizeof(float),
                "FC2's FP8 amax rows (two buffers) fit in FC1's exchange region");
  using C = nvfp4_wide::Chunk<CK>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  S& s = nvfp4_moe::dynamic_smem_as<S>(smem_raw);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // The CTA's rank and index in it, derived again wherever used (a volatile read of %ctaid.x is
  // not merged): held in registers they outlive the units and spilled at the 96-register cap.
  auto cta_in_rank = [&] {
    return static_cast<int>(static_cast<u32>(ptx::ctaid_x()) % static_cast<u32>(a.ctas_per_rank));
  };
  auto rank_of = [&] {
    return a.first_rank +
           static_cast<int>(static_cast<u32>(ptx::ctaid_x()) / static_cast<u32>(a.ctas_per_rank));
  };
  const int nctas = a.ctas_per_rank;
  // The rank's buffer and its sync fields, from the kernel parameters wherever used (not held in
  // registers across the units).
  auto mine = [&] { return a.base[rank_of()]; };
  auto grid_counter = [&] { return reinterpret_cast<u32*>(mine() + a.off_sync + a.sync_grid); };
  auto status = [&] { return reinterpret_cast<u32*>(mine() + a.off_sync + a.sync_status); };

  if (tid == 0) {
    // full[s]: 1 arrival (the producer's expect_tx) + the stage's bytes; empty[s]: one arrival
    // per consumer thread. unit_ready[q]: one arrival (the producer's lane 0). Visible to the
    // copy engine and every warp after phase 0's barriers.
    for (int p = 0; p < STAGES; ++p) {
      ptx::mbarrier_init(s.full + p, 1);
      ptx::mbarrier_init(s.empty + p, kThreads);
    }
    for (int q = 0; q < nvfp4_pipe::kUnitSlots; ++q) ptx::mbarrier_init(s.unit_ready + q, 1);
    ptx::fence_mbarrier_init();
  }

  // Launched with programmatic dependent launch: the previous kernel on the stream (the
  // pre-dispatch, or the previous call) may still be running. No global memory is touched
  // before it has completed and its writes are visible.
  ptx::griddep_wait();

  // Tile choice on the device, this kernel the alternative: the table's kernel, launched before
  // this one and now complete, left its rank's verdict (the same on every rank).
  if (a.tile_choice_alt == BM && !nvfp4_moe::alternative_kernel_runs(a, rank_of(), BM)) return;

  // Ranks in other processes: as in the pipelined kernel, every rank's pre-dispatch of this call
  // is complete (and every rank finished the previous call) before anything is read. As the
  // alternative, the table's kernel has passed this call's entry barrier before handing over.
  if (R > 1 && a.num_driven < R && a.tile_choice_alt != BM) {
    cross_rank_barrier(
        [&](int p) {
          return reinterpret_cast<u32*>(a.base[p] + a.off_sync + a.sync_rank_barrier + 32);
        },
        R, rank_of, cta_in_rank(), nctas, a.timeout_ns, status, kPhaseEntry);
  }

  // ---- phase 0: route counts and the padded pool layout (every CTA, redundantly) ----------
  nvfp4_moe::plan_tiles<EL, K, R, BM, TMAX, kThreads, kThreads + 32>(a, s, rank_of() * EL);
  // The rank's tile count, clamped to the pool as plan_tiles returns it (read again where used).
  auto total_tiles = [&] { return min(s.tile_prefix[EL], a.pool_rows / BM); };

  // Tile choice on the device, this kernel the table's: as in the pipelined kernel, it counts
  // every expert's routes (in the ring, free until the producer's first copy) and either runs the
  // call or leaves it to the wide kernel of the larger tile launched behind it.
  if (a.tile_choice_alt > BM &&
      !nvfp4_moe::table_kernel_keeps_call<EL, K, R, BM, kThreads, sizeof(s.ring)>(
          a, s, s.ring, [&] { return cta_in_rank() == 0; }, rank_of)) {
    return;
  }

  if (warp == kProducerWarp) {
    // Producer: publishes each unit into the unit ring and fills one stage per CK k: lane r < 16
    // copies row group r's CK / 128 blocks (nibbles, scales), lane 16 the sub-tile's token chunk
    // (its live 8-token groups), once every consumer thread has released the stage's previous
    // contents. Before a phase's first token copy it waits for that phase's chunks.
    // The CTA's item ranges, cut by cost (only the producer walks the schedule).
    nvfp4_pipe::Schedule<EL, BM, NS, CT1, CT2> sched;
    sched.tile_prefix = s.tile_prefix;
    sched.count = s.count;
    balanced_item_range<EL, BM, NS>(s.count, CT1, total_tiles() * CT1, cta_in_rank(), nctas,
                                    sched.lo[0], sched.hi[0]);
    balanced_item_range<EL, BM, NS>(s.count, CT2, total_tiles() * CT2, cta_in_rank(), nctas,
                                    sched.lo[1], sched.hi[1]);
    int stage = 0;
    u32 round = 0;
    int prev_tile = -1, e = 0, seq = 0, ready_phases = 0;
    const u64 weight_policy = ptx::l2_evict_first_policy();
    const u64 token_policy = ptx::l2_evict_last_policy();
    auto tokens_ready = [&](int phase) {
      for (; ready_phases <= phase; ++ready_phases) {
        TokensReady::wait();
        ptx::fence_proxy_async_global();
      }
    };
    for (Unit u = sched.first(0); u.phase < 2; u = sched.next(u)) {
      if (u.tileg != prev_tile) {
        e = nvfp4_pipe::schedule_expert_of_tile_warp<EL>(s.tile_prefix, u.tileg);
        prev_tile = u.tileg;
      }
      const int live = nvfp4_pipe::tile_live<BM>(s.count, s.tile_prefix, e, u.tileg);
      if (lane == 0) nvfp4_pipe::publish_unit(s.unit_q, s.unit_ready, seq, u, e, live);
      ++seq;
      tokens_ready(u.phase);
      const int rows = (min(NS, live - u.sub * NS) + 7) & ~7;
      const u32 token_bytes = static_cast<u32>(rows * C::kRowBytes);
      const int nb = u.phase == 0 ? H / 128 : I / 128;  // blocks per row group
      const int nch = nb / C::kBlocks;
      const u64 mat = u.phase == 0 ? static_cast<u64>(e) * (2ull * I * H / 2)
                                   : static_cast<u64>(e) * (static_cast<u64>(H) * I / 2);
      const u64 blk0 = (static_cast<u64>(u.col) * kRowGroups + (lane & 15)) * nb;
      const int rank = rank_of();
      const u8* q = (u.phase == 0 ? a.w13[rank] : a.w2[rank]) + mat + blk0 * 1024;
      const u8* sf = (u.phase == 0 ? a.w13_sf[rank] : a.w2_sf[rank]) + mat / 8 + blk0 * 128;
      const u8* tok =
          mine() + a.off_token_f16 + C::template row_offset<BM>(u.tileg, nch, 0, u.sub * NS);
      for (int j = 0; j < nch; ++j) {
        if (round > 0) ptx::mbarrier_wait_parity(s.empty + stage, (round - 1) & 1u);
        u8* dst = s.ring + stage * C::template kStageBytes<NS>;
        if (lane == 0) {
          ptx::mbarrier_arrive_expect_tx(s.full + stage, C::kWeightBytes + token_bytes);
        }
        __syncwarp();  // the stage's byte count is armed before any of its copies lands
        if (lane < kRowGroups) {
          constexpr u32 kNibbles = C::kBlocks * 1024, kScales = C::kBlocks * 128;
          u8* g = dst + lane * C::kGroupBytes;
          ptx::bulk_load(g, q + static_cast<u64>(j) * kNibbles, kNibbles, s.full + stage,
                         weight_policy);
          ptx::bulk_load(g + kNibbles, sf + static_cast<u64>(j) * kScales, kScales, s.full + stage,
                         weight_policy);
        } else if (lane == kRowGroups) {
          ptx::bulk_load(dst + C::kWeightBytes, tok + static_cast<u64>(j) * BM * C::kRowBytes,
                         token_bytes, s.full + stage, token_policy);
        }
        if (++stage == STAGES) {
          stage = 0;
          ++round;
        }
      }
    }
    if (lane == 0) nvfp4_pipe::publish_unit(s.unit_q, s.unit_ready, seq, Unit{0, 0, 0, 2}, 0, 0);
    tokens_ready(1);  // exactly the consumers' two arrivals
    return;
  }

  // The rank-local barriers order only this rank's scratch, route list and fc2_pool, written and
  // read by its CTAs on this GPU: .gpu scope for any R.
  auto grid_barrier = [&](u32 phase) {
    rank_grid_barrier<Sync>(grid_counter(), cta_in_rank(), nctas, a.timeout_ns, status, rank_of,
                            phase);
  };
  const int gwarp = cta_in_rank() * kWarps + warp;

  // ---- phase 0.5: every tile's routes into the route list (one warp per tile), then the FC1
  // token rows into the scratch --------------------------------------------------------------
  for (int tileg = gwarp; tileg < total_tiles(); tileg += nctas * kWarps) {
    const int e = nvfp4_pipe::schedule_expert_of_tile<EL>(s.tile_prefix, tileg);
    int* rl = reinterpret_cast<int*>(mine() + a.off_route) + tileg * BM * 3;
    nvfp4_moe::scan_tile_routes<K, R, BM>(a, s, rank_of() * EL + e, tileg - s.tile_prefix[e],
                                          [&](int j, int sr, int tok, int k) {
                                            rl[j * 3] = sr;
                                            rl[j * 3 + 1] = tok;
                                            rl[j * 3 + 2] = k;
                                          });
  }
  grid_barrier(kPhaseRoutes);
  static_assert(sizeof(S::ring) >= kWarps * kDecodeStagingBytes, "decode staging in the ring");
  decode_token_chunks<H, BM, EL, kThreads, CK, false>(
      mine() + a.off_token_f16, s.ring, s, total_tiles(), cta_in_rank(), nctas, [&](int row) {
        // The route list was written before the grid barrier by other CTAs: read through L2.
        const int* rl = reinterpret_cast<const int*>(mine() + a.off_route) + row * 3;
        const int sr = __ldcg(rl), tok = __ldcg(rl + 1);
        const u8* base = a.base[sr];
        return RowOperand{base + a.off_x + tok * a.pitch_x, base + a.off_x_sf + tok * a.pitch_x_sf};
      });
  grid_barrier(kPhaseTokens);
  TokensReady::arrive();

  // ---- phases 1 and 2: units from the producer ----------------------------------------------
  nvfp4_pipe::UnitPosition upos{0};
  StagePosition pos{0, 0u};
  int y_buf = 0;
  // One unit: MMAs over the sub-tile's live 8-token groups, then finish(acc) with this warp's
  // accumulators.
  auto stream_unit = [&](int phase, int sub_live, auto&& finish) {
    const int nch = (phase == 0 ? H : I) / CK;
    auto run = [&](auto ntl) {
      constexpr int NTL = decltype(ntl)::value;
      float acc[NTL][4];
#pragma unroll
      for (int nt = 0; nt < NTL; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[nt][c] = 0.0f;
      consume_wide<NS, NTL, STAGES, CK>(s.ring, s.full, s.empty, pos, nch, acc);
      finish(acc);
    };
    // The live 8-token groups only (warp-uniform): an expert's last sub-tile is often short.
    const int groups = (sub_live + 7) >> 3;
    if (NT >= 4 && groups > 3) {
      run(IntConst<(NT >= 4 ? 4 : 1)>{});
    } else if (NT >= 3 && groups > 2) {
      run(IntConst<(NT >= 3 ? 3 : 1)>{});
    } else if (NT >= 2 && groups > 1) {
      run(IntConst<(NT >= 2 ? 2 : 1)>{});
    } else {
      run(IntConst<1>{});
    }
  };
  // FC1's finish: the epilogue by warp pairs (fc1_store_by_pairs) through y. Two buffers: a region
  // of 16 x NS floats per warp in each, units alternate (a pair meets at the next unit's barrier
  // only after both have read this one). One buffer, or (RB = 0) one region of two 8-token groups
  // per warp, kPairRoundFloats: the pair meets before each write (the partner has read the
  // previous values).
  auto fc1_finish = [&](const PublishedUnit& u) {
    return [&, u](const auto& acc) {
      constexpr int kGroup = RB == 0 ? kPairRoundFloats : 16 * NS;
      constexpr int kRound = RB == 0 ? kPairRoundGroups : NT;
      fc1_store_by_pairs<ACT, NS, BM, kGroup, kRound, RB != 2>(
          a, s, mine(), s.y + y_buf * (kRowGroups * kGroup), u, __ldg(a.fc2_scale[rank_of()] + u.e),
          acc);
      if constexpr (RB == 2) y_buf ^= 1;
    };
  };

  // ---- phase 1: FC1 + activation + re-quantization ----------------------------------------
  PublishedUnit cur = nvfp4_pipe::take_unit(s.unit_q, s.unit_ready, upos);
  int b_tile = -1;
  while (cur.phase == 0) {
    if (cur.tileg != b_tile) {
      b_tile = cur.tileg;
      const int e = cur.e;
      Sync::sync();  // the previous tile's routes are no longer read
      if (tid < cur.live) {
        const volatile int* rl = reinterpret_cast<const volatile int*>(mine() + a.off_route) +
                                 (cur.tileg * BM + tid) * 3;
        const int sr = rl[0], tok = rl[1], k = rl[2];
        const u8* sb = a.base[sr];
        s.route_w[tid] = __ldg(
            reinterpret_cast<const float*>(sb + a.off_topk_w + tok * static_cast<u64>(K) * 4) + k);
        s.route_alpha[tid] =
            __fmul_rn(__ldg(reinterpret_cast<const float*>(sb + a.off_x_global) + tok),
                      __ldg(a.alpha1[rank_of()] + e));
      }
      Sync::sync();  // the tile's routes are in place before any pair's epilogue reads them
    }
    stream_unit(0, cur.sub_live<NS>(), fc1_finish(cur));
    cur = nvfp4_pipe::take_unit(s.unit_q, s.unit_ready, upos);
  }

  grid_barrier(kPhaseAfterFc1);

  // ---- phase 1.5: the FC2 operand (fc2_pool rows, written above) into the scratch ----------
  // The ring is idle here: every FC1 stage was consumed, and the producer copies FC2's first
  // stage only after TokensReady.
  decode_token_chunks<I, BM, EL, kThreads, CK, true>(
      mine() + a.off_token_f16, s.ring, s, total_tiles(), cta_in_rank(), nctas, [&](int row) {
        const u8* base = mine();
        return RowOperand{base + a.off_fc2_pool + static_cast<u64>(row) * a.pitch_fc2_pool,
                          base + a.off_fc2_sf + static_cast<u64>(row) * a.pitch_fc2_sf};
      });
  grid_barrier(kPhaseTokens);
  TokensReady::arrive();

  // ---- phase 2: FC2 into the source ranks' combine slots -----------------------------------
  // Each warp stores its own rows from registers: no CTA barrier but at a tile change (FP8
  // slots: the two 8-warp block barriers a unit). FC1's exchange region is free from here on; FP8
  // slots keep their amax rows there, two buffers that units alternate between.
  b_tile = -1;
  int amax_buf = 0;
  while (cur.phase == 1) {
    if (cur.tileg != b_tile) {
      b_tile = cur.tileg;
      Sync::sync();  // every warp has stored the previous tile's rows
      if (tid < cur.live) {
        const volatile int* rl = reinterpret_cast<const volatile int*>(mine() + a.off_route) +
                                 (cur.tileg * BM + tid) * 3;
        s.route_src[tid] = rl[0];
        s.route_tok[tid] = rl[1];
        s.route_k[tid] = rl[2];
      }
      Sync::sync();  // the tile's routes are in place before any warp stores
    }
    stream_unit(1, cur.sub_live<NS>(), [&](const auto& acc) {
      const float factor =
          __fmul_rn(__ldg(a.fc2_scale[rank_of()] + cur.e), __ldg(a.alpha2[rank_of()] + cur.e));
      if constexpr (FP8C) {
        fc2_store_fp8_from_registers<H, TMAX, NS>(a, s, s.y + amax_buf * kRowGroups * NS, cur.sub,
                                                  cur.sub_live<NS>(), cur.col, factor, acc);
        amax_buf ^= 1;
      } else {
        fc2_store_from_registers<H, TMAX, NS>(a, s, cur.sub, cur.sub_live<NS>(), cur.col, factor,
                                              acc);
      }
    });
    cur = nvfp4_pipe::take_unit(s.unit_q, s.unit_ready, upos);
  }

  nvfp4_moe::barrier_before_combine<R, Sync>(a, grid_counter(), cta_in_rank(), nctas, status,
                                             rank_of);

  // ---- phase 3: combine the rank's own tokens ----------------------------------------------
  nvfp4_moe::combine_rank_tokens<H, K, EL, R, TMAX, kThreads, FP8C>(
      a, mine(), rank_of(), min(s.src_tokens[rank_of()], a.out_rows[rank_of()]), cta_in_rank(),
      nctas);
}

}  // namespace megamoe::device
