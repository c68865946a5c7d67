#pragma once
// The simulated MoE layer: pre-dispatch on every source rank, per-expert FC1 / activation / FC2
// on the destination ranks, combine on the source ranks. S is float (Precision::kernel) or
// double (fp64, exact). side_lora_backward reuses the pre-dispatch and the per-expert front half.
#include <cstdint>
#include <vector>

#include "megamoe/config.hpp"
#include "megamoe/reference.hpp"
#include "reference/dispatch_plan.hpp"

namespace megamoe::reference::detail {

// Which of the kernel's roundings a precision mode keeps (docs/reference.md, "Precision modes").
struct RoundingPoints {
  bool bf16_inputs;    // x, adapters and dout rounded to bf16 on entry
  bool quantize_acts;  // x and the FC2 input quantized by the activation format
  bool round_slots;    // y rounded to the combine slot type
  bool round_output;   // out rounded to bf16
};
RoundingPoints rounding_points(Precision p);

// Adapters in S, transposed so that every contraction is a contiguous dot product.
template <class S>
struct LoraMatrices {
  S scale = 0;
  bool tied = false;
  std::int64_t rank = 0;
  std::vector<S> a1t, a3t;  // [r, H] (a3t empty when tied)
  std::vector<S> a1, a3;    // [H, r] (a3 empty when tied)
  std::vector<S> b1t, b3t;  // [E, I, r]
  std::vector<S> b1, b3;    // [E, r, I]
  std::vector<S> a2t;       // [E, r, I]
  std::vector<S> a2;        // [E, I, r]
  std::vector<S> b2, b2t;   // [r, H], [H, r]
};

// One expert's pool after FC1 and the activation (the part forward and backward share).
template <class S>
struct ExpertFront {
  std::vector<S> fc1;         // [P, 2I] gate then up, adapters included
  std::vector<S> act;         // [P, I] act(gate, up), before the route weight
  std::vector<S> weighted;    // [P, I] a = w * act, before quantization
  std::vector<S> fc2_in;      // [P, I] the quantized a = w * act (dequantized, no global scale)
  std::vector<S> fc2_factor;  // [P] FC2 input global scale times the W2 global scale
};

template <class S>
class Engine {
 public:
  Engine(const MoEConfig& config, const MoEInputs& inputs, const QuantizedWeights& weights,
         Precision precision, const std::vector<float>* fc2_input_scale, const LoraWeights* lora);

  MoEOutputs forward();
  std::vector<float> calibrate();  // kernel mode only

  // Shared with the backward.
  ExpertFront<S> expert_front(std::int64_t expert) const;

  const MoEConfig& config;
  const MoEInputs& inputs;
  const QuantizedWeights& weights;
  Precision precision;
  RoundingPoints points;
  DispatchPlan plan;
  std::int64_t H, I, E, N;
  int K;
  std::vector<S> x;        // [N, H] the activation as the expert ranks receive it (dequantized)
  std::vector<S> x_scale;  // [N] per-token nvfp4 global scale (1 otherwise)
  std::vector<S> x_in;     // [N, H] x after the bf16 rounding of entry (lora contractions)
  const std::vector<float>* fc2_scale;
  bool has_lora;
  LoraMatrices<S> lora;
  std::vector<S> u1, u3;  // [N, r] x·A1, x·A3 once per token (u3 empty when tied)

 private:
  void predispatch();
  void prepare_lora(const LoraWeights& l);
  ExpertFront<S> expert_front_impl(std::int64_t expert, bool quantize_fc2_in) const;
  void run_expert(std::int64_t expert, std::vector<S>& slots, std::vector<S>& lora_slots) const;
};

extern template class Engine<float>;
extern template class Engine<double>;

}  // namespace megamoe::reference::detail
