#include "reference/dispatch_plan.hpp"

#include <cmath>
#include <string>

#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"
#include "reference/weight_decode.hpp"

namespace megamoe::reference::detail {
namespace {

int block_of(Format f) {
  switch (f) {
    case Format::nvfp4:
      return formats::kNvfp4Block;
    case Format::mxfp4:
      return formats::kMxfp4Block;
    case Format::fp8:
      return formats::kFp8Block;
    case Format::bf16:
      return 1;
  }
  return 1;
}

void require_multiple(const char* argument, std::int64_t value, int block, Format f,
                      const char* what) {
  if (value % block != 0) {
    throw_invalid(argument,
                  std::string("must be a multiple of ") + std::to_string(block) + " for " +
                      std::string(format_name(f)) + " " + what,
                  std::to_string(value));
  }
}

void require_size(const char* argument, std::size_t have, std::int64_t need, const char* shape) {
  if (static_cast<std::int64_t>(have) != need) {
    throw_invalid(argument,
                  std::string("must hold ") + shape + " = " + std::to_string(need) + " elements",
                  std::to_string(have));
  }
}

}  // namespace

std::int64_t DispatchPlan::slot(std::int64_t token, int k, int top_k) const {
  const int r = token_rank[static_cast<std::size_t>(token)];
  const std::int64_t off = rank_offset[static_cast<std::size_t>(r)];
  const std::int64_t t_r = rank_offset[static_cast<std::size_t>(r) + 1] - off;
  return off * top_k + k * t_r + (token - off);
}

void validate_config(const MoEConfig& c) {
  const MoEShape& s = c.shape;
  if (s.hidden <= 0) throw_invalid("config.shape.hidden", "must be > 0", std::to_string(s.hidden));
  if (s.intermediate <= 0) {
    throw_invalid("config.shape.intermediate", "must be > 0", std::to_string(s.intermediate));
  }
  if (s.num_experts <= 0) {
    throw_invalid("config.shape.num_experts", "must be > 0", std::to_string(s.num_experts));
  }
  if (s.top_k < 1 || s.top_k > s.num_experts) {
    throw_invalid("config.shape.top_k", "must be in [1, num_experts]", std::to_string(s.top_k));
  }
  if (c.num_ranks < 1 || s.num_experts % c.num_ranks != 0) {
    throw_invalid("config.num_ranks", "must be >= 1 and divide num_experts",
                  std::to_string(c.num_ranks));
  }
  if (c.side_lora) {
    if (c.weight_format != Format::bf16 && c.weight_format != Format::mxfp4) {
      throw_invalid("config.weight_format", "side-LoRA needs a bf16 or mxfp4 base",
                    std::string(format_name(c.weight_format)));
    }
    if (c.act_format != Format::bf16) {
      throw_invalid("config.act_format", "side-LoRA needs bf16 activations",
                    std::string(format_name(c.act_format)));
    }
    if (c.lora_rank < 1) {
      throw_invalid("config.lora_rank", "must be >= 1", std::to_string(c.lora_rank));
    }
  }
  // H and I are the reduction dims of FC1 and FC2 for both operands.
  require_multiple("config.shape.hidden", s.hidden, block_of(c.act_format), c.act_format,
                   "activations");
  require_multiple("config.shape.intermediate", s.intermediate, block_of(c.act_format),
                   c.act_format, "activations");
  require_multiple("config.shape.hidden", s.hidden, block_of(c.weight_format), c.weight_format,
                   "weights");
  require_multiple("config.shape.intermediate", s.intermediate, block_of(c.weight_format),
                   c.weight_format, "weights");
  if (c.fp8_combine) {
    require_multiple("config.shape.hidden", s.hidden, formats::kFp8Block, Format::fp8,
                     "combine slots (fp8_combine)");
  }
  const ActivationSpec& a = c.activation;
  if (!(a.clamp >= 0.0f) || !std::isfinite(a.clamp)) {
    throw_invalid("config.activation.clamp", "must be finite and >= 0 (0 = no clamp)",
                  std::to_string(a.clamp));
  }
  if (a.kind == ActivationKind::swiglu_oai) {
    if (!(a.oai_alpha > 0.0f) || !std::isfinite(a.oai_alpha)) {
      throw_invalid("config.activation.oai_alpha", "must be finite and > 0",
                    std::to_string(a.oai_alpha));
    }
    if (!(a.oai_limit > 0.0f) || !std::isfinite(a.oai_limit)) {
      throw_invalid("config.activation.oai_limit", "must be finite and > 0",
                    std::to_string(a.oai_limit));
    }
  }
}

std::int64_t validate_inputs(const MoEConfig& c, const MoEInputs& in) {
  const std::int64_t H = c.shape.hidden, K = c.shape.top_k;
  if (in.topk_idx.size() % static_cast<std::size_t>(K) != 0) {
    throw_invalid("inputs.topk_idx", "size must be a multiple of top_k (shape [N, K])",
                  std::to_string(in.topk_idx.size()));
  }
  const auto N = static_cast<std::int64_t>(in.topk_idx.size()) / K;
  require_size("inputs.x", in.x.size(), N * H, "[N, H]");
  require_size("inputs.topk_weights", in.topk_weights.size(), N * K, "[N, K]");
  const int R = c.num_ranks;
  if (in.rank_tokens.empty()) {
    if (N % R != 0) {
      throw_invalid("inputs.rank_tokens",
                    "may be empty only when N divides evenly over config.num_ranks",
                    "N = " + std::to_string(N));
    }
  } else {
    if (static_cast<std::int64_t>(in.rank_tokens.size()) != R) {
      throw_invalid("inputs.rank_tokens", "must have config.num_ranks entries",
                    std::to_string(in.rank_tokens.size()));
    }
    std::int64_t sum = 0;
    for (std::int64_t t : in.rank_tokens) {
      if (t < 0) throw_invalid("inputs.rank_tokens", "entries must be >= 0", std::to_string(t));
      sum += t;
    }
    if (sum != N) {
      throw_invalid("inputs.rank_tokens", "must sum to N = " + std::to_string(N),
                    std::to_string(sum));
    }
  }
  if (c.max_tokens_per_rank > 0) {
    for (int r = 0; r < R; ++r) {
      const std::int64_t t = in.rank_tokens.empty() ? N / R : in.rank_tokens[r];
      if (t > c.max_tokens_per_rank) {
        throw_invalid("inputs.rank_tokens",
                      "tokens per rank must be <= config.max_tokens_per_rank = " +
                          std::to_string(c.max_tokens_per_rank),
                      "rank " + std::to_string(r) + ": " + std::to_string(t));
      }
    }
  }
  return N;
}

void validate_weights(const MoEConfig& c, const QuantizedWeights& w) {
  const MoEShape& s = c.shape;
  validate_matrix(w.w13, "weights.w13", c.weight_format, c.fp8_scale, s.num_experts,
                  2 * s.intermediate, s.hidden);
  validate_matrix(w.w2, "weights.w2", c.weight_format, c.fp8_scale, s.num_experts, s.hidden,
                  s.intermediate);
}

void validate_lora(const MoEConfig& c, const LoraWeights& l) {
  const std::int64_t H = c.shape.hidden, I = c.shape.intermediate, E = c.shape.num_experts;
  const std::int64_t r = c.lora_rank;
  if (!std::isfinite(l.scale)) throw_invalid("lora.scale", "must be finite");
  require_size("lora.a1", l.a1.size(), H * r, "[H, r]");
  if (l.tied) {
    if (!l.a3.empty()) throw_invalid("lora.a3", "must be empty when lora.tied (A3 = A1)");
  } else {
    require_size("lora.a3", l.a3.size(), H * r, "[H, r]");
  }
  require_size("lora.b1", l.b1.size(), E * r * I, "[E, r, I]");
  require_size("lora.b3", l.b3.size(), E * r * I, "[E, r, I]");
  require_size("lora.a2", l.a2.size(), E * I * r, "[E, I, r]");
  require_size("lora.b2", l.b2.size(), r * H, "[r, H]");
}

DispatchPlan plan_dispatch(const MoEConfig& c, const MoEInputs& in) {
  DispatchPlan p;
  const int R = c.num_ranks, K = c.shape.top_k;
  const std::int64_t E = c.shape.num_experts, E_local = E / R;
  p.num_tokens = static_cast<std::int64_t>(in.topk_idx.size()) / K;
  p.rank_offset.assign(static_cast<std::size_t>(R) + 1, 0);
  for (int r = 0; r < R; ++r) {
    const std::int64_t t = in.rank_tokens.empty() ? p.num_tokens / R : in.rank_tokens[r];
    p.rank_offset[r + 1] = p.rank_offset[r] + t;
  }
  p.token_rank.resize(static_cast<std::size_t>(p.num_tokens));
  for (int r = 0; r < R; ++r) {
    for (std::int64_t t = p.rank_offset[r]; t < p.rank_offset[r + 1]; ++t) p.token_rank[t] = r;
  }
  p.route_valid.assign(in.topk_idx.size(), 0);
  for (std::size_t i = 0; i < in.topk_idx.size(); ++i) {
    const std::int64_t e = in.topk_idx[i];
    if (e >= 0 && e < E) {
      p.route_valid[i] = 1;
    } else if (e != -1) {
      ++p.invalid_routes;
    }
  }
  // Each destination rank scans what every source rank sends it, in source-rank order.
  p.pools.resize(static_cast<std::size_t>(E));
  for (int dst = 0; dst < R; ++dst) {
    for (int src = 0; src < R; ++src) {
      for (std::int64_t t = p.rank_offset[src]; t < p.rank_offset[src + 1]; ++t) {
        for (int k = 0; k < K; ++k) {
          const std::size_t i = static_cast<std::size_t>(t * K + k);
          if (!p.route_valid[i]) continue;
          const std::int64_t e = in.topk_idx[i];
          if (e / E_local == dst) p.pools[static_cast<std::size_t>(e)].push_back({t, k});
        }
      }
    }
  }
  return p;
}

}  // namespace megamoe::reference::detail
