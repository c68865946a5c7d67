// Validation of the FP8, MXFP4 and BF16 MegaMoE calls (mega_moe.hpp).
#include <string>

#include "core/validate.hpp"
#include "megamoe/error.hpp"

namespace megamoe::validate {
namespace {

template <typename Weights>
void validate_call(const BufferFacts& b, std::string_view function, bool family_ok,
                   std::string_view family, std::span<const Weights> weights,
                   std::span<const MoEOutputs> outputs) {
  validate_layer_call(b, function, family_ok, family, weights.size(), outputs);
}

}  // namespace

void check_mxfp4_weight_pair(const MoEConfig& c, const TensorView& w13, const TensorView& w13_sf,
                             const TensorView& w2, const TensorView& w2_sf, std::string_view name,
                             Device device) {
  const std::int64_t e = c.experts_per_rank();
  const std::int64_t h = c.shape.hidden;
  const std::int64_t inter = c.shape.intermediate;
  const Dim experts{e, "experts per rank"};
  check_tensor_any(w13, field(name, "w13"), {DType::e2m1x2, DType::u8},
                   {experts, {2 * inter, "2 * intermediate"}, {h / 2, "hidden / 2"}}, device);
  check_tensor_any(w13_sf, field(name, "w13_sf"), {DType::ue8m0, DType::u8},
                   {experts, {2 * inter, "2 * intermediate"}, {h / 32, "hidden / 32"}}, device);
  check_tensor_any(w2, field(name, "w2"), {DType::e2m1x2, DType::u8},
                   {experts, {h, "hidden"}, {inter / 2, "intermediate / 2"}}, device);
  check_tensor_any(w2_sf, field(name, "w2_sf"), {DType::ue8m0, DType::u8},
                   {experts, {h, "hidden"}, {inter / 32, "intermediate / 32"}}, device);
}

void check_bf16_weight_pair(const MoEConfig& c, const TensorView& w13, const TensorView& w2,
                            std::string_view name, Device device) {
  const Dim experts{c.experts_per_rank(), "experts per rank"};
  const std::int64_t h = c.shape.hidden;
  const std::int64_t inter = c.shape.intermediate;
  check_tensor(w13, field(name, "w13"), DType::bf16,
               {experts, {2 * inter, "2 * intermediate"}, {h, "hidden"}}, device);
  check_tensor(w2, field(name, "w2"), DType::bf16,
               {experts, {h, "hidden"}, {inter, "intermediate"}}, device);
}

void validate_fp8_mega_moe(const BufferFacts& b, std::span<const Fp8ExpertWeights> weights,
                           std::span<const MoEOutputs> outputs) {
  const MoEConfig& c = b.plan ? b.plan->config : MoEConfig{};
  validate_call(b, "fp8_mega_moe", c.weight_format == Format::fp8 && c.act_format == Format::fp8,
                "fp8 x fp8", weights, outputs);
  const Dim experts{c.experts_per_rank(), "experts per rank"};
  const std::int64_t h = c.shape.hidden;
  const std::int64_t inter = c.shape.intermediate;
  const bool f32 = c.fp8_scale == Fp8ScaleKind::f32;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const Fp8ExpertWeights& w = weights[i];
    const std::string name = indexed("weights", i);
    check_tensor(w.w13, field(name, "w13"), DType::e4m3,
                 {experts, {2 * inter, "2 * intermediate"}, {h, "hidden"}}, b.device);
    check_tensor(w.w2, field(name, "w2"), DType::e4m3,
                 {experts, {h, "hidden"}, {inter, "intermediate"}}, b.device);
    // Scale dtype follows config.fp8_scale; raw u8 bytes stand for ue8m0.
    const auto check_sf = [&](const TensorView& t, std::string_view member,
                              std::initializer_list<Dim> dims) {
      if (f32) {
        check_tensor(t, field(name, member), DType::f32, dims, b.device);
      } else {
        check_tensor_any(t, field(name, member), {DType::ue8m0, DType::u8}, dims, b.device);
      }
    };
    check_sf(w.w13_sf, "w13_sf",
             {experts, {2 * inter / 128, "2 * intermediate / 128"}, {h / 128, "hidden / 128"}});
    check_sf(w.w2_sf, "w2_sf",
             {experts, {h / 128, "hidden / 128"}, {inter / 128, "intermediate / 128"}});
  }
}

void validate_mxfp4_mega_moe(const BufferFacts& b, std::span<const Mxfp4ExpertWeights> weights,
                             std::span<const MoEOutputs> outputs) {
  const MoEConfig& c = b.plan ? b.plan->config : MoEConfig{};
  validate_call(b, "mxfp4_mega_moe", c.weight_format == Format::mxfp4, "mxfp4 x {mxfp4, fp8, bf16}",
                weights, outputs);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const Mxfp4ExpertWeights& w = weights[i];
    check_mxfp4_weight_pair(c, w.w13, w.w13_sf, w.w2, w.w2_sf, indexed("weights", i), b.device);
  }
}

void validate_bf16_mega_moe(const BufferFacts& b, std::span<const Bf16ExpertWeights> weights,
                            std::span<const MoEOutputs> outputs) {
  const MoEConfig& c = b.plan ? b.plan->config : MoEConfig{};
  validate_call(b, "bf16_mega_moe", c.weight_format == Format::bf16 && c.act_format == Format::bf16,
                "bf16 x bf16", weights, outputs);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    check_bf16_weight_pair(c, weights[i].w13, weights[i].w2, indexed("weights", i), b.device);
  }
}

}  // namespace megamoe::validate
