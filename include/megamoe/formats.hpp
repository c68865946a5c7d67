#pragma once
// Bit-exact number formats and block quantization (docs/design.md, "Formats"). These CPU
// functions are the definition the kernels are tested against.
//
// Rounding is to nearest, ties to even, saturating at the format's largest finite value.
// NaN/Inf: see docs/design.md "Formats / non-finite inputs"; a non-finite input only ever
// affects the block (and, through a per-token global scale, the token) that holds it.
#include <cstdint>
#include <span>

#include "megamoe/types.hpp"

namespace megamoe::formats {

// ---- scalars -------------------------------------------------------------------------------
std::uint16_t bf16_from_float(float x);  // RNE; NaN stays NaN (quiet)
float bf16_to_float(std::uint16_t b);
float round_to_bf16(float x);  // bf16_to_float(bf16_from_float(x))

std::uint8_t e2m1_from_float(float x);  // 4-bit code in the low nibble; saturates at +-6
float e2m1_to_float(std::uint8_t nibble);

std::uint8_t e4m3_from_float(float x);  // e4m3fn; saturates at +-448; NaN -> 0x7F
float e4m3_to_float(std::uint8_t b);

std::uint8_t ue4m3_from_float(float x);  // e4m3 with the sign bit 0; x must be >= 0
float ue4m3_to_float(std::uint8_t b);

std::uint8_t ue8m0_from_float_ceil(float x);  // smallest 2^(s-127) >= x
float ue8m0_to_float(std::uint8_t s);

// ---- recipes (../shared/DESIGN.md §3) -------------------------------------------------------
inline constexpr float kE2m1Max = 6.0f;
inline constexpr float kE4m3Max = 448.0f;
inline constexpr int kNvfp4Block = 16;
inline constexpr int kMxfp4Block = 32;
inline constexpr int kFp8Block = 128;

// Largest |x| over the finite elements: NaN and +-Inf are skipped so that they cannot move a
// scale. Every amax in the recipes below is this one. 0 for an empty span.
float finite_abs_max(std::span<const float> x);
// amax / (448 * 6); 1.0 for an all-zero tensor so that zeros stay exact.
float nvfp4_global_scale(float amax);
// The UE4M3 block scale of the recipe: e4m3(block_amax / (6 * global)), clamped to [2^-9, 448].
std::uint8_t nvfp4_block_scale(float block_amax, float global_scale);
// UE8M0 scales: smallest power of two >= max(block_amax, 1e-4) / 6 (FP4) or / 448 (FP8).
std::uint8_t mxfp4_block_scale(float block_amax);
std::uint8_t fp8_pow2_block_scale(float block_amax);
// fp32 FP8 scale: block_amax / 448 (1.0 for an all-zero block).
float fp8_f32_block_scale(float block_amax);

// ---- block quantization of row-major matrices [rows, k] -------------------------------------
// Packed FP4 output is [rows, k/2] bytes, low nibble = even element. Scales are row-major
// [rows, k/block]. k must be a multiple of the block size.
void quantize_nvfp4(std::span<const float> x, std::int64_t rows, std::int64_t k, float global_scale,
                    std::span<std::uint8_t> packed, std::span<std::uint8_t> scales);
// Per-row global scales (activations: one per token), written to `global_scales[rows]`.
void quantize_nvfp4_per_row(std::span<const float> x, std::int64_t rows, std::int64_t k,
                            std::span<std::uint8_t> packed, std::span<std::uint8_t> scales,
                            std::span<float> global_scales);
void dequantize_nvfp4(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> scales,
                      std::span<const float> global_scales,  // size 1 (tensor) or rows
                      std::int64_t rows, std::int64_t k, std::span<float> out);

void quantize_mxfp4(std::span<const float> x, std::int64_t rows, std::int64_t k,
                    std::span<std::uint8_t> packed, std::span<std::uint8_t> scales);
void dequantize_mxfp4(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> scales,
                      std::int64_t rows, std::int64_t k, std::span<float> out);

// FP8 activations: 1x128 blocks, scales [rows, k/128] as f32 or ue8m0 bytes.
void quantize_fp8_1x128(std::span<const float> x, std::int64_t rows, std::int64_t k,
                        Fp8ScaleKind kind, std::span<std::uint8_t> q, std::span<float> scales_f32,
                        std::span<std::uint8_t> scales_ue8m0);
// FP8 weights: 128x128 blocks, scales [ceil(rows/128), k/128].
void quantize_fp8_128x128(std::span<const float> w, std::int64_t rows, std::int64_t k,
                          Fp8ScaleKind kind, std::span<std::uint8_t> q, std::span<float> scales_f32,
                          std::span<std::uint8_t> scales_ue8m0);
void dequantize_fp8(std::span<const std::uint8_t> q, std::int64_t rows, std::int64_t k,
                    int block_rows,  // 1 or 128
                    Fp8ScaleKind kind, std::span<const float> scales_f32,
                    std::span<const std::uint8_t> scales_ue8m0, std::span<float> out);

// ---- scale-factor layouts -----------------------------------------------------------------
// The 128x4 swizzled block-scaling layout (cuBLAS / TensorRT-LLM): rows padded to 128, scale
// columns padded to 4; padding bytes are written as 0.
std::int64_t swizzled_128x4_size(std::int64_t rows, std::int64_t cols);
std::int64_t swizzled_128x4_offset(std::int64_t row, std::int64_t col, std::int64_t cols);
void swizzle_128x4(std::span<const std::uint8_t> row_major, std::int64_t rows, std::int64_t cols,
                   std::span<std::uint8_t> out);
void unswizzle_128x4(std::span<const std::uint8_t> swizzled, std::int64_t rows, std::int64_t cols,
                     std::span<std::uint8_t> out);

}  // namespace megamoe::formats
