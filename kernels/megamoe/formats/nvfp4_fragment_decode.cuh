#pragma once
// NVFP4 -> f16 decoding for the SM90 NVFP4 MegaMoE kernel (docs/nvfp4_kernel.md, "Decode").
//
// Every e2m1 x ue4m3 product is exact in f16 (at most 6 significant bits, 2^-10 .. 2688), so the
// tensor cores see the exact dequantized operands and only the f32 accumulation rounds.
//
// Weights (mma A operand): the transform stores, per lane and k16 step, one u32 holding the
// lane's 8 nibbles with their bits placed so that each f16x2 register of the fragment is a
// mask, a shift and a mask, or a mask, a multiply and a mask away:
//   a0 (row g,   k 2t, 2t+1):  magnitude bits 9..11, sign 15   (and +16 for the odd k)
//   a1 (row g+8, k 2t, 2t+1):  magnitude bits 6..8,  sign 12
//   a2 (row g,   k 2t+8, +9):  magnitude bits 0..2,  sign 13
//   a3 (row g+8, k 2t+8, +9):  magnitude bits 3..5,  sign 14
// With the magnitude at f16 bits 9..11 and the sign at 15, the f16 reads e2m1 x 2^-14 (the
// e = 0 code 1 gives the subnormal 2^-15). The UE4M3 block scale is stored re-encoded as the
// byte b with f16 bits (b << 7) = scale x 2^7 (normal for every scale), so the product
// e2m1 x 2^-14 x scale x 2^7 = value x 2^-7 is exact; the kernel multiplies its f32 results by
// 2^7 (exact).
// a2 and a3 need their magnitude and sign moved by different distances (9 and 2, 6 and 1): a
// multiply by the sum of both powers of two places the masked word twice at once. The copies do
// not overlap for a2 and overlap only at bits 20..22 for a3, whose carries stop at bit 23, below
// every kept bit; so the product, masked, equals the two shifts and masks (checked for all 256
// inputs of each mask): 9 placement instructions a word instead of 11.
#include "megamoe/common.cuh"
#include "megamoe/formats/exact_codecs.cuh"
#include "megamoe/formats/nvfp4_activation_decode.cuh"
#include "megamoe/ptx/mma_sm90.cuh"

namespace megamoe::device::nvfp4 {

inline constexpr float kWeightUnscale = 128.0f;  // 2^7: undoes the operand scaling above

// The bit map above, per fragment register a0..a3 (the weight transform places nibbles by it;
// runtime::nvfp4_layout keeps the host's copy, and the GPU test compares the two bytewise).
inline constexpr int kWeightMagnitudeBit[4] = {9, 6, 0, 3};
inline constexpr int kWeightSignBit[4] = {15, 12, 13, 14};

struct HalfFragment {
  u32 a0, a1, a2, a3;
};

// The lane's A fragment of one k16 step: `word` = 8 nibbles, `sp` = the f16x2 scales {row g,
// row g + 8} (each multiply broadcasts its half: no per-row scale register).
MEGAMOE_DEVICE HalfFragment decode_weight_word(u32 word, u32 sp) {
  constexpr u32 kFull = 0x8E008E00u;  // magnitude 9..11 + sign 15, both halves
  constexpr u32 kA2 = 0x20072007u;    // a2's magnitude 0..2 and sign 13, both halves
  constexpr u32 kA3 = 0x40384038u;    // a3's magnitude 3..5 and sign 14
  HalfFragment f;
  f.a0 = ptx::hmul2_by_half<0>(word & kFull, sp);
  f.a1 = ptx::hmul2_by_half<1>((word << 3) & kFull, sp);
  f.a2 = ptx::hmul2_by_half<0>(((word & kA2) * ((1u << 9) + (1u << 2))) & kFull, sp);
  f.a3 = ptx::hmul2_by_half<1>(((word & kA3) * ((1u << 6) + (1u << 1))) & kFull, sp);
  return f;
}

// f16x2 {s_g, s_g8} of one k16 step from a word of re-encoded scale bytes [g, g8, g, g8] of two
// steps (`odd` picks the second).
MEGAMOE_DEVICE u32 scale_pair(u32 scale_word, bool odd) {
  // Bytes [b_g, 0, b_g8, 0], then << 7 puts each b at bits 7..14 of its half.
  return ptx::prmt(scale_word, 0u, odd ? 0x4342u : 0x4140u) << 7;
}

// The kernel layout's scale byte b for a checkpoint UE4M3 byte: the f16 with bits (b << 7) is
// scale x 2^7 (normal for every nonzero scale, whose 3 mantissa bits land in f16 bits 7..9); the
// sign bit carries no meaning, 0 stays 0 and the NaN code 0x7F becomes 0xFF (an f16 NaN).
MEGAMOE_DEVICE u32 reencode_ue4m3(u32 code) {
  const u32 c = code & 0x7Fu;
  if (c == 0x7Fu) return 0xFFu;
  return static_cast<u32>(ptx::f32_to_f16_rn(exact::ue4m3_value(c) * 128.0f)) >> 7;
}

// 16 exact f16 products of one NVFP4 activation block (8 bytes of nibbles, one scale byte):
// the token operand of the MMA, laid out as 8 consecutive f16x2 (element order). The scale byte
// is read as the CPU formats read it (formats::ue4m3_to_float: the e4m3 table, so 0x7F is NaN)
// through the hardware e4m3 -> f16 conversion, both halves at once; each e2m1 x scale product
// (at most 6 significant bits, 2^-10 .. 2688 in magnitude) is exact in f16, so one f16x2
// multiply per pair rounds nothing (subnormal inputs kept: no .ftz).
MEGAMOE_DEVICE void decode_activation_block(u32 lo, u32 hi, u32 scale_code, u32 (&out)[8]) {
  const u32 s2 = ptx::e4m3x2_to_f16x2(ptx::prmt(scale_code, 0u, 0x0000u));  // {s, s}
  u32 e[4];
  decode_e2m1_word(lo, e);
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = ptx::hmul2(e[i], s2);
  decode_e2m1_word(hi, e);
#pragma unroll
  for (int i = 0; i < 4; ++i) out[4 + i] = ptx::hmul2(e[i], s2);
}

}  // namespace megamoe::device::nvfp4
