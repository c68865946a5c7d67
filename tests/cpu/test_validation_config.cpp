// Every configuration rule of validate_config (docs/api.md, "Configuration rules"): one
// configuration breaking it, and the message naming the field and the rule.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/validate.hpp"
#include "megamoe/presets.hpp"
#include "validation_test_support.hpp"

namespace megamoe {
namespace {

using validate::validate_config;

MoEConfig good() {
  MoEConfig c;
  c.shape = {4096, 2048, 256, 6};
  c.weight_format = Format::nvfp4;
  c.act_format = Format::nvfp4;
  c.num_ranks = 4;
  c.max_tokens_per_rank = 512;
  return c;
}

MoEConfig good_lora() {
  MoEConfig c = good();
  c.weight_format = Format::mxfp4;
  c.act_format = Format::bf16;
  c.side_lora = true;
  return c;
}

TEST(ValidationConfig, AcceptsEverySupportedPairAndPreset) {
  const std::pair<Format, Format> pairs[] = {
      {Format::nvfp4, Format::nvfp4}, {Format::mxfp4, Format::mxfp4}, {Format::mxfp4, Format::fp8},
      {Format::mxfp4, Format::bf16},  {Format::fp8, Format::fp8},     {Format::bf16, Format::bf16}};
  for (auto [w, a] : pairs) {
    MoEConfig c = good();
    c.weight_format = w;
    c.act_format = a;
    EXPECT_NO_THROW(validate_config(c)) << describe(c);
  }
  for (const Preset& p : presets()) {
    for (int r : {1, 2, 4, 8}) {
      MoEConfig c = good();
      c.shape = p.shape;
      c.num_ranks = r;
      EXPECT_NO_THROW(validate_config(c)) << describe(c);
    }
  }
  EXPECT_NO_THROW(validate_config(good_lora()));
  MoEConfig bf16_lora = good_lora();
  bf16_lora.weight_format = Format::bf16;
  EXPECT_NO_THROW(validate_config(bf16_lora));
}

TEST(ValidationConfig, HiddenMultipleOf128) {
  MoEConfig c = good();
  c.shape.hidden = 4096 + 64;
  EXPECT_INVALID(validate_config(c), "config.shape.hidden", "must be a multiple of 128");
}

TEST(ValidationConfig, HiddenRange) {
  MoEConfig c = good();
  c.shape.hidden = 128;
  EXPECT_INVALID(validate_config(c), "config.shape.hidden", "must be in [256, 16384]");
  c.shape.hidden = 16384 + 128;
  EXPECT_INVALID(validate_config(c), "config.shape.hidden", "must be in [256, 16384]");
}

TEST(ValidationConfig, IntermediateMultipleOf128) {
  MoEConfig c = good();
  c.shape.intermediate = 2000;
  EXPECT_INVALID(validate_config(c), "config.shape.intermediate", "must be a multiple of 128");
}

TEST(ValidationConfig, IntermediateRange) {
  MoEConfig c = good();
  c.shape.intermediate = 0;
  EXPECT_INVALID(validate_config(c), "config.shape.intermediate", "must be in [128, 16384]");
  c.shape.intermediate = 16384 + 128;
  EXPECT_INVALID(validate_config(c), "config.shape.intermediate", "must be in [128, 16384]");
}

TEST(ValidationConfig, RanksArePowersOfTwoUpTo8) {
  for (int r : {0, 3, 16, -1}) {
    MoEConfig c = good();
    c.num_ranks = r;
    EXPECT_INVALID(validate_config(c), "config.num_ranks", "must be 1, 2, 4 or 8");
  }
}

TEST(ValidationConfig, ExpertCountRange) {
  MoEConfig c = good();
  c.shape.num_experts = 0;
  EXPECT_INVALID(validate_config(c), "config.shape.num_experts", "must be in [1, 1024]");
  c.shape.num_experts = 2048;
  EXPECT_INVALID(validate_config(c), "config.shape.num_experts", "must be in [1, 1024]");
}

TEST(ValidationConfig, ExpertsDivisibleByRanks) {
  MoEConfig c = good();
  c.shape.num_experts = 6;
  c.num_ranks = 4;
  c.shape.top_k = 2;
  EXPECT_INVALID(validate_config(c), "config.shape.num_experts",
                 "must be divisible by num_ranks = 4");
}

TEST(ValidationConfig, ExpertsPerRankBounded) {
  MoEConfig c = good();
  c.shape.num_experts = 1024;
  c.num_ranks = 1;
  EXPECT_INVALID(validate_config(c), "config.shape.num_experts",
                 "experts per rank (num_experts / num_ranks) must be <= 512");
  c.num_ranks = 2;
  EXPECT_NO_THROW(validate_config(c));
}

TEST(ValidationConfig, TopKRange) {
  MoEConfig c = good();
  c.shape.top_k = 0;
  EXPECT_INVALID(validate_config(c), "config.shape.top_k",
                 "must be in [1, min(num_experts, 16) = 16]");
  c.shape.top_k = 17;
  EXPECT_INVALID(validate_config(c), "config.shape.top_k",
                 "must be in [1, min(num_experts, 16) = 16]");
  c.shape.num_experts = 4;
  c.shape.top_k = 5;
  EXPECT_INVALID(validate_config(c), "config.shape.top_k",
                 "must be in [1, min(num_experts, 16) = 4]");
  c.shape.top_k = 4;
  EXPECT_NO_THROW(validate_config(c));
}

TEST(ValidationConfig, MaxTokensRange) {
  MoEConfig c = good();
  c.max_tokens_per_rank = 0;
  EXPECT_INVALID(validate_config(c), "config.max_tokens_per_rank", "must be in [1, 131072]");
  c.max_tokens_per_rank = 131073;
  EXPECT_INVALID(validate_config(c), "config.max_tokens_per_rank", "must be in [1, 131072]");
  c.max_tokens_per_rank = 131072;
  EXPECT_NO_THROW(validate_config(c));
}

TEST(ValidationConfig, UnknownFormatValues) {
  MoEConfig c = good();
  c.weight_format = static_cast<Format>(9);
  EXPECT_INVALID(validate_config(c), "config.weight_format", "must be bf16, fp8, mxfp4 or nvfp4");
  c = good();
  c.act_format = static_cast<Format>(9);
  EXPECT_INVALID(validate_config(c), "config.act_format", "must be bf16, fp8, mxfp4 or nvfp4");
}

TEST(ValidationConfig, UnsupportedFormatPairs) {
  const std::pair<Format, Format> bad[] = {
      {Format::nvfp4, Format::fp8},   {Format::nvfp4, Format::bf16}, {Format::nvfp4, Format::mxfp4},
      {Format::mxfp4, Format::nvfp4}, {Format::fp8, Format::bf16},   {Format::fp8, Format::mxfp4},
      {Format::bf16, Format::fp8},    {Format::bf16, Format::nvfp4}};
  for (auto [w, a] : bad) {
    MoEConfig c = good();
    c.weight_format = w;
    c.act_format = a;
    EXPECT_INVALID(validate_config(c), "config.act_format",
                   "unsupported (weights, activations) pair on sm90");
  }
}

TEST(ValidationConfig, Fp8ScaleKind) {
  MoEConfig c = good();
  c.fp8_scale = static_cast<Fp8ScaleKind>(7);
  EXPECT_INVALID(validate_config(c), "config.fp8_scale", "must be f32 or ue8m0");
}

TEST(ValidationConfig, ActivationKind) {
  MoEConfig c = good();
  c.activation.kind = static_cast<ActivationKind>(5);
  EXPECT_INVALID(validate_config(c), "config.activation.kind",
                 "must be swiglu, geglu or swiglu_oai");
}

TEST(ValidationConfig, ClampFiniteNonNegative) {
  for (float clamp :
       {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    MoEConfig c = good();
    c.activation.kind = ActivationKind::geglu;
    c.activation.clamp = clamp;
    EXPECT_INVALID(validate_config(c), "config.activation.clamp", "must be finite and >= 0");
  }
  MoEConfig c = good();
  c.activation.clamp = 10.0f;
  EXPECT_NO_THROW(validate_config(c));
}

TEST(ValidationConfig, OaiUsesLimitNotClamp) {
  MoEConfig c = good();
  c.activation.kind = ActivationKind::swiglu_oai;
  c.activation.clamp = 7.0f;
  EXPECT_INVALID(validate_config(c), "config.activation.clamp", "must be 0 with swiglu_oai");
}

TEST(ValidationConfig, OaiAlphaAndLimitPositive) {
  MoEConfig c = good();
  c.activation.kind = ActivationKind::swiglu_oai;
  EXPECT_NO_THROW(validate_config(c));
  c.activation.oai_alpha = 0.0f;
  EXPECT_INVALID(validate_config(c), "config.activation.oai_alpha", "must be finite and > 0");
  c.activation.oai_alpha = 1.702f;
  c.activation.oai_limit = std::numeric_limits<float>::infinity();
  EXPECT_INVALID(validate_config(c), "config.activation.oai_limit", "must be finite and > 0");
  c.activation.oai_limit = -7.0f;
  EXPECT_INVALID(validate_config(c), "config.activation.oai_limit", "must be finite and > 0");
}

TEST(ValidationConfig, SideLoraBaseWeights) {
  MoEConfig c = good_lora();
  c.weight_format = Format::fp8;
  c.act_format = Format::fp8;
  EXPECT_INVALID(validate_config(c), "config.side_lora", "needs bf16 or mxfp4 base weights");
  c.weight_format = Format::nvfp4;
  c.act_format = Format::nvfp4;
  EXPECT_INVALID(validate_config(c), "config.side_lora", "needs bf16 or mxfp4 base weights");
}

TEST(ValidationConfig, SideLoraActivations) {
  MoEConfig c = good_lora();
  c.act_format = Format::fp8;
  EXPECT_INVALID(validate_config(c), "config.side_lora", "needs bf16 activations");
  c.act_format = Format::mxfp4;
  EXPECT_INVALID(validate_config(c), "config.side_lora", "needs bf16 activations");
}

TEST(ValidationConfig, LoraRank) {
  for (int r : {0, 8, 24, 100, 272, -16}) {
    MoEConfig c = good_lora();
    c.lora_rank = r;
    EXPECT_INVALID(validate_config(c), "config.lora_rank", "must be a multiple of 16 in [16, 256]");
  }
  for (int r : {16, 64, 128, 256}) {
    MoEConfig c = good_lora();
    c.lora_rank = r;
    EXPECT_NO_THROW(validate_config(c));
  }
  MoEConfig no_lora = good();
  no_lora.lora_rank = 3;  // only checked for side-LoRA configurations
  EXPECT_NO_THROW(validate_config(no_lora));
}

TEST(ValidationConfig, Fp8CombineNotWithSideLora) {
  MoEConfig c = good_lora();
  c.fp8_combine = true;
  EXPECT_INVALID(validate_config(c), "config.fp8_combine", "is not supported with side_lora");
  MoEConfig plain = good();
  plain.fp8_combine = true;
  EXPECT_NO_THROW(validate_config(plain));
}

TEST(ValidationConfig, SideLoraActivationKinds) {
  MoEConfig c = good_lora();
  c.activation.kind = ActivationKind::swiglu_oai;
  EXPECT_INVALID(validate_config(c), "config.activation.kind",
                 "side_lora supports swiglu and geglu");
  c.activation.kind = ActivationKind::geglu;
  EXPECT_NO_THROW(validate_config(c));
}

}  // namespace
}  // namespace megamoe
