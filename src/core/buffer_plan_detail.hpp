#pragma once
// Internals of plan_symm_buffer exposed for its tests and for the launch code that reads the
// plan.
#include <cstdint>

#include "megamoe/config.hpp"

namespace megamoe {

// Work-claim words per phase in the "sync" region: the most CTAs one rank may run (the kernel's
// kMaxClaimCtas, scheduler/nvfp4_claims.cuh; tests/cpu/test_nvfp4_claims.cpp checks they agree).
inline constexpr int kMaxWorkClaimCtas = 256;

// The most padded pool rows t live tokens per rank can need with token tile bm.
std::int64_t worst_case_pool_rows(const MoEConfig& config, std::int64_t t, int bm);

}  // namespace megamoe
