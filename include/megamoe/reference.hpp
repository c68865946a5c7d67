#pragma once
// The CPU oracle: an MoE layer computed the way the kernels compute it (docs/reference.md is the
// numerics contract), with expert parallelism simulated over R virtual ranks, the side-LoRA
// training layer (forward and backward), and seeded input generators for tests, demo and bench.
//
// Everything is host memory in plain std::vector. Tokens of all ranks are stacked rank-major:
// rank r owns rows [offset_r, offset_r + T_r) of x / topk_idx / topk_weights.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "megamoe/config.hpp"
#include "megamoe/types.hpp"

namespace megamoe::reference {

// kernel: fp32 accumulation and every rounding of the kernels (bf16 x, quantized activations,
//         quantized FC2 input, bf16 / fp8 combine slots, bf16 output).
// fp64:   the same quantization points (x and FC2-input quantization by the activation format),
//         but double accumulation and activations and no rounding of y or out.
// exact:  no rounding at all except the given weights: x, a and y stay double. This is the
//         differentiable function the side-LoRA gradients are checked against.
enum class Precision : std::uint8_t { kernel, fp64, exact };

struct MoEInputs {
  // [N, H] bf16 activations held as float; kernel and fp64 modes round them to bf16 first (the
  // kernels receive bf16), exact mode uses them as they are. to_bf16_bits() gives the bytes.
  std::vector<float> x;
  std::vector<std::int64_t> topk_idx;  // [N, K]; -1 = masked; other ids outside [0, E) counted
  std::vector<float> topk_weights;     // [N, K]
  // Tokens of each rank (size R, sum N). Empty: N / R each (N must divide).
  std::vector<std::int64_t> rank_tokens;
};

// E stacked matrices [rows, cols] (cols = the reduction dim K) in one format, plain layout:
// nvfp4 / mxfp4: `packed` [E, rows, cols/2] (low nibble = even element), `scales` [E, rows,
//   cols/16 or cols/32] (ue4m3 / ue8m0), nvfp4 also `global_scales` [E];
// fp8: `packed` [E, rows, cols] e4m3, 128x128 block scales [E, ceil(rows/128), cols/128] in
//   `scales_f32` or `scales` (ue8m0) by `fp8_scale`;
// bf16: `bf16` [E, rows, cols].
struct QuantizedMatrix {
  Format format = Format::bf16;
  Fp8ScaleKind fp8_scale = Fp8ScaleKind::f32;
  std::int64_t experts = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> packed;
  std::vector<std::uint8_t> scales;
  std::vector<float> scales_f32;
  std::vector<float> global_scales;
  std::vector<std::uint16_t> bf16;
};

struct QuantizedWeights {
  QuantizedMatrix w13;  // [E, 2I, H]: gate rows 0..I-1, then up rows
  QuantizedMatrix w2;   // [E, H, I]
};

struct ForwardOptions {
  Precision precision = Precision::kernel;
  // nvfp4 activations only: the per-expert global scale of the FC2 input, [E] (global ids).
  // calibrate_fc2_input_scales() makes realistic values.
  std::vector<float> fc2_input_scale;
};

struct MoEOutputs {
  std::vector<double> out;              // [N, H]; kernel mode: the bf16 values
  std::vector<std::uint16_t> out_bf16;  // [N, H]; kernel mode only
  std::int64_t invalid_routes = 0;      // ids outside [0, E) other than -1
};

MoEOutputs moe_forward(const MoEConfig& config, const MoEInputs& inputs,
                       const QuantizedWeights& weights, const ForwardOptions& options = {});

// amax / (448 * 6) of each expert's FC2 input a = w * act(...) over the routes it receives,
// computed in kernel mode; 1.0 for experts without routes. [E].
std::vector<float> calibrate_fc2_input_scales(const MoEConfig& config, const MoEInputs& inputs,
                                              const QuantizedWeights& weights);

// ---- side-LoRA (docs/design.md §4) ---------------------------------------------------------
// Adapters are bf16 values held as float (kernel mode rounds them to bf16 first).
struct LoraWeights {
  float scale = 1.0f;     // s
  bool tied = false;      // A3 = A1: `a3` must be empty and dA3 is folded into dA1
  std::vector<float> a1;  // [H, r]
  std::vector<float> a3;  // [H, r]
  std::vector<float> b1;  // [E, r, I]
  std::vector<float> b3;  // [E, r, I]
  std::vector<float> a2;  // [E, I, r]
  std::vector<float> b2;  // [r, H]
};

struct LoraGradients {
  std::vector<double> dx;             // [N, H]
  std::vector<double> dtopk_weights;  // [N, K]; 0 for masked routes
  std::vector<double> da1, da3;       // [H, r]; tied: da1 is the total, da3 empty
  std::vector<double> db1, db3;       // [E, r, I]
  std::vector<double> da2;            // [E, I, r]
  std::vector<double> db2;            // [r, H]
  std::int64_t invalid_routes = 0;
};

// config.side_lora must be set; weights bf16 or mxfp4, activations bf16.
MoEOutputs side_lora_forward(const MoEConfig& config, const MoEInputs& inputs,
                             const QuantizedWeights& weights, const LoraWeights& lora,
                             Precision precision = Precision::kernel);
// dout: [N, H], the gradient of the loss with respect to `out` (kernel mode rounds it to bf16).
LoraGradients side_lora_backward(const MoEConfig& config, const MoEInputs& inputs,
                                 const QuantizedWeights& weights, const LoraWeights& lora,
                                 std::span<const float> dout,
                                 Precision precision = Precision::kernel);

// ---- generators (seeded, reproducible, multithreaded where it matters) ---------------------
// zipf: the popularity ranks follow a seeded permutation of the experts. zipf_by_id: expert i is
// the (i + 1)-th most popular, so with expert parallelism rank 0 holds the hottest experts and the
// last rank the coldest (ranks unevenly loaded, as real routers leave them without rebalancing).
enum class RoutingSkew : std::uint8_t { uniform, zipf, zipf_by_id };

struct RoutingOptions {
  RoutingSkew skew = RoutingSkew::uniform;
  double zipf_exponent = 1.2;    // popularity of the i-th most popular expert ~ 1 / i^s
  double masked_fraction = 0.0;  // each route independently set to -1 with this probability
};

// Top-k distinct experts per token (uniform, or Zipf-skewed over a seeded permutation of the
// experts or in expert order), weights = softmax of standard-normal logits over the k routes. Fills
// topk_idx and topk_weights for `num_tokens` tokens.
void random_routing(const MoEConfig& config, std::int64_t num_tokens, const RoutingOptions& options,
                    std::uint64_t seed, MoEInputs& inputs);
// [rows, cols] standard-normal values times `stddev`, rounded to bf16.
std::vector<float> random_bf16(std::int64_t rows, std::int64_t cols, float stddev,
                               std::uint64_t seed);
// x and routing for num_ranks * tokens_per_rank tokens.
MoEInputs random_inputs(const MoEConfig& config, std::int64_t tokens_per_rank,
                        const RoutingOptions& routing, std::uint64_t seed);
// Ragged batches from inputs of `tokens_per_rank` tokens on every rank (random_inputs): rank r
// keeps its first counts[r] tokens (0 = an idle rank); rank_tokens = counts.
MoEInputs first_tokens_of_each_rank(const MoEConfig& config, const MoEInputs& inputs,
                                    std::int64_t tokens_per_rank,
                                    std::span<const std::int64_t> counts);
// The routing of `inputs` as one JSON object, the exchange format of the PyTorch baseline
// (bench/torch_baseline.py): {"tokens": N, "top_k": K, "topk_idx": [N K ints, -1 = masked],
// "topk_weights": [N K floats]}. Floats are written with 9 significant digits, so they read
// back to the same fp32 values.
std::string routing_json(const MoEInputs& inputs, std::int64_t top_k);

enum class WeightInit : std::uint8_t {
  gaussian,      // N(0, 1/cols) in fp32, quantized by the recipes (per-expert global scales)
  random_codes,  // random valid codes and scales of a similar spread: fast for huge layers
};
// Quantizes E stacked fp32 matrices [E, rows, cols] by the recipe of `format`.
QuantizedMatrix quantize_matrix(Format format, Fp8ScaleKind fp8_scale, std::int64_t experts,
                                std::int64_t rows, std::int64_t cols, std::span<const float> w);
QuantizedWeights random_weights(const MoEConfig& config, std::uint64_t seed,
                                WeightInit init = WeightInit::gaussian);
// Adapters of rank config.lora_rank with bf16 values of spread ~1/sqrt(fan-in).
LoraWeights random_lora(const MoEConfig& config, float scale, bool tied, std::uint64_t seed);

// Dequantized values of expert e's matrix [rows, cols], global scale included.
std::vector<float> dequantize_expert(const QuantizedMatrix& m, std::int64_t expert);

std::vector<std::uint16_t> to_bf16_bits(std::span<const float> values);
std::vector<float> from_bf16_bits(std::span<const std::uint16_t> bits);

}  // namespace megamoe::reference
