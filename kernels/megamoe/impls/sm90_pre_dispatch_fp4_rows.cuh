#pragma once
// FP4 activation pre-dispatch (NVFP4, MXFP4) with W = 1, 2 or 4 warps per token row
// (docs/pre_dispatch.md).
//
// Why not one CTA per row (sm90_pre_dispatch.cuh): with a thread per 32 elements, every thread
// pays the fixed costs (addresses, routes, padding loop) for 64 bytes of input, NVFP4 needs a
// CTA barrier for the row amax, and each block's fp64 bounds cost more than its encoding. Here
// a lane owns 16 consecutive elements (32 bytes: one NVFP4 block, half an MXFP4 block) per step,
// the row stays in registers (H = 7168, W = 1: 14 steps, 112 registers), every load is issued
// before any math, the row amax is a warp shuffle reduction (plus, for W > 1, one exchange
// through shared memory behind a named barrier of the row's warps), the block bounds come from
// fp32 fused multiply-adds (exact, see exact_codecs.cuh) and each step ends in one 8-byte store.
// W trades registers per lane (occupancy) against the per-row fixed costs: measured on the H200
// (bench/results/2026-11-29-pre-dispatch.md), W = 1 at H = 7168 runs only 12 warps per SM.
//
// Bitwise equal to the CPU quantizers, like the CTA kernel (same encoder, same recipe steps).
#include "megamoe/common.cuh"
#include "megamoe/formats/exact_codecs.cuh"
#include "megamoe/impls/sm90_pre_dispatch.cuh"
#include "megamoe/ptx/pdl.cuh"
#include "megamoe/ptx/vector_memory.cuh"

namespace megamoe::device {

inline constexpr int kFp4RowsWarpsPerCta = 4;  // 4 / W rows per CTA
inline constexpr int kFp4RowsMaxSteps = 16;    // 128 registers of row data per lane at most

namespace fp4_rows_detail {

MEGAMOE_DEVICE float bf16_bits_value(u32 magnitude16) {
  return __uint_as_float(magnitude16 << 16);
}

// The codes of 16 elements (8 pairs) as two words, element 2i in the low nibble of byte i.
MEGAMOE_DEVICE ptx::u32x2 encode16(const exact::E2m1Bf16x2Encoder& enc, const u32* pairs) {
  return ptx::u32x2{enc.pack_high(pairs), enc.pack_high(pairs + 4)};
}

}  // namespace fp4_rows_detail

// Warps W r .. W r + W - 1 of CTA b quantize row (4 / W) b + r; then every CTA clears its share
// of the padding routes.
template <int kHidden, int kTopK, int kFormat, int kWarpsPerRow, int kMaxTokens, int kNumExperts,
          bool kIdx64, bool kExpertScales>
__global__ void __launch_bounds__(32 * kFp4RowsWarpsPerCta)
    pre_dispatch_fp4_rows_kernel(const __grid_constant__ PreDispatchParams p) {
  constexpr int kThreads = 32 * kFp4RowsWarpsPerCta;
  constexpr int kW = kWarpsPerRow;
  constexpr int kRowsPerCta = kFp4RowsWarpsPerCta / kW;
  constexpr int kUnits = kHidden / 16;  // 16 elements, 32 input bytes, 8 output bytes each
  constexpr int kSteps = (kUnits + 32 * kW - 1) / (32 * kW);
  constexpr bool kNv = kFormat == kPreDispatchNvfp4;
  static_assert(kFormat == kPreDispatchNvfp4 || kFormat == kPreDispatchMxfp4, "FP4 only");
  static_assert(kW == 1 || kW == 2 || kW == 4, "1, 2 or 4 warps per row");
  static_assert(kHidden % 32 == 0, "H must be a multiple of 32");
  static_assert(kSteps <= kFp4RowsMaxSteps, "the row share of a lane must fit in registers");
  static_assert(kTopK >= 1 && kTopK <= 32, "top-k is published by one warp");

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int row_in_cta = tid / (32 * kW);
  const int warp_in_row = (tid / 32) % kW;
  const int row = static_cast<int>(blockIdx.x) * kRowsPerCta + row_in_cta;
  // Step s of this lane is unit (s W + warp_in_row) * 32 + lane: each warp load covers 1 KB.
  const int first_unit = warp_in_row * 32 + lane;

  // Inputs may come from the previous kernel, and the buffer may still be read by it.
  ptx::griddep_wait();
  if (blockIdx.x == 0 && tid == 0) *p.out_num_tokens = p.num_tokens;

  if (row < p.num_tokens) {  // uniform over the row's warps
    // All loads first: the whole row in flight at once.
    u32 x[kSteps][8];
    const u16* src = p.x + row * p.x_row_stride + first_unit * 16;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      ptx::u32x4 a{0u, 0u, 0u, 0u}, b{0u, 0u, 0u, 0u};
      if (kUnits % (32 * kW) == 0 || s + 1 < kSteps || 32 * kW * s + first_unit < kUnits) {
        a = ptx::load_global_nc_16(src + 512 * kW * s);
        b = ptx::load_global_nc_16(src + 512 * kW * s + 8);
      }
      x[s][0] = a.x, x[s][1] = a.y, x[s][2] = a.z, x[s][3] = a.w;
      x[s][4] = b.x, x[s][5] = b.y, x[s][6] = b.z, x[s][7] = b.w;
    }
    if (warp_in_row == 0) {
      pre_dispatch_detail::publish_routes<kTopK, kNumExperts, kIdx64, kExpertScales>(p, row, lane);
    }

    u8* out_row = p.out_x + row * p.out_x_pitch + first_unit * 8;
    u8* sf_row = p.out_sf + row * p.out_sf_pitch;
    u32 amax16[kSteps];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) amax16[s] = exact::bf16x16_finite_amax(x[s]);

    if constexpr (kNv) {
      u32 row16 = 0;
#pragma unroll
      for (int s = 0; s < kSteps; ++s) row16 = row16 > amax16[s] ? row16 : amax16[s];
#pragma unroll
      for (int o = 16; o >= 1; o >>= 1) {
        const u32 other = __shfl_xor_sync(0xFFFFFFFFu, row16, o);
        row16 = row16 > other ? row16 : other;
      }
      if constexpr (kW > 1) {
        // The row's warps meet at named barrier 1 + row_in_cta (0 is __syncthreads).
        __shared__ u32 row_amax[kRowsPerCta][kW];
        if (lane == 0) row_amax[row_in_cta][warp_in_row] = row16;
        // Constant barrier ids (a register id would reserve all 16 of the CTA).
        static_assert(kRowsPerCta <= 2, "named barriers 1 and 2");
        if (row_in_cta == 0) {
          asm volatile("bar.sync 1, %0;" ::"n"(32 * kW) : "memory");
        } else {
          asm volatile("bar.sync 2, %0;" ::"n"(32 * kW) : "memory");
        }
#pragma unroll
        for (int w = 0; w < kW; ++w) {
          const u32 other = row_amax[row_in_cta][w];
          row16 = row16 > other ? row16 : other;
        }
      }
      const float g = exact::nvfp4_global_from_amax(fp4_rows_detail::bf16_bits_value(row16));
      const float d = __fmul_rn(g, 6.0f);
      if (lane == 0 && warp_in_row == 0) p.out_global[row] = g;
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int unit = 32 * kW * s + first_unit;
        const u32 code = exact::nvfp4_block_code_hw(fp4_rows_detail::bf16_bits_value(amax16[s]), d);
        // The CPU divides each element by unit = scale * g; the encoder decides the same codes
        // from bounds on |x|.
        const float unit_scale = __fmul_rn(exact::ue4m3_value(code), g);
        exact::E2m1Bf16x2Encoder enc;
        if (unit_scale >= exact::kE2m1Fp32BoundsMinUnit) {
          exact::e2m1_bf16x2_bounds_fp32(unit_scale, enc.bound);
        } else {
          enc = exact::E2m1Bf16x2Encoder(exact::E2m1Divider(unit_scale));
        }
        const ptx::u32x2 codes = fp4_rows_detail::encode16(enc, x[s]);
        if (kUnits % (32 * kW) == 0 || s + 1 < kSteps || unit < kUnits) {
          ptx::store_global_8(out_row + 256 * kW * s, codes);
          sf_row[unit] = static_cast<u8>(code);
        }
      }
    } else {
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int unit = 32 * kW * s + first_unit;
        // An MXFP4 block is the units of lanes 2m and 2m + 1.
        const u32 other = __shfl_xor_sync(0xFFFFFFFFu, amax16[s], 1);
        const u32 block16 = amax16[s] > other ? amax16[s] : other;
        const u32 code = exact::pow2_block_code(fp4_rows_detail::bf16_bits_value(block16), 6.0f);
        // x * 2^(127-s) and x / 2^(s-127) are the same real, hence the same rounded quotient.
        exact::E2m1Bf16x2Encoder enc;
        exact::e2m1_bf16x2_bounds_pow2(static_cast<int>(code) - 127, enc.bound);
        const ptx::u32x2 codes = fp4_rows_detail::encode16(enc, x[s]);
        if (kUnits % (32 * kW) == 0 || s + 1 < kSteps || unit < kUnits) {
          ptx::store_global_8(out_row + 256 * kW * s, codes);
          if ((lane & 1) == 0) sf_row[unit / 2] = static_cast<u8>(code);
        }
      }
    }
  }

  pre_dispatch_detail::pad_routes<kTopK, kMaxTokens>(
      p, static_cast<i64>(blockIdx.x) * kThreads + tid, static_cast<i64>(gridDim.x) * kThreads);
  ptx::griddep_launch_dependents();
}

}  // namespace megamoe::device
