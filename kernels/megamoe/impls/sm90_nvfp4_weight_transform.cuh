#pragma once
// Checkpoint layout -> kernel layout of one NVFP4 matrix (W13 or W2) of every local expert, on
// the GPU (docs/nvfp4_kernel.md, "Weight layout"). The CPU twin is
// runtime::nvfp4_layout::encode_expert; the GPU test compares the two byte for byte.
//
// The kernel layout is cut into items of one 16-row group of a 64-row tile and one 128-k block:
// 1 KB of placed nibbles (one u32 per lane and k16 step) and 128 re-encoded scale bytes. One warp
// makes one item. Lane (g, t) = (lane / 4, lane % 4) writes the words of the mma fragment it will
// decode, whose 8 nibbles per k16 step come from rows g and g + 8 of the group only: it loads the
// block's 64 bytes of both rows (the four lanes of a g load the same lines) and takes byte t of
// every 4, so no data crosses lanes. A load-time kernel: straightforward, not tuned.
#include "megamoe/common.cuh"
#include "megamoe/formats/nvfp4_fragment_decode.cuh"
#include "megamoe/formats/swizzled_128x4.cuh"
#include "megamoe/ptx/vector_memory.cuh"

namespace megamoe::device {

inline constexpr int kWeightTransformWarps = 8;  // per CTA

// Host mirror: runtime/nvfp4_weight_transform.cpp (same member order and types).
struct Nvfp4WeightTransformParams {
  const u8* packed;  // [experts, rows, k / 2]: e2m1 pairs, element 2i in the low nibble
  const u8* scales;  // ue4m3 of each expert: row-major [rows, k / 16] or 128x4-swizzled tiles
  u8* q;             // [experts, rows * k / 2] placed nibbles (kernel layout)
  u8* q_scales;      // [experts, rows * k / 16] re-encoded scale bytes (kernel layout)
  i64 experts;
  i64 rows;                // 2I (W13) or H (W2); a multiple of 64
  i64 k;                   // H (W13) or I (W2); a multiple of 128
  i64 intermediate;        // I: where W13's up rows start
  i64 scale_expert_bytes;  // one expert's scales in the input layout
  i32 w13;                 // 1: W13 (tiles of 32 gate + 32 up rows), 0: W2 (64 rows)
  i32 swizzled;            // 1: input scales in the 128x4-swizzled layout
};

namespace weight_transform_detail {

// Which input row feeds row r (0..15) of row group rg (0..3) of 64-row tile `tile`
// (runtime::nvfp4_layout::source_row).
MEGAMOE_DEVICE i64 source_row(const Nvfp4WeightTransformParams& p, i64 tile, int rg, int r) {
  if (p.w13 == 0) return tile * 64 + rg * 16 + r;
  const i64 col = tile * 32 + (rg & 1) * 16 + r;
  return rg < 2 ? col : p.intermediate + col;
}

// Both nibbles of `byte` (elements 2t and 2t + 1 of fragment register `reg`) at their bits.
MEGAMOE_DEVICE u32 place_pair(u32 byte, int reg) {
  u32 word = 0;
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const u32 n = (byte >> (4 * hi)) & 0xFu;
    word |= (n & 7u) << (nvfp4::kWeightMagnitudeBit[reg] + 16 * hi);
    word |= (n >> 3) << (nvfp4::kWeightSignBit[reg] + 16 * hi);
  }
  return word;
}

MEGAMOE_DEVICE u32 byte_of(u32 word, int t) {
  return (word >> (8 * t)) & 0xFFu;
}

// The 64 bytes of 128-k block `block` of one input row, as 16 words.
MEGAMOE_DEVICE void load_row_block(const u8* row, i64 block, u32 (&w)[16]) {
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const ptx::u32x4 x = ptx::load_global_nc_16(row + block * 64 + v * 16);
    w[4 * v] = x.x;
    w[4 * v + 1] = x.y;
    w[4 * v + 2] = x.z;
    w[4 * v + 3] = x.w;
  }
}

MEGAMOE_DEVICE u32 scale_byte(const Nvfp4WeightTransformParams& p, const u8* expert_scales, i64 row,
                              i64 col) {
  const i64 cols = p.k / 16;
  const i64 at = p.swizzled != 0 ? scale_layout::swizzled_128x4_offset(row, col, (cols + 3) / 4 * 4)
                                 : row * cols + col;
  return nvfp4::reencode_ue4m3(expert_scales[at]);
}

}  // namespace weight_transform_detail

__global__ void __launch_bounds__(32 * kWeightTransformWarps)
    nvfp4_weight_transform_kernel(const __grid_constant__ Nvfp4WeightTransformParams p) {
  namespace d = weight_transform_detail;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int g = lane / 4, t = lane % 4;
  const i64 blocks = p.k / 128;
  const i64 groups = p.rows / 16;  // 4 row groups per 64-row tile
  const i64 items = p.experts * groups * blocks;
  const i64 warps = static_cast<i64>(gridDim.x) * kWeightTransformWarps;
  const i64 first = static_cast<i64>(blockIdx.x) * kWeightTransformWarps + threadIdx.x / 32;

  for (i64 item = first; item < items; item += warps) {
    const i64 block = item % blocks;
    const i64 group = (item / blocks) % groups;
    const i64 e = item / (blocks * groups);
    const i64 tile = group / 4;
    const int rg = static_cast<int>(group % 4);
    const i64 row_g = d::source_row(p, tile, rg, g);
    const i64 row_g8 = d::source_row(p, tile, rg, g + 8);

    const u8* expert = p.packed + e * p.rows * (p.k / 2);
    u32 a[16], b[16];  // rows g and g + 8: word m holds elements 8m .. 8m + 7 of the block
    d::load_row_block(expert + row_g * (p.k / 2), block, a);
    d::load_row_block(expert + row_g8 * (p.k / 2), block, b);

    // Step s covers block elements 16s .. 16s + 15: words 2s (k 0..7 of the step) and 2s + 1
    // (k 8..15); the lane's pair (2t, 2t + 1) of each is byte t. Registers a0..a3 of the
    // fragment: (row g, k lo), (row g + 8, k lo), (row g, k hi), (row g + 8, k hi).
    u32 words[8];
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      words[s] = d::place_pair(d::byte_of(a[2 * s], t), 0) |
                 d::place_pair(d::byte_of(b[2 * s], t), 1) |
                 d::place_pair(d::byte_of(a[2 * s + 1], t), 2) |
                 d::place_pair(d::byte_of(b[2 * s + 1], t), 3);
    }
    // runtime::nvfp4_layout::word_offset: steps 0..3 of every lane, then steps 4..7.
    u8* out = p.q + e * p.rows * (p.k / 2) + (group * blocks + block) * 1024;
    ptx::store_global_16(out + lane * 16, ptx::u32x4{words[0], words[1], words[2], words[3]});
    ptx::store_global_16(out + 512 + lane * 16, ptx::u32x4{words[4], words[5], words[6], words[7]});

    // sf_offset: byte g * 16 + step * 2 + h of the item, h = 0 for row g, 1 for row g + 8; the
    // lane's four bytes 4 * lane .. + 3 are steps 2t and 2t + 1 of its own rows.
    const u8* scales = p.scales + e * p.scale_expert_bytes;
    const i64 col = block * 8 + 2 * t;
    const u32 sf = d::scale_byte(p, scales, row_g, col) |
                   (d::scale_byte(p, scales, row_g8, col) << 8) |
                   (d::scale_byte(p, scales, row_g, col + 1) << 16) |
                   (d::scale_byte(p, scales, row_g8, col + 1) << 24);
    u8* out_sf = p.q_scales + e * p.rows * (p.k / 16) + (group * blocks + block) * 128;
    *reinterpret_cast<u32*>(out_sf + lane * 4) = sf;
  }
}

}  // namespace megamoe::device
