#include "megamoe/config.hpp"

namespace megamoe {

std::string describe(const MoEConfig& c) {
  std::string s =
      std::string(format_name(c.weight_format)) + "x" + std::string(format_name(c.act_format));
  if (c.side_lora) s += "+lora" + std::to_string(c.lora_rank);
  s += " H=" + std::to_string(c.shape.hidden) + " I=" + std::to_string(c.shape.intermediate) +
       " E=" + std::to_string(c.shape.num_experts) + " K=" + std::to_string(c.shape.top_k) +
       " R=" + std::to_string(c.num_ranks) + " T=" + std::to_string(c.max_tokens_per_rank) +
       " act=" + std::string(activation_name(c.activation.kind));
  return s;
}

}  // namespace megamoe
