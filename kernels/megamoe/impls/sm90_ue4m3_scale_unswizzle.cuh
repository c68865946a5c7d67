#pragma once
// 128x4-swizzled UE4M3 scale matrices -> row-major [mats, rows, cols], on the GPU (the CPU twin
// is formats::unswizzle_128x4). One thread per output byte: scales are 1/16 of the weight bytes
// and this runs once at load time.
#include "megamoe/common.cuh"
#include "megamoe/formats/swizzled_128x4.cuh"

namespace megamoe::device {

// Host mirror: runtime/nvfp4_weight_transform.cpp (same member order and types).
struct ScaleUnswizzleParams {
  const u8* swizzled;  // mats x the padded tiles of [rows, cols]
  u8* out;             // [mats, rows, cols]
  i64 mats, rows, cols;
};

__global__ void __launch_bounds__(256)
    ue4m3_scale_unswizzle_kernel(const __grid_constant__ ScaleUnswizzleParams p) {
  const i64 padded_cols = (p.cols + 3) / 4 * 4;
  const i64 per_mat = (p.rows + 127) / 128 * 128 * padded_cols;
  const i64 total = p.mats * p.rows * p.cols;
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const i64 col = i % p.cols;
    const i64 row = (i / p.cols) % p.rows;
    const i64 mat = i / (p.cols * p.rows);
    p.out[i] =
        p.swizzled[mat * per_mat + scale_layout::swizzled_128x4_offset(row, col, padded_cols)];
  }
}

}  // namespace megamoe::device
