#pragma once
// The HBM read-bandwidth loop behind every weight-byte floor the benchmarks report: the library
// compiles it with NVRTC (src/runtime/bandwidth_probe.cpp) and the standalone probes with nvcc
// (bench/probes/layer_call_timing.cuh), so a probe's floor is the bench's. 8 independent 16-byte
// loads in flight per thread, bypassing L1; the xor keeps them alive.
namespace megamoe::device::selftest {

__global__ void read_bandwidth_kernel(const uint4* p, unsigned long long n, unsigned* sink) {
  unsigned acc = 0;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 7 * stride < n; i += 8 * stride) {
    unsigned v[8][4];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v[u][0]), "=r"(v[u][1]), "=r"(v[u][2]), "=r"(v[u][3])
                   : "l"(p + i + u * stride));
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= v[u][0] ^ v[u][1] ^ v[u][2] ^ v[u][3];
  }
  for (; i < n; i += stride) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) sink[0] = acc;
}

}  // namespace megamoe::device::selftest
