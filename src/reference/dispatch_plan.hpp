#pragma once
// Argument validation and the simulated expert-parallel data path: which rank owns which tokens,
// the per-expert pools each destination rank gathers, and the combine-slot layout.
#include <cstdint>
#include <vector>

#include "megamoe/config.hpp"
#include "megamoe/reference.hpp"

namespace megamoe::reference::detail {

// One route as it sits in an expert pool: global token index (rank-major) and its top-k slot.
struct Route {
  std::int64_t token;
  int k;
};

struct DispatchPlan {
  std::int64_t num_tokens = 0;            // N, all ranks
  std::vector<std::int64_t> rank_offset;  // [R + 1]
  std::vector<int> token_rank;            // [N]
  // [E] by global expert id; expert e is computed by rank e / (E / R). Pools are filled per
  // destination rank in (source rank, token, k) order, as the dispatch delivers them.
  std::vector<std::vector<Route>> pools;
  std::vector<std::uint8_t> route_valid;  // [N, K]
  std::int64_t invalid_routes = 0;

  // Index of combine slot (token, k): each source rank r holds [K][T_r] slots.
  std::int64_t slot(std::int64_t token, int k, int top_k) const;
};

void validate_config(const MoEConfig& config);
// Checks the input sizes and the rank split; returns N.
std::int64_t validate_inputs(const MoEConfig& config, const MoEInputs& inputs);
void validate_weights(const MoEConfig& config, const QuantizedWeights& weights);
void validate_lora(const MoEConfig& config, const LoraWeights& lora);

DispatchPlan plan_dispatch(const MoEConfig& config, const MoEInputs& inputs);

}  // namespace megamoe::reference::detail
