#pragma once
// Bulk copies global -> shared (the copy engine, cp.async.bulk) completing on an mbarrier, and
// the mbarrier operations that go with them (CTA scope).
#include "megamoe/common.cuh"

namespace megamoe::device::ptx {

MEGAMOE_DEVICE u32 smem_address(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// `count` arrivals complete a phase.
MEGAMOE_DEVICE void mbarrier_init(u64* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(count)
               : "memory");
}

// Makes initialized mbarriers visible to the copy engine; a CTA barrier must follow before use.
MEGAMOE_DEVICE void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival that also expects `bytes` of bulk-copy data before the phase completes.
MEGAMOE_DEVICE void mbarrier_arrive_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)),
               "r"(bytes)
               : "memory");
}

// One plain arrival (release semantics at CTA scope: this thread's earlier accesses first).
MEGAMOE_DEVICE void mbarrier_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(bar)) : "memory");
}

// Waits until the phase with parity `parity` of `bar` has completed.
MEGAMOE_DEVICE void mbarrier_wait_parity(u64* bar, u32 parity) {
  asm volatile(
      "{\n"
      "  .reg .pred done;\n"
      "wait_%=:\n"
      "  mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "  @!done bra wait_%=;\n"
      "}\n" ::"r"(smem_address(bar)),
      "r"(parity)
      : "memory");
}

// L2 policy of bytes read once per call and far more than L2 holds (the weights): their lines go
// first, so that L2 keeps what is read again within and across calls -- token rows, the FC1
// outputs, routes, barrier counters (bench/NOTES.md, v11). Only for bulk
// copies: a load's policy operand must sit in a uniform register, and in the register ring's
// FC2 loop ptxas moved it there again before every load (+24 instructions per two blocks).
MEGAMOE_DEVICE u64 l2_evict_first_policy() {
  u64 policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// L2 policy of bytes that bulk copies read many times within a call (the wide kernel's f16 token
// chunks: every 256-row unit of a tile reads them again while the weights stream past).
MEGAMOE_DEVICE u64 l2_evict_last_policy() {
  u64 policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Orders this thread's earlier generic-proxy global writes before later async-proxy (bulk copy)
// reads of them: the writer side of data that another CTA's copy engine reads after a barrier.
MEGAMOE_DEVICE void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// Orders this thread's earlier generic-proxy shared-memory writes before later async-proxy writes
// of the same bytes: a stage that held generic data (the wide kernel's results) is refilled by
// bulk copies once its consumers release it.
MEGAMOE_DEVICE void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global `src` to shared `dst`,
// L2 lines under `policy` (e.g. l2_evict_first_policy); completion counts against `bar`'s
// expected transaction bytes.
MEGAMOE_DEVICE void bulk_load(void* dst, const void* src, u32 bytes, u64* bar, u64 policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(smem_address(dst)),
      "l"(src), "r"(bytes), "r"(smem_address(bar)), "l"(policy)
      : "memory");
}

}  // namespace megamoe::device::ptx
