#pragma once
// The JIT self-test kernel: small, but it exercises what the real kernels rely on — a template
// shape, bf16 I/O, more than 48 KB of dynamic shared memory, thread-block clusters with
// distributed shared memory, and programmatic dependent launch.
//
// The input is cut into tiles of kTile = kThreads * kItemsPerThread elements, tile b owned by
// block b. Block b stages its tile as fp32 in dynamic shared memory; blocks form clusters of
// C = cluster size along x, and the block of cluster rank r reads the staged tile of rank
// (r + 1) % C. With p = b - r + (r + 1) % C:
//   out[b * kTile + j] = bf16_rn(fma(alpha, x[b * kTile + j], x[p * kTile + j]))
// where x elements at or beyond n read as 0, and only indices < n are written. Without a real
// cluster launch (C = 1) the partner is the block itself, so a test sees the difference.
#include <cuda_bf16.h>

#include "megamoe/common.cuh"
#include "megamoe/selftest/cluster_ptx.cuh"

namespace megamoe::device::selftest {

template <int kThreads, int kItemsPerThread>
__global__ void __launch_bounds__(kThreads)
    cluster_axpy_kernel(__nv_bfloat16* out, const __nv_bfloat16* x, float alpha, int n) {
  constexpr int kTile = kThreads * kItemsPerThread;
  extern __shared__ float staged[];  // kTile floats

  // The input may be the previous kernel's output: wait for it before the first read.
  wait_for_previous_grid();
  const long long base = static_cast<long long>(blockIdx.x) * kTile;
#pragma unroll 4
  for (int i = 0; i < kItemsPerThread; ++i) {
    const int j = i * kThreads + static_cast<int>(threadIdx.x);
    staged[j] = base + j < n ? __bfloat162float(x[base + j]) : 0.0f;
  }
  cluster_sync();
  // Every block has staged its tile; dependents may now start their prologue.
  allow_next_grid();

  const u32 rank = cluster_rank();
  const u32 partner = (rank + 1) % cluster_size();
  const u32 remote = map_shared_to_rank(staged, partner);
#pragma unroll 4
  for (int i = 0; i < kItemsPerThread; ++i) {
    const int j = i * kThreads + static_cast<int>(threadIdx.x);
    const float other = load_shared_cluster(remote + static_cast<u32>(j) * 4u);
    if (base + j < n) out[base + j] = __float2bfloat16_rn(__fmaf_rn(alpha, staged[j], other));
  }
  // The partner reads our shared memory: stay resident until every block is done with it.
  cluster_sync();
}

}  // namespace megamoe::device::selftest
