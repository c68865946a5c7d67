#pragma once
// The kernel layout of NVFP4 weights for the SM90 NVFP4 MegaMoE kernel (docs/nvfp4_kernel.md,
// "Weight layout"), as pure CPU functions: the CPU tests check them against an emulation of the
// device decode, and the GPU test of the weight transform kernel
// (sm90_nvfp4_weight_transform.cuh) checks its output against them byte for byte.
#include <cstdint>
#include <span>

namespace megamoe::runtime::nvfp4_layout {

// Bit positions of the fragment registers' elements in a lane's u32 of one k16 step (see
// kernels/megamoe/formats/nvfp4_fragment_decode.cuh): magnitude (3 bits) and sign, for a0..a3;
// the odd-k element of each register sits 16 bits higher.
inline constexpr int kMagnitudeBit[4] = {9, 6, 0, 3};
inline constexpr int kSignBit[4] = {15, 12, 13, 14};

// The scale byte b of the kernel layout: the f16 with bits (b << 7) equals scale * 2^7 exactly.
// 0 stays 0; the e4m3 NaN codes map to 0xFF (an f16 NaN).
std::uint8_t reencode_ue4m3(std::uint8_t ue4m3);

// Which source row feeds row r (0..15) of row group rg (0..3) of tile `tile`.
enum class Matrix : std::uint8_t {
  w13,  // tile = 32 intermediate columns: rg 0, 1 = gate rows, rg 2, 3 = the up rows
  w2,   // tile = 64 hidden rows, rg * 16 + r
};
std::int64_t source_row(Matrix m, std::int64_t intermediate, std::int64_t tile, int rg, int r);

// One expert's matrix [rows, k] (packed e2m1 [rows, k/2], row-major ue4m3 [rows, k/16]) ->
// the kernel streams: q (rows * k / 2 bytes) and sf (rows * k / 16 bytes).
// rows = 2I (w13) or H (w2); k = H (w13) or I (w2).
void encode_expert(Matrix m, std::int64_t intermediate, std::int64_t rows, std::int64_t k,
                   std::span<const std::uint8_t> packed, std::span<const std::uint8_t> sf,
                   std::span<std::uint8_t> q, std::span<std::uint8_t> q_sf);

// Byte offset in the q stream of the lane's 4-byte word for step `step` (0..7) of 128-k block
// `block` of row group (tile, rg); the scale bytes of that step for rows g and g + 8 are at
// sf_offset(...) and sf_offset(...) + 1.
std::int64_t word_offset(std::int64_t k, std::int64_t tile, int rg, std::int64_t block, int lane,
                         int step);
std::int64_t sf_offset(std::int64_t k, std::int64_t tile, int rg, std::int64_t block, int g,
                       int step);

}  // namespace megamoe::runtime::nvfp4_layout
