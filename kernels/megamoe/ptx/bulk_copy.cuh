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

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global `src` to shared `dst`;
// completion counts against `bar`'s expected transaction bytes.
MEGAMOE_DEVICE void bulk_load(void* dst, const void* src, u32 bytes, u64* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_address(dst)),
      "l"(src), "r"(bytes), "r"(smem_address(bar))
      : "memory");
}

}  // namespace megamoe::device::ptx
