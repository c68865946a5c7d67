#pragma once
// 4-, 8- and 16-byte global loads and stores, with the cache behaviour each use needs.
#include "megamoe/common.cuh"

namespace megamoe::device::ptx {

struct u32x4 {
  u32 x, y, z, w;
};

struct u32x2 {
  u32 x, y;
};

// Read-only path for inputs that no thread of this grid writes. volatile: must stay after
// griddep_wait (a plain asm without a memory operand could be hoisted above it).
MEGAMOE_DEVICE u32x4 load_global_nc_16(const void* p) {
  u32x4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Streaming 16-byte load of data read exactly once by this grid (weights): skip L1.
MEGAMOE_DEVICE u32x4 load_stream_16(const void* p) {
  u32x4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 16-byte load through L2 (data written earlier in this launch by other CTAs or ranks).
MEGAMOE_DEVICE u32x4 load_16(const void* p) {
  u32x4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// 8-byte read-only load (inputs no thread of this grid writes); not volatile, so the compiler may
// batch it with its neighbours.
MEGAMOE_DEVICE void load_nc_8(const void* p, u32& lo, u32& hi) {
  asm("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(lo), "=r"(hi) : "l"(p));
}

// 8-byte load through L2 (data written earlier in this launch by other CTAs or ranks).
MEGAMOE_DEVICE void load_8(const void* p, u32& lo, u32& hi) {
  asm volatile("ld.global.cg.v2.u32 {%0, %1}, [%2];" : "=r"(lo), "=r"(hi) : "l"(p) : "memory");
}

// f32 load through L2 (see load_8).
MEGAMOE_DEVICE float load_f32_cg(const void* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
  return v;
}

MEGAMOE_DEVICE void store_global_16(void* p, u32x4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

MEGAMOE_DEVICE void store_global_8(void* p, u32x2 v) {
  asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y) : "memory");
}

}  // namespace megamoe::device::ptx
