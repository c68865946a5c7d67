#pragma once
// The static description of one MoE layer as the kernels see it: shapes, formats, expert
// parallelism and options. Token count per call is a runtime value <= max_tokens_per_rank.
#include <cstdint>
#include <string>

#include "megamoe/types.hpp"

namespace megamoe {

struct MoEShape {
  std::int64_t hidden = 0;        // H
  std::int64_t intermediate = 0;  // I (per expert; FC1 produces 2I: gate rows then up rows)
  std::int64_t num_experts = 0;   // E, global
  int top_k = 0;                  // K
  friend bool operator==(const MoEShape&, const MoEShape&) = default;
};

// One of the families of docs/design.md §1, as a (weight, activation) format pair plus options.
struct MoEConfig {
  MoEShape shape;
  Format weight_format = Format::nvfp4;
  Format act_format = Format::nvfp4;
  Fp8ScaleKind fp8_scale = Fp8ScaleKind::f32;  // FP8 activations/weights only
  ActivationSpec activation{};
  int num_ranks = 1;                     // R; expert e lives on rank e / (E / R)
  std::int64_t max_tokens_per_rank = 0;  // T_max
  bool fp8_combine = false;              // combine slots in FP8 instead of BF16
  bool side_lora = false;                // training family with shared rank-r adapters
  int lora_rank = 128;

  std::int64_t experts_per_rank() const { return shape.num_experts / num_ranks; }
  // Field by field (floats as floats: a NaN clamp makes a config unequal to itself).
  friend bool operator==(const MoEConfig&, const MoEConfig&) = default;
};

// A short human-readable summary, e.g. "nvfp4xnvfp4 H=6144 I=3072 E=256 K=8 R=1 T=512".
std::string describe(const MoEConfig& config);

}  // namespace megamoe
