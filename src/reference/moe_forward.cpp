// Public entry points of the forward oracle: validation, then the engine in the precision asked.
#include <cmath>
#include <string>

#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"
#include "megamoe/reference.hpp"
#include "reference/engine.hpp"
#include "reference/weight_decode.hpp"

namespace megamoe::reference {
namespace {

void validate_fc2_scales(const MoEConfig& config, const ForwardOptions& options) {
  if (config.act_format != Format::nvfp4) return;
  const auto E = config.shape.num_experts;
  if (static_cast<std::int64_t>(options.fc2_input_scale.size()) != E) {
    throw_invalid("options.fc2_input_scale",
                  "nvfp4 activations need one FC2 input global scale per expert (size E = " +
                      std::to_string(E) + "; see calibrate_fc2_input_scales)",
                  std::to_string(options.fc2_input_scale.size()));
  }
  for (float s : options.fc2_input_scale) {
    if (!(s > 0.0f) || !std::isfinite(s)) {
      throw_invalid("options.fc2_input_scale", "entries must be finite and > 0", std::to_string(s));
    }
  }
}

void validate_common(const MoEConfig& config, const MoEInputs& inputs,
                     const QuantizedWeights& weights) {
  detail::validate_config(config);
  detail::validate_inputs(config, inputs);
  detail::validate_weights(config, weights);
}

}  // namespace

MoEOutputs moe_forward(const MoEConfig& config, const MoEInputs& inputs,
                       const QuantizedWeights& weights, const ForwardOptions& options) {
  if (config.side_lora) {
    throw_invalid("config.side_lora", "must be false for moe_forward (use side_lora_forward)");
  }
  validate_common(config, inputs, weights);
  validate_fc2_scales(config, options);
  if (options.precision == Precision::kernel) {
    return detail::Engine<float>(config, inputs, weights, options.precision,
                                 &options.fc2_input_scale, nullptr)
        .forward();
  }
  return detail::Engine<double>(config, inputs, weights, options.precision,
                                &options.fc2_input_scale, nullptr)
      .forward();
}

std::vector<float> calibrate_fc2_input_scales(const MoEConfig& config, const MoEInputs& inputs,
                                              const QuantizedWeights& weights) {
  validate_common(config, inputs, weights);
  return detail::Engine<float>(config, inputs, weights, Precision::kernel, nullptr, nullptr)
      .calibrate();
}

MoEOutputs side_lora_forward(const MoEConfig& config, const MoEInputs& inputs,
                             const QuantizedWeights& weights, const LoraWeights& lora,
                             Precision precision) {
  if (!config.side_lora) throw_invalid("config.side_lora", "must be true for side_lora_forward");
  validate_common(config, inputs, weights);
  detail::validate_lora(config, lora);
  if (precision == Precision::kernel) {
    return detail::Engine<float>(config, inputs, weights, precision, nullptr, &lora).forward();
  }
  return detail::Engine<double>(config, inputs, weights, precision, nullptr, &lora).forward();
}

std::vector<float> dequantize_expert(const QuantizedMatrix& m, std::int64_t expert) {
  if (expert < 0 || expert >= m.experts) {
    throw_invalid("expert", "must be in [0, m.experts)", std::to_string(expert));
  }
  std::vector<float> out(static_cast<std::size_t>(m.rows * m.cols));
  detail::decode_rows(m, expert, 0, m.rows, out.data());
  const float g = detail::matrix_global_scale(m, expert);
  if (g != 1.0f) {
    for (float& v : out) v *= g;
  }
  return out;
}

std::vector<std::uint16_t> to_bf16_bits(std::span<const float> values) {
  std::vector<std::uint16_t> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = formats::bf16_from_float(values[i]);
  return out;
}

std::vector<float> from_bf16_bits(std::span<const std::uint16_t> bits) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = formats::bf16_to_float(bits[i]);
  return out;
}

}  // namespace megamoe::reference
