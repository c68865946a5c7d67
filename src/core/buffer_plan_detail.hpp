#pragma once
// Internals of plan_symm_buffer exposed for its tests.
#include <cstdint>

#include "megamoe/config.hpp"

namespace megamoe {

// The most padded pool rows t live tokens per rank can need with token tile bm.
std::int64_t worst_case_pool_rows(const MoEConfig& config, std::int64_t t, int bm);

}  // namespace megamoe
