#pragma once
// A named preset's shape (megamoe/presets.hpp) as a config of the tests: the default formats,
// `ranks` ranks and `t_max` tokens per rank.
#include <cstdint>

#include "megamoe/config.hpp"
#include "megamoe/presets.hpp"

namespace megamoe::test {

inline MoEConfig preset_config(const char* name, int ranks, std::int64_t t_max) {
  MoEConfig c;
  c.shape = find_preset(name).shape;
  c.num_ranks = ranks;
  c.max_tokens_per_rank = t_max;
  return c;
}

}  // namespace megamoe::test
