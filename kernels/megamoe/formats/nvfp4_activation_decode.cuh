#pragma once
// NVFP4 activations (natural element order) -> exact f16 pairs, before the block scale: the token
// operand of the SM90 NVFP4 MegaMoE kernels (nvfp4::decode_activation_block). Host-compilable
// (tests/cpu/test_nvfp4_activation_decode.cpp checks every byte of nibbles against the e2m1
// values).
//
// Every e2m1 magnitude is an f16 whose low byte is zero (0, 0.5, 1, 1.5, 2, 3, 4, 6), so one byte
// permute looks up four elements' high bytes in an 8-byte table indexed by the magnitude nibbles
// (sign bit masked off: a permute selector nibble with bit 3 set would replicate a byte's sign
// instead), a second interleaves them with zero low bytes into two f16x2, and the two elements'
// signs of a register (nibble bit 3, 12 bits apart in the word as in the register) reach bits 15
// and 31 with one multiply by 2^a + 2^(a + 12): the copies land on disjoint bits, so no carry
// touches a kept one. 21 instructions a word of 8 elements against ~90 through f32.
#include "megamoe/common.cuh"

namespace megamoe::device::nvfp4 {

// f16 high bytes of the e2m1 magnitudes 0..7: table bytes [0..3] and [4..7].
inline constexpr u32 kE2m1HighBytesLo = 0x3E3C3800u;  // 0, 0.5, 1, 1.5
inline constexpr u32 kE2m1HighBytesHi = 0x46444240u;  // 2, 3, 4, 6

// out[j] = f16x2 {e2m1(element 2 j), e2m1(element 2 j + 1)} (element i at bits 4 i .. 4 i + 3 of
// w), exact; -0 for the negative zero code.
MEGAMOE_DEVICE void decode_e2m1_word(u32 w, u32 (&out)[4]) {
  const u32 w2 = w >> 16;
  const u32 hb_lo = __byte_perm(kE2m1HighBytesLo, kE2m1HighBytesHi, w & 0x7777u);
  const u32 hb_hi = __byte_perm(kE2m1HighBytesLo, kE2m1HighBytesHi, w2 & 0x7777u);
  // Signs: bits 3 and 7 -> 15 and 31 (x 2^12 + 2^24), bits 11 and 15 -> 15 and 31 (x 2^4 + 2^16).
  constexpr u32 kSigns = 0x80008000u;
  out[0] = __byte_perm(hb_lo, 0u, 0x1404u) | (((w & 0x88u) * 0x01001000u) & kSigns);
  out[1] = __byte_perm(hb_lo, 0u, 0x3424u) | (((w & 0x8800u) * 0x00010010u) & kSigns);
  out[2] = __byte_perm(hb_hi, 0u, 0x1404u) | (((w2 & 0x88u) * 0x01001000u) & kSigns);
  out[3] = __byte_perm(hb_hi, 0u, 0x3424u) | (((w2 & 0x8800u) * 0x00010010u) & kSigns);
}

}  // namespace megamoe::device::nvfp4
