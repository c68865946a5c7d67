#pragma once
// Thin wrappers over the SM90 PTX the self-test kernel needs: cluster identity, distributed
// shared memory and the programmatic-dependent-launch controls. Each asm names its operands
// exactly (NVRTC 13.0 was seen to crash on malformed inline PTX instead of reporting it).
#include "megamoe/common.cuh"

namespace megamoe::device::selftest {

MEGAMOE_DEVICE u32 cluster_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

MEGAMOE_DEVICE u32 cluster_size() {
  u32 n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}

// All threads of all blocks of the cluster arrive and wait; release/acquire order the shared
// memory writes before it with the remote reads after it.
MEGAMOE_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The address of `local` (a shared::cta pointer) in the shared memory of block `rank` of the
// cluster, as a shared::cluster address.
MEGAMOE_DEVICE u32 map_shared_to_rank(const void* local, u32 rank) {
  const u32 address = static_cast<u32>(__cvta_generic_to_shared(local));
  u32 remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
  return remote;
}

MEGAMOE_DEVICE float load_shared_cluster(u32 address) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(address) : "memory");
  return v;
}

// PDL: wait until the preceding grid on the stream has completed (and its writes are visible);
// a no-op when the kernel was launched without the PDL attribute.
MEGAMOE_DEVICE void wait_for_previous_grid() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// PDL: allow the next grid on the stream to start its prologue.
MEGAMOE_DEVICE void allow_next_grid() {
  asm volatile("griddepcontrol.launch_dependents;" :::);
}

}  // namespace megamoe::device::selftest
