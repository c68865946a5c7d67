#pragma once
// Activation pre-dispatch (docs/pre_dispatch.md): bf16 tokens + routing -> the input region of
// the symmetric buffer, quantized to FP8 (1x128), MXFP4 or NVFP4 (per-token global scale).
//
// One CTA per token row; each thread owns one group of contiguous elements (32 for FP4, 16 for
// FP8), read with 16-byte loads and written with one 16-byte store. The whole row stays in
// registers, so the NVFP4 per-token amax needs one CTA reduction and no second read. After its
// row, every CTA marks its share of the padding rows [T, T_max) of the routing metadata.
//
// Bitwise equal to the CPU quantizers of src/core/formats/ (see formats/exact_codecs.cuh).
#include "megamoe/common.cuh"
#include "megamoe/formats/exact_codecs.cuh"
#include "megamoe/ptx/pdl.cuh"
#include "megamoe/ptx/vector_memory.cuh"

namespace megamoe::device {

// Values of the kFormat template argument (the host launcher writes them as numbers).
inline constexpr int kPreDispatchFp8 = 0;
inline constexpr int kPreDispatchMxfp4 = 1;
inline constexpr int kPreDispatchNvfp4 = 2;

struct PreDispatchParams {
  const u16* x;                // bf16 [T, H]
  i64 x_row_stride;            // elements
  const void* topk_idx;        // i32 or i64 [T, K]
  i64 idx_row_stride;          // elements
  const float* topk_weights;   // [T, K]
  i64 weight_row_stride;       // elements
  const float* expert_scales;  // [E] or null
  u8* out_x;                   // "x"
  i64 out_x_pitch;             // bytes between rows
  u8* out_sf;                  // "x_sf"
  i64 out_sf_pitch;            // bytes between rows
  float* out_global;           // "x_global" (NVFP4 only)
  i32* out_idx;                // "topk_idx"
  float* out_weights;          // "topk_weights"
  i64 out_route_pitch;         // elements between rows of out_idx / out_weights
  i32* out_num_tokens;         // "num_tokens"
  u32* error_count;            // "error_count"
  i32 num_tokens;              // T (live rows)
};

template <int kFormat>
struct PreDispatchTraits {
  static constexpr bool kFp4 = kFormat != kPreDispatchFp8;
  static constexpr int kGroup = kFp4 ? 32 : 16;  // elements per thread: 16 output bytes either way
};

// Threads per CTA: one per group, rounded up to whole warps.
template <int kHidden, int kFormat>
inline constexpr int kPreDispatchThreads = (kHidden / PreDispatchTraits<kFormat>::kGroup + 31) /
                                           32 * 32;

namespace pre_dispatch_detail {

// Packs 4 e4m3 bytes. kHw: the sm89+ conversion instruction, with its NaN bytes rewritten to
// the CPU's 0x7F (it rounds and saturates like the CPU otherwise).
template <bool kHw>
MEGAMOE_DEVICE u32 pack_e4m3x4(const float* q) {
  if constexpr (kHw) {
    u16 lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(q[1]), "f"(q[0]));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(q[3]), "f"(q[2]));
    u32 word = static_cast<u32>(lo) | (static_cast<u32>(hi) << 16);
    const u32 nan_bytes = __vcmpeq4(word & 0x7F7F7F7Fu, 0x7F7F7F7Fu);
    return (word & ~nan_bytes) | (0x7F7F7F7Fu & nan_bytes);
  } else {
    return exact::e4m3_code(q[0]) | (exact::e4m3_code(q[1]) << 8) | (exact::e4m3_code(q[2]) << 16) |
           (exact::e4m3_code(q[3]) << 24);
  }
}

// Routing metadata of one live row: masked, out-of-range and repeated ids become -1 with weight
// 0; the out-of-range and repeated ones are counted (one atomic per CTA). A repeat of an expert
// id within the row keeps its first occurrence: the MoE kernels' pool bound counts one route per
// expert and token (docs/api.md, section 3.2), so a repeat would overflow it. Run by warp 0 in
// full.
template <int kTopK, int kNumExperts, bool kIdx64, bool kExpertScales>
MEGAMOE_DEVICE void publish_routes(const PreDispatchParams& p, int row, int lane) {
  static_assert(kTopK <= 32, "one lane per route");
  i64 id = -1;
  float w = 0.0f;
  if (lane < kTopK) {
    if constexpr (kIdx64) {
      id = static_cast<const i64*>(p.topk_idx)[row * p.idx_row_stride + lane];
    } else {
      id = static_cast<const i32*>(p.topk_idx)[row * p.idx_row_stride + lane];
    }
    w = p.topk_weights[row * p.weight_row_stride + lane];
  }
  const bool in_range = lane < kTopK && id >= 0 && id < kNumExperts;
  const i32 kept = in_range ? static_cast<i32>(id) : -1;
  bool repeat = false;
#pragma unroll
  for (int j = 0; j + 1 < kTopK; ++j) {
    const i32 earlier = __shfl_sync(0xFFFFFFFFu, kept, j);
    repeat |= j < lane && in_range && earlier == kept;
  }
  const bool valid = in_range && !repeat;
  const bool bad = lane < kTopK && ((!in_range && id != -1) || repeat);
  if (lane < kTopK) {
    float out_w = 0.0f;
    if (valid) {
      out_w = w;
      if constexpr (kExpertScales) out_w = __fmul_rn(w, p.expert_scales[id]);
    }
    p.out_idx[row * p.out_route_pitch + lane] = valid ? kept : -1;
    p.out_weights[row * p.out_route_pitch + lane] = out_w;
  }
  const u32 bad_lanes = __ballot_sync(0xFFFFFFFFu, bad);
  if (lane == 0 && bad_lanes != 0) atomicAdd(p.error_count, static_cast<u32>(__popc(bad_lanes)));
}

// Routing metadata of the padding rows [T, T_max): id -1, weight 0. Grid-strided: this thread
// is `thread` of `threads`.
template <int kTopK, int kMaxTokens>
MEGAMOE_DEVICE void pad_routes(const PreDispatchParams& p, i64 thread, i64 threads) {
  const i64 entries = (static_cast<i64>(kMaxTokens) - p.num_tokens) * kTopK;
  const i64 base = static_cast<i64>(p.num_tokens) * kTopK;
  for (i64 e = thread; e < entries; e += threads) {
    const i64 r = (base + e) / kTopK;
    const i64 k = (base + e) % kTopK;
    p.out_idx[r * p.out_route_pitch + k] = -1;
    p.out_weights[r * p.out_route_pitch + k] = 0.0f;
  }
}

}  // namespace pre_dispatch_detail

// Loads one thread's group of a row: kGroup / 8 16-byte loads (zeros for idle threads).
template <int kGroup>
MEGAMOE_DEVICE void load_group(const PreDispatchParams& p, int row, int tid, bool active,
                               u32 (&packed)[kGroup / 2]) {
  const u16* src = p.x + row * p.x_row_stride + tid * kGroup;
#pragma unroll
  for (int i = 0; i < kGroup / 8; ++i) {
    ptx::u32x4 q{0u, 0u, 0u, 0u};
    if (active) q = ptx::load_global_nc_16(src + 8 * i);
    packed[4 * i + 0] = q.x;
    packed[4 * i + 1] = q.y;
    packed[4 * i + 2] = q.z;
    packed[4 * i + 3] = q.w;
  }
}

// Quantizes one row held in registers (packed bf16 pairs) and stores it. `amax_slots` is the
// shared scratch of the NVFP4 row reduction, one float per warp.
template <int kHidden, int kFormat, bool kUe8m0Scales, bool kHwE4m3>
MEGAMOE_DEVICE void quantize_row(const PreDispatchParams& p, int row, int tid, bool active,
                                 const u32* packed, float* amax_slots) {
  constexpr int kGroup = PreDispatchTraits<kFormat>::kGroup;
  constexpr int kWarps = kPreDispatchThreads<kHidden, kFormat> / 32;
  const int lane = tid & 31;
  float v[kGroup];
#pragma unroll
  for (int i = 0; i < kGroup / 2; ++i) {
    // Little endian: the even element is the low half.
    v[2 * i] = __uint_as_float(packed[i] << 16);
    v[2 * i + 1] = __uint_as_float(packed[i] & 0xFFFF0000u);
  }
  u8* out_row = p.out_x + row * p.out_x_pitch;
  u8* sf_row = p.out_sf + row * p.out_sf_pitch;
  ptx::u32x4 out;

  if constexpr (kFormat == kPreDispatchNvfp4) {
    // Two blocks of 16 per thread; the per-token global scale needs the amax of the whole row.
    float bamax[2];
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      u32 acc = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc = exact::bf16x2_finite_amax(acc, packed[8 * b + i]);
      bamax[b] = exact::bf16x2_amax_value(acc);
    }
    float amax = exact::amax2(bamax[0], bamax[1]);
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) {
      amax = exact::amax2(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    }
    if (lane == 0) amax_slots[tid / 32] = amax;
    __syncthreads();
    amax = amax_slots[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) amax = exact::amax2(amax, amax_slots[w]);

    const float g = exact::nvfp4_global_from_amax(amax);
    u32 words[4];
    u32 codes[2];
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      codes[b] = exact::nvfp4_block_code(bamax[b], g);
      // The CPU divides each element by denom = scale * g; the encoder decides the same codes
      // from bounds on |x| (no division per element).
      const exact::E2m1Divider denom(__fmul_rn(exact::ue4m3_value(codes[b]), g));
      const exact::E2m1Bf16x2Encoder enc(denom);
      words[2 * b] = enc.pack(packed + 8 * b);
      words[2 * b + 1] = enc.pack(packed + 8 * b + 4);
    }
    out = ptx::u32x4{words[0], words[1], words[2], words[3]};
    if (active) {
      *reinterpret_cast<u16*>(sf_row + 2 * tid) = static_cast<u16>(codes[0] | (codes[1] << 8));
      if (tid == 0) p.out_global[row] = g;
    }
  } else if constexpr (kFormat == kPreDispatchMxfp4) {
    u32 acc = 0;
#pragma unroll
    for (int i = 0; i < kGroup / 2; ++i) acc = exact::bf16x2_finite_amax(acc, packed[i]);
    const float bamax = exact::bf16x2_amax_value(acc);
    const u32 code = exact::pow2_block_code(bamax, 6.0f);
    // x * 2^(127-s) and x / 2^(s-127) are the same real, hence the same rounded quotient.
    const exact::E2m1Bf16x2Encoder enc(
        exact::E2m1Divider(exact::exp2_exact(static_cast<int>(code) - 127)));
    u32 words[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) words[j] = enc.pack(packed + 4 * j);
    out = ptx::u32x4{words[0], words[1], words[2], words[3]};
    if (active) sf_row[tid] = static_cast<u8>(code);
  } else {
    // FP8: a 1x128 block spans 8 consecutive threads (8 | 32, so never across warps).
    u32 acc = 0;
#pragma unroll
    for (int i = 0; i < kGroup / 2; ++i) acc = exact::bf16x2_finite_amax(acc, packed[i]);
    float bamax = exact::bf16x2_amax_value(acc);
#pragma unroll
    for (int o = 4; o >= 1; o >>= 1) {
      bamax = exact::amax2(bamax, __shfl_xor_sync(0xFFFFFFFFu, bamax, o));
    }
    float q[kGroup];
    if constexpr (kUe8m0Scales) {
      const u32 code = exact::pow2_block_code(bamax, 448.0f);
      const float inv = exact::ue8m0_reciprocal(code);
#pragma unroll
      for (int i = 0; i < kGroup; ++i) q[i] = __fmul_rn(v[i], inv);
      if (active && (tid & 7) == 0) sf_row[tid / 8] = static_cast<u8>(code);
    } else {
      const float s = exact::fp8_f32_scale(bamax);
#pragma unroll
      for (int i = 0; i < kGroup; ++i) q[i] = __fdiv_rn(v[i], s);
      if (active && (tid & 7) == 0) reinterpret_cast<float*>(sf_row)[tid / 8] = s;
    }
    u32 words[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) words[j] = pre_dispatch_detail::pack_e4m3x4<kHwE4m3>(q + 4 * j);
    out = ptx::u32x4{words[0], words[1], words[2], words[3]};
  }
  if (active) ptx::store_global_16(out_row + 16 * tid, out);
}

// CTA b quantizes row b when b < T (the launcher gives at least one CTA per row: measured faster
// on the H200 than a persistent grid that prefetches the next row), then clears its share of the
// padding routes.
template <int kHidden, int kTopK, int kFormat, bool kUe8m0Scales, bool kHwE4m3, int kMaxTokens,
          int kNumExperts, bool kIdx64, bool kExpertScales>
__global__ void __launch_bounds__(kPreDispatchThreads<kHidden, kFormat>)
    pre_dispatch_kernel(const __grid_constant__ PreDispatchParams p) {
  using Traits = PreDispatchTraits<kFormat>;
  constexpr int kGroup = Traits::kGroup;
  constexpr int kGroups = kHidden / kGroup;
  constexpr int kThreads = kPreDispatchThreads<kHidden, kFormat>;
  constexpr int kWarps = kThreads / 32;
  static_assert(kHidden % kGroup == 0, "H must be a multiple of the thread group");
  static_assert(kFormat != kPreDispatchFp8 || kHidden % 128 == 0, "FP8 blocks are 1x128");
  static_assert(kTopK >= 1 && kTopK <= 32, "top-k is published by one warp");
  static_assert(kThreads <= 1024, "one CTA holds one row");

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int stride = static_cast<int>(gridDim.x);
  const bool active = tid < kGroups;
  __shared__ float amax_slots[kWarps];

  // Inputs may come from the previous kernel, and the buffer may still be read by it.
  ptx::griddep_wait();

  if (blockIdx.x == 0 && tid == 0) *p.out_num_tokens = p.num_tokens;

  const int row = static_cast<int>(blockIdx.x);
  if (row < p.num_tokens) {
    u32 packed[kGroup / 2];
    load_group<kGroup>(p, row, tid, active, packed);
    if (tid < 32) {
      pre_dispatch_detail::publish_routes<kTopK, kNumExperts, kIdx64, kExpertScales>(p, row, lane);
    }
    quantize_row<kHidden, kFormat, kUe8m0Scales, kHwE4m3>(p, row, tid, active, packed, amax_slots);
  }

  pre_dispatch_detail::pad_routes<kTopK, kMaxTokens>(
      p, static_cast<i64>(blockIdx.x) * kThreads + tid, static_cast<i64>(stride) * kThreads);
  ptx::griddep_launch_dependents();
}

}  // namespace megamoe::device
