// Validation of the NVFP4 x NVFP4 entry points: weight transform and nvfp4_mega_moe.
#include <algorithm>
#include <string>

#include "core/validate.hpp"
#include "megamoe/error.hpp"

namespace megamoe::validate {
namespace {

std::int64_t round_up(std::int64_t v, std::int64_t m) {
  return (v + m - 1) / m * m;
}

// UE4M3 scales of an [e_local, rows, k] NVFP4 matrix: row-major [e, rows, k/16], or the
// 128x4-swizzled tiles stored as their padded [e, round_up(rows, 128), round_up(k/16, 4)].
void check_nvfp4_scales(const TensorView& t, const std::string& name, ScaleLayout layout,
                        std::int64_t e_local, std::int64_t rows, std::int64_t k,
                        std::string_view rows_what, std::string_view k_what, Device device) {
  const std::string cols_what = std::string(k_what) + " / 16";
  if (layout == ScaleLayout::row_major) {
    check_tensor_any(t, name, {DType::ue4m3, DType::u8},
                     {{e_local, "experts per rank"}, {rows, rows_what}, {k / 16, cols_what}},
                     device);
  } else {
    const std::string padded_rows = std::string(rows_what) + " rounded up to 128";
    const std::string padded_cols = cols_what + " rounded up to 4";
    check_tensor_any(t, name, {DType::ue4m3, DType::u8},
                     {{e_local, "experts per rank"},
                      {round_up(rows, 128), padded_rows},
                      {round_up(k / 16, 4), padded_cols}},
                     device);
  }
}

void check_per_expert_f32(const TensorView& t, const std::string& name, std::int64_t e_local,
                          Device device) {
  check_tensor(t, name, DType::f32, {{e_local, "experts per rank"}}, device);
}

void check_byte_blob(const TensorView& t, const std::string& name, std::size_t need,
                     Device device) {
  check_defined(t, name);
  check_device(t, name, device);
  check_dtype(t, name, DType::u8);
  check_contiguous(t, name);
  check_pointer_aligned(t, name);
  check_min_bytes(t, name, need, "nvfp4_kernel_weight_bytes");
}

}  // namespace

void validate_nvfp4_checkpoint_weights(const MoEConfig& c, const Nvfp4CheckpointWeights& w,
                                       Device device, std::string_view name) {
  validate_config(c);
  if (c.weight_format != Format::nvfp4) {
    throw_invalid("config.weight_format", "must be nvfp4 for NVFP4 weights",
                  std::string(format_name(c.weight_format)));
  }
  if (w.sf_layout != ScaleLayout::row_major && w.sf_layout != ScaleLayout::swizzled_128x4) {
    throw_invalid(field(name, "sf_layout"), "must be row_major or swizzled_128x4",
                  std::to_string(static_cast<int>(w.sf_layout)));
  }
  const std::int64_t e = c.experts_per_rank();
  const std::int64_t h = c.shape.hidden;
  const std::int64_t i2 = 2 * c.shape.intermediate;
  const std::int64_t inter = c.shape.intermediate;
  check_tensor_any(w.w13, field(name, "w13"), {DType::e2m1x2, DType::u8},
                   {{e, "experts per rank"}, {i2, "2 * intermediate"}, {h / 2, "hidden / 2"}},
                   device);
  check_nvfp4_scales(w.w13_sf, field(name, "w13_sf"), w.sf_layout, e, i2, h, "2 * intermediate",
                     "hidden", device);
  check_per_expert_f32(w.w13_global, field(name, "w13_global"), e, device);
  check_tensor_any(w.w2, field(name, "w2"), {DType::e2m1x2, DType::u8},
                   {{e, "experts per rank"}, {h, "hidden"}, {inter / 2, "intermediate / 2"}},
                   device);
  check_nvfp4_scales(w.w2_sf, field(name, "w2_sf"), w.sf_layout, e, h, inter, "hidden",
                     "intermediate", device);
  check_per_expert_f32(w.w2_global, field(name, "w2_global"), e, device);
  check_per_expert_f32(w.fc2_input_scale, field(name, "fc2_input_scale"), e, device);
}

void validate_nvfp4_kernel_weights(const MoEConfig& c, const Nvfp4KernelWeights& w,
                                   const Nvfp4KernelWeightBytes& bytes, Device device,
                                   std::string_view name) {
  validate_config(c);
  const std::int64_t e = c.experts_per_rank();
  check_byte_blob(w.w13, field(name, "w13"), bytes.w13, device);
  check_byte_blob(w.w13_sf, field(name, "w13_sf"), bytes.w13_sf, device);
  check_byte_blob(w.w2, field(name, "w2"), bytes.w2, device);
  check_byte_blob(w.w2_sf, field(name, "w2_sf"), bytes.w2_sf, device);
  check_per_expert_f32(w.fc1_alpha, field(name, "fc1_alpha"), e, device);
  check_per_expert_f32(w.fc2_alpha, field(name, "fc2_alpha"), e, device);
  check_per_expert_f32(w.fc2_input_scale, field(name, "fc2_input_scale"), e, device);
}

void validate_nvfp4_mega_moe(const BufferFacts& b, std::span<const Nvfp4KernelWeights> weights,
                             std::span<const Nvfp4MoEOutputs> outputs,
                             const Nvfp4KernelWeightBytes& bytes,
                             std::int64_t max_tokens_across_ranks) {
  const MoEConfig& c = b.plan->config;
  validate_layer_call(b, "nvfp4_mega_moe",
                      c.weight_format == Format::nvfp4 && c.act_format == Format::nvfp4,
                      "nvfp4 x nvfp4", weights.size(), outputs);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    validate_nvfp4_kernel_weights(c, weights[i], bytes, b.device, indexed("weights", i));
  }
  if (max_tokens_across_ranks != 0) {
    std::int64_t largest = 0;
    for (const Nvfp4MoEOutputs& o : outputs) largest = std::max(largest, o.out.shape[0]);
    if (max_tokens_across_ranks < largest || max_tokens_across_ranks > c.max_tokens_per_rank) {
      throw_invalid("max_tokens_across_ranks",
                    "must be 0 (not known) or in [the largest token count among outputs = " +
                        std::to_string(largest) +
                        ", max_tokens_per_rank = " + std::to_string(c.max_tokens_per_rank) + "]",
                    std::to_string(max_tokens_across_ranks));
    }
  }
}

}  // namespace megamoe::validate
