#pragma once
// Block sizes and the SM budget (docs/design.md, "Heuristics").
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "megamoe/config.hpp"

namespace megamoe {

// The token tile (BLOCK_M) of the fused kernels for a live token count per rank, from the
// expected tokens per expert T*R*K/E. Table in src/core/heuristics.cpp.
int get_block_m_for_mega_moe(const MoEConfig& config, std::int64_t num_tokens_per_rank);

// Every BLOCK_M the heuristic can choose for token counts 1..max_tokens_per_rank.
std::vector<int> reachable_block_ms(const MoEConfig& config);

// The largest token count of each reachable BLOCK_M regime, ascending; the last is
// max_tokens_per_rank. The planner sizes pools at these counts (worst cases grow with t inside
// a regime); GPU tests probe BLOCK_M - 1, BLOCK_M, BLOCK_M + 1 around them.
std::vector<std::int64_t> block_m_regime_ends(const MoEConfig& config);

// SM budget of the persistent kernels. set_num_sms(n > 0) pins the count; set_num_sms(0)
// returns to "all SMs minus headroom". Headroom comes from MEGAMOE_SM_HEADROOM, rounded up to
// an even number; out-of-range values are rejected with InvalidArgument.
void set_num_sms(int num_sms);
int get_num_sms();  // needs a GPU (reads the SM count)

// The pure rule behind get_num_sms, testable without a GPU.
int resolve_num_sms(int device_sms, int explicit_sms, std::optional<std::string_view> headroom_env);

}  // namespace megamoe
