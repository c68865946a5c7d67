// validate_config: the static rules of a MoEConfig (docs/api.md, "Configuration rules").
#include <cmath>
#include <string>

#include "core/validate.hpp"
#include "megamoe/error.hpp"

namespace megamoe::validate {
namespace {

std::string num(std::int64_t v) {
  return std::to_string(v);
}
std::string num(double v) {
  std::string s = std::to_string(v);
  return s;
}

void check_dim_size(std::int64_t v, std::string_view name, std::int64_t lo, std::int64_t hi) {
  if (v % kDimMultiple != 0) {
    throw_invalid(name, "must be a multiple of " + num(kDimMultiple), num(v));
  }
  if (v < lo || v > hi) {
    throw_invalid(name, "must be in [" + num(lo) + ", " + num(hi) + "]", num(v));
  }
}

bool known_format(Format f) {
  return f == Format::bf16 || f == Format::fp8 || f == Format::mxfp4 || f == Format::nvfp4;
}

// The (weight, activation) pairs with an sm90 design (docs/design.md §1).
bool supported_pair(Format w, Format a) {
  switch (w) {
    case Format::nvfp4:
      return a == Format::nvfp4;
    case Format::mxfp4:
      return a == Format::mxfp4 || a == Format::fp8 || a == Format::bf16;
    case Format::fp8:
      return a == Format::fp8;
    case Format::bf16:
      return a == Format::bf16;
  }
  return false;
}

void check_positive_finite(float v, std::string_view name) {
  if (!std::isfinite(v) || v <= 0.0f) throw_invalid(name, "must be finite and > 0", num(v));
}

void validate_activation(const ActivationSpec& a) {
  switch (a.kind) {
    case ActivationKind::swiglu:
    case ActivationKind::geglu:
      if (!std::isfinite(a.clamp) || a.clamp < 0.0f) {
        throw_invalid("config.activation.clamp", "must be finite and >= 0 (0 = no clamp)",
                      num(a.clamp));
      }
      return;
    case ActivationKind::swiglu_oai:
      if (a.clamp != 0.0f) {
        throw_invalid("config.activation.clamp",
                      "must be 0 with swiglu_oai (it clamps with oai_limit)", num(a.clamp));
      }
      check_positive_finite(a.oai_alpha, "config.activation.oai_alpha");
      check_positive_finite(a.oai_limit, "config.activation.oai_limit");
      return;
  }
  throw_invalid("config.activation.kind", "must be swiglu, geglu or swiglu_oai",
                num(static_cast<std::int64_t>(a.kind)));
}

void validate_side_lora(const MoEConfig& c) {
  if (c.weight_format != Format::bf16 && c.weight_format != Format::mxfp4) {
    throw_invalid("config.side_lora", "needs bf16 or mxfp4 base weights",
                  std::string(format_name(c.weight_format)));
  }
  if (c.act_format != Format::bf16) {
    throw_invalid("config.side_lora", "needs bf16 activations",
                  std::string(format_name(c.act_format)));
  }
  if (c.lora_rank % kLoraRankMultiple != 0 || c.lora_rank < kMinLoraRank ||
      c.lora_rank > kMaxLoraRank) {
    throw_invalid("config.lora_rank",
                  "must be a multiple of " + num(std::int64_t{kLoraRankMultiple}) + " in [" +
                      num(std::int64_t{kMinLoraRank}) + ", " + num(std::int64_t{kMaxLoraRank}) +
                      "]",
                  num(std::int64_t{c.lora_rank}));
  }
  if (c.fp8_combine) {
    throw_invalid("config.fp8_combine",
                  "is not supported with side_lora (the backward needs "
                  "the bf16 combine)");
  }
  if (c.activation.kind == ActivationKind::swiglu_oai) {
    throw_invalid("config.activation.kind", "side_lora supports swiglu and geglu",
                  std::string(activation_name(c.activation.kind)));
  }
}

}  // namespace

void validate_config(const MoEConfig& c) {
  check_dim_size(c.shape.hidden, "config.shape.hidden", kMinHidden, kMaxHidden);
  check_dim_size(c.shape.intermediate, "config.shape.intermediate", kMinIntermediate,
                 kMaxIntermediate);
  if (c.num_ranks != 1 && c.num_ranks != 2 && c.num_ranks != 4 && c.num_ranks != 8) {
    throw_invalid("config.num_ranks", "must be 1, 2, 4 or 8 (one NVLink domain)",
                  num(std::int64_t{c.num_ranks}));
  }
  const std::int64_t e = c.shape.num_experts;
  if (e < 1 || e > kMaxExperts) {
    throw_invalid("config.shape.num_experts", "must be in [1, " + num(kMaxExperts) + "]", num(e));
  }
  if (e % c.num_ranks != 0) {
    throw_invalid("config.shape.num_experts",
                  "must be divisible by num_ranks = " + num(std::int64_t{c.num_ranks}), num(e));
  }
  if (e / c.num_ranks > kMaxLocalExperts) {
    throw_invalid("config.shape.num_experts",
                  "experts per rank (num_experts / num_ranks) must be <= " + num(kMaxLocalExperts),
                  num(e / c.num_ranks));
  }
  const std::int64_t k_max = std::min<std::int64_t>(e, kMaxTopK);
  if (c.shape.top_k < 1 || c.shape.top_k > k_max) {
    throw_invalid("config.shape.top_k",
                  "must be in [1, min(num_experts, " + num(std::int64_t{kMaxTopK}) +
                      ") = " + num(k_max) + "]",
                  num(std::int64_t{c.shape.top_k}));
  }
  if (c.max_tokens_per_rank < 1 || c.max_tokens_per_rank > kMaxTokensPerRank) {
    throw_invalid("config.max_tokens_per_rank", "must be in [1, " + num(kMaxTokensPerRank) + "]",
                  num(c.max_tokens_per_rank));
  }
  if (!known_format(c.weight_format)) {
    throw_invalid("config.weight_format", "must be bf16, fp8, mxfp4 or nvfp4",
                  num(static_cast<std::int64_t>(c.weight_format)));
  }
  if (!known_format(c.act_format)) {
    throw_invalid("config.act_format", "must be bf16, fp8, mxfp4 or nvfp4",
                  num(static_cast<std::int64_t>(c.act_format)));
  }
  if (!supported_pair(c.weight_format, c.act_format)) {
    throw_invalid(
        "config.act_format",
        "unsupported (weights, activations) pair on sm90; supported: nvfp4 x nvfp4, "
        "mxfp4 x {mxfp4, fp8, bf16}, fp8 x fp8, bf16 x bf16",
        std::string(format_name(c.weight_format)) + " x " + std::string(format_name(c.act_format)));
  }
  if (c.fp8_scale != Fp8ScaleKind::f32 && c.fp8_scale != Fp8ScaleKind::ue8m0) {
    throw_invalid("config.fp8_scale", "must be f32 or ue8m0",
                  num(static_cast<std::int64_t>(c.fp8_scale)));
  }
  validate_activation(c.activation);
  if (c.side_lora) validate_side_lora(c);
}

}  // namespace megamoe::validate
