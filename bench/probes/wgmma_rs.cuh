#pragma once
// wgmma with the A operand from registers, for the standalone probes (mma_rate_probe.cu,
// prefill_core_probe.cu, prefill_stream_probe.cu): f16 inputs, f32 accumulators, B from shared
// memory through a no-swizzle descriptor. A K-major B of 8 x 8 core matrices takes the K-direction
// core-matrix stride as its leading byte offset and the N-direction stride as its stride byte
// offset (bench/NOTES.md, eighteenth session: relative L2 0 against mma.sync).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace wgmma_probe {

using u32 = uint32_t;
using u64 = uint64_t;

__device__ __forceinline__ u64 make_desc(u32 saddr, u32 lbo, u32 sbo) {
  u64 d = 0;
  d |= static_cast<u64>((saddr >> 4) & 0x3FFF);
  d |= static_cast<u64>((lbo >> 4) & 0x3FFF) << 16;
  d |= static_cast<u64>((sbo >> 4) & 0x3FFF) << 32;
  return d;  // base offset 0, layout 0 (no swizzle)
}

template <int N>
struct Acc {
  float v[N / 2];
};

__device__ __forceinline__ void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int W>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(W) : "memory");
}

// The tensor cores read a register A operand until the wait_group that ends its group; the
// compiler sees it consumed when the instruction issues and may reuse its registers at once. An
// empty asm that reads and writes the four registers, placed after that wait, keeps them
// unchanged until then (bench/NOTES.md, thirty-first session, runs 267-268: without it the next
// group's decode overwrote the operands of the group still in flight, and the sums were wrong).
__device__ __forceinline__ void keep_a_live(u32& a0, u32& a1, u32& a2, u32& a3) {
  asm volatile("" : "+r"(a0), "+r"(a1), "+r"(a2), "+r"(a3));
}
// The same for G fragments of registers a0..a3 (the kernels' nvfp4::HalfFragment).
template <class Fragment, int G>
__device__ __forceinline__ void keep_live(Fragment (&f)[G]) {
#pragma unroll
  for (int i = 0; i < G; ++i) keep_a_live(f[i].a0, f[i].a1, f[i].a2, f[i].a3);
}

template <int N>
__device__ __forceinline__ void wgmma_rs(Acc<N>& d, u32 a0, u32 a1, u32 a2, u32 a3, u64 desc);

template <>
__device__ __forceinline__ void wgmma_rs<8>(Acc<8>& d, u32 a0, u32 a1, u32 a2, u32 a3, u64 desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, 1, 1, "
      "1, 0;"
      : "+f"(d.v[0]), "+f"(d.v[1]), "+f"(d.v[2]), "+f"(d.v[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
}
template <>
__device__ __forceinline__ void wgmma_rs<16>(Acc<16>& d, u32 a0, u32 a1, u32 a2, u32 a3, u64 desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, "
      "{%8,%9,%10,%11}, %12, 1, 1, 1, 0;"
      : "+f"(d.v[0]), "+f"(d.v[1]), "+f"(d.v[2]), "+f"(d.v[3]), "+f"(d.v[4]), "+f"(d.v[5]),
        "+f"(d.v[6]), "+f"(d.v[7])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
}
template <>
__device__ __forceinline__ void wgmma_rs<24>(Acc<24>& d, u32 a0, u32 a1, u32 a2, u32 a3, u64 desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n24k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}, "
      "{%12,%13,%14,%15}, %16, 1, 1, 1, 0;"
      : "+f"(d.v[0]), "+f"(d.v[1]), "+f"(d.v[2]), "+f"(d.v[3]), "+f"(d.v[4]), "+f"(d.v[5]),
        "+f"(d.v[6]), "+f"(d.v[7]), "+f"(d.v[8]), "+f"(d.v[9]), "+f"(d.v[10]), "+f"(d.v[11])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
}
template <>
__device__ __forceinline__ void wgmma_rs<32>(Acc<32>& d, u32 a0, u32 a1, u32 a2, u32 a3, u64 desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"
      "%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, 1, 1, 1, 0;"
      : "+f"(d.v[0]), "+f"(d.v[1]), "+f"(d.v[2]), "+f"(d.v[3]), "+f"(d.v[4]), "+f"(d.v[5]),
        "+f"(d.v[6]), "+f"(d.v[7]), "+f"(d.v[8]), "+f"(d.v[9]), "+f"(d.v[10]), "+f"(d.v[11]),
        "+f"(d.v[12]), "+f"(d.v[13]), "+f"(d.v[14]), "+f"(d.v[15])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
}

// m64n128k16: 64 accumulators a thread (operand list generated; the form of the three above).
template <>
__device__ __forceinline__ void wgmma_rs<128>(Acc<128>& d, u32 a0, u32 a1, u32 a2, u32 a3,
                                              u64 desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
      "}, {%64,%65,%66,%67}, %68, 1, 1, 1, 0;"
      : "+f"(d.v[0]), "+f"(d.v[1]), "+f"(d.v[2]), "+f"(d.v[3]), "+f"(d.v[4]), "+f"(d.v[5]),
        "+f"(d.v[6]), "+f"(d.v[7]), "+f"(d.v[8]), "+f"(d.v[9]), "+f"(d.v[10]), "+f"(d.v[11]),
        "+f"(d.v[12]), "+f"(d.v[13]), "+f"(d.v[14]), "+f"(d.v[15]), "+f"(d.v[16]), "+f"(d.v[17]),
        "+f"(d.v[18]), "+f"(d.v[19]), "+f"(d.v[20]), "+f"(d.v[21]), "+f"(d.v[22]), "+f"(d.v[23]),
        "+f"(d.v[24]), "+f"(d.v[25]), "+f"(d.v[26]), "+f"(d.v[27]), "+f"(d.v[28]), "+f"(d.v[29]),
        "+f"(d.v[30]), "+f"(d.v[31]), "+f"(d.v[32]), "+f"(d.v[33]), "+f"(d.v[34]), "+f"(d.v[35]),
        "+f"(d.v[36]), "+f"(d.v[37]), "+f"(d.v[38]), "+f"(d.v[39]), "+f"(d.v[40]), "+f"(d.v[41]),
        "+f"(d.v[42]), "+f"(d.v[43]), "+f"(d.v[44]), "+f"(d.v[45]), "+f"(d.v[46]), "+f"(d.v[47]),
        "+f"(d.v[48]), "+f"(d.v[49]), "+f"(d.v[50]), "+f"(d.v[51]), "+f"(d.v[52]), "+f"(d.v[53]),
        "+f"(d.v[54]), "+f"(d.v[55]), "+f"(d.v[56]), "+f"(d.v[57]), "+f"(d.v[58]), "+f"(d.v[59]),
        "+f"(d.v[60]), "+f"(d.v[61]), "+f"(d.v[62]), "+f"(d.v[63])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
}

// Host side: relative L2 distance of y from x (-1 where x is all zero), how the probes compare
// a wgmma form's sums with mma.sync's.
inline double rel_l2(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    den += static_cast<double>(x[i]) * x[i];
  }
  return den > 0 ? std::sqrt(num / den) : -1.0;
}

}  // namespace wgmma_probe
