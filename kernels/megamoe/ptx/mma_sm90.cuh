#pragma once
// Warp-level tensor-core and scalar PTX used by the NVFP4 MegaMoE kernel (sm_90a).
#include "megamoe/common.cuh"

namespace megamoe::device::ptx {

// Byte permute: result byte i = byte sel_i of {b:a} (prmt.b32 default mode).
MEGAMOE_DEVICE u32 prmt(u32 a, u32 b, u32 sel) {
  u32 d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// f16x2 product, round to nearest; subnormal inputs and results are kept (no .ftz).
MEGAMOE_DEVICE u32 hmul2(u32 a, u32 b) {
  u32 d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// a * {half HALF of b, the same}: one half of b (0 = low, 1 = high) broadcast to both lanes.
// ptxas folds the broadcast into the multiply's operand selector (.H0_H0 / .H1_H1), so a pair of
// scales costs one register and no extra instruction per use.
template <int HALF>
MEGAMOE_DEVICE u32 hmul2_by_half(u32 a, u32 b) {
  static_assert(HALF == 0 || HALF == 1, "a half is 0 (low) or 1 (high)");
  unsigned short lo, hi;
  asm("mov.b32 {%0, %1}, %2;" : "=h"(lo), "=h"(hi) : "r"(b));  // a register split: no instruction
  const unsigned short h = HALF == 0 ? lo : hi;
  u32 d;
  asm("{\n .reg .b32 s;\n mov.b32 s, {%2, %2};\n mul.rn.f16x2 %0, %1, s;\n}"
      : "=r"(d)
      : "r"(a), "h"(h));
  return d;
}

// Two e4m3 codes (bits 0..7 and 8..15 of `codes`) -> f16x2, exactly (the hardware conversion;
// 0x7F / 0xFF are NaN, codes from 0x80 negative).
MEGAMOE_DEVICE u32 e4m3x2_to_f16x2(u32 codes) {
  u32 d;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}"
      : "=r"(d)
      : "r"(codes));
  return d;
}

// D += A * B, m16n8k16, A row-major f16 (4 regs), B column-major f16 (2 regs), f32 accumulate.
MEGAMOE_DEVICE void mma_m16n8k16_f16(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                     u32 b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

MEGAMOE_DEVICE u16 f32_to_bf16_rn(float x) {
  u16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
}

MEGAMOE_DEVICE u16 f32_to_f16_rn(float x) {
  u16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
}

MEGAMOE_DEVICE float bf16_to_f32(u32 bits16) {
  return __uint_as_float(bits16 << 16);
}

// This CTA's x index, read anew each call (volatile: not merged with other reads).
MEGAMOE_DEVICE int ctaid_x() {
  int v;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
  return v;
}

// This thread's index in the CTA, read anew each call (volatile): index math derived from it is
// not hoisted out of a hot loop and held across it in registers.
MEGAMOE_DEVICE int tid_x() {
  int v;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v));
  return v;
}

MEGAMOE_DEVICE u64 globaltimer_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Counter operations of the barriers. .sys scope: peers may be other GPUs (NCCL provider).
// An arrival without a reply; after a fence.acq_rel.sys, a release pattern (several arrivals share
// one fence).
MEGAMOE_DEVICE void red_add_relaxed_sys(u32* p, u32 v) {
  asm volatile("red.relaxed.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

MEGAMOE_DEVICE u32 load_relaxed_sys(const u32* p) {
  u32 v;
  asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

MEGAMOE_DEVICE u32 load_acquire_sys(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

MEGAMOE_DEVICE void fence_acq_rel_sys() {
  asm volatile("fence.acq_rel.sys;" ::: "memory");
}

// .gpu scope: enough when every participant and every byte it orders belong to one GPU (one rank
// driven by one launch), and cheaper than .sys.
MEGAMOE_DEVICE void red_add_release_gpu(u32* p, u32 v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

MEGAMOE_DEVICE u32 load_relaxed_gpu(const u32* p) {
  u32 v;
  asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

MEGAMOE_DEVICE u32 load_acquire_gpu(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

}  // namespace megamoe::device::ptx
