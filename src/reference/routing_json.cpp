// The routing of an MoEInputs as the PyTorch baseline reads it (reference.hpp, routing_json).
#include <cstdio>
#include <string>

#include "megamoe/error.hpp"
#include "megamoe/reference.hpp"

namespace megamoe::reference {

std::string routing_json(const MoEInputs& inputs, std::int64_t top_k) {
  const auto routes = static_cast<std::int64_t>(inputs.topk_idx.size());
  if (top_k < 1 || routes % top_k != 0 || inputs.topk_weights.size() != inputs.topk_idx.size()) {
    throw_invalid("routing_json", "topk_idx and topk_weights must hold N x top_k routes each",
                  std::to_string(inputs.topk_idx.size()) + " ids, " +
                      std::to_string(inputs.topk_weights.size()) + " weights, top_k " +
                      std::to_string(top_k));
  }
  std::string out = "{\"tokens\": " + std::to_string(routes / top_k) +
                    ", \"top_k\": " + std::to_string(top_k) + ", \"topk_idx\": [";
  for (std::int64_t i = 0; i < routes; ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(inputs.topk_idx[static_cast<std::size_t>(i)]);
  }
  out += "], \"topk_weights\": [";
  char number[32];
  for (std::int64_t i = 0; i < routes; ++i) {
    std::snprintf(number, sizeof number, "%s%.9g", i > 0 ? ", " : "",
                  static_cast<double>(inputs.topk_weights[static_cast<std::size_t>(i)]));
    out += number;
  }
  out += "]}";
  return out;
}

}  // namespace megamoe::reference
