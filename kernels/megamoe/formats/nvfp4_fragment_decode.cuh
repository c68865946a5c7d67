#pragma once
// NVFP4 -> f16 decoding for the SM90 NVFP4 MegaMoE kernel (docs/nvfp4_kernel.md, "Decode").
//
// Every e2m1 x ue4m3 product is exact in f16 (at most 6 significant bits, 2^-10 .. 2688), so the
// tensor cores see the exact dequantized operands and only the f32 accumulation rounds.
//
// Weights (mma A operand): the transform stores, per lane and k16 step, one u32 holding the
// lane's 8 nibbles with their bits placed so that each f16x2 register of the fragment is one or
// two shifts and masks away:
//   a0 (row g,   k 2t, 2t+1):  magnitude bits 9..11, sign 15   (and +16 for the odd k)
//   a1 (row g+8, k 2t, 2t+1):  magnitude bits 6..8,  sign 12
//   a2 (row g,   k 2t+8, +9):  magnitude bits 0..2,  sign 13
//   a3 (row g+8, k 2t+8, +9):  magnitude bits 3..5,  sign 14
// With the magnitude at f16 bits 9..11 and the sign at 15, the f16 reads e2m1 x 2^-14 (the
// e = 0 code 1 gives the subnormal 2^-15). The UE4M3 block scale is stored re-encoded as the
// byte b with f16 bits (b << 7) = scale x 2^7 (normal for every scale), so the product
// e2m1 x 2^-14 x scale x 2^7 = value x 2^-7 is exact; the kernel multiplies its f32 results by
// 2^7 (exact).
#include "megamoe/common.cuh"
#include "megamoe/ptx/mma_sm90.cuh"

namespace megamoe::device::nvfp4 {

inline constexpr float kWeightUnscale = 128.0f;  // 2^7: undoes the operand scaling above

struct HalfFragment {
  u32 a0, a1, a2, a3;
};

// The lane's A fragment of one k16 step: `word` = 8 nibbles, `sp` = the f16x2 scales {row g,
// row g + 8} (each multiply broadcasts its half: no per-row scale register).
MEGAMOE_DEVICE HalfFragment decode_weight_word(u32 word, u32 sp) {
  constexpr u32 kFull = 0x8E008E00u;  // magnitude 9..11 + sign 15, both halves
  constexpr u32 kMag = 0x0E000E00u;
  constexpr u32 kSign = 0x80008000u;
  HalfFragment f;
  f.a0 = ptx::hmul2_by_lo(word & kFull, sp);
  f.a1 = ptx::hmul2_by_hi((word << 3) & kFull, sp);
  f.a2 = ptx::hmul2_by_lo(((word << 9) & kMag) | ((word << 2) & kSign), sp);
  f.a3 = ptx::hmul2_by_hi(((word << 6) & kMag) | ((word << 1) & kSign), sp);
  return f;
}

// f16x2 {s_g, s_g8} of one k16 step from a word of re-encoded scale bytes [g, g8, g, g8] of two
// steps (`odd` picks the second).
MEGAMOE_DEVICE u32 scale_pair(u32 scale_word, bool odd) {
  // Bytes [b_g, 0, b_g8, 0], then << 7 puts each b at bits 7..14 of its half.
  return ptx::prmt(scale_word, 0u, odd ? 0x4342u : 0x4140u) << 7;
}

// f16x2 {s, s} of a UE4M3 scale byte: exact (every e4m3 value is an f16); code 0x7F is NaN.
MEGAMOE_DEVICE u32 ue4m3_pair_f16(u32 code) {
  const unsigned short both = static_cast<unsigned short>(code | (code << 8));
  u32 d;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(d) : "h"(both));
  return d;
}

// 16 exact f16 products of one NVFP4 activation block (8 bytes of nibbles, one scale byte):
// the token operand of the MMA, laid out as 8 consecutive f16x2 (element order). Byte b of the
// block (elements 2b, 2b + 1) goes to bits 8..15 and 20..27 of one u32, where one shift by 1 puts
// both nibbles' magnitudes on f16 bits 9..11 of their half and one shift by 4 both signs on bit
// 15: e2m1 x 2^-14 (the e = 0 code reads as the subnormal 2^-15), times 2^14 and the scale,
// each product exact.
MEGAMOE_DEVICE void decode_activation_block(u32 lo, u32 hi, u32 scale_code, u32 (&out)[8]) {
  constexpr u32 kTwo14 = 0x74007400u;  // f16x2 {2^14, 2^14}
  const u32 s = ue4m3_pair_f16(scale_code);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const u32 byte = ptx::prmt(i < 4 ? lo : hi, 0u, 0x4440u | (i & 3));
    const u32 t = byte * 0x00100100u;  // the byte at bits 8..15 and 20..27
    const u32 bits = ((t << 1) & 0x0E000E00u) | ((t << 4) & 0x80008000u);
    out[i] = ptx::hmul2(ptx::hmul2(bits, kTwo14), s);
  }
}

}  // namespace megamoe::device::nvfp4
