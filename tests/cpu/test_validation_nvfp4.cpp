// Rules of the NVFP4 entry points: checkpoint weights (transform input), kernel weights and
// nvfp4_mega_moe's rank, weight and output lists.
#include <gtest/gtest.h>

#include "core/validate.hpp"
#include "validation_test_support.hpp"

namespace megamoe {
namespace {

using test::FakeAllocator;
using test::kGpu0;
using validate::buffer_facts;

MoEConfig config() {
  MoEConfig c;
  c.shape = {768, 384, 8, 2};
  c.num_ranks = 2;
  c.max_tokens_per_rank = 32;
  return c;
}

constexpr Nvfp4KernelWeightBytes kBytes{1 << 20, 1 << 16, 1 << 19, 1 << 15};

Nvfp4CheckpointWeights checkpoint(FakeAllocator& a, const MoEConfig& c, ScaleLayout layout) {
  const std::int64_t e = c.experts_per_rank(), h = c.shape.hidden, i = c.shape.intermediate;
  Nvfp4CheckpointWeights w;
  w.sf_layout = layout;
  w.w13 = a.tensor(DType::e2m1x2, {e, 2 * i, h / 2});
  w.w2 = a.tensor(DType::u8, {e, h, i / 2});
  if (layout == ScaleLayout::row_major) {
    w.w13_sf = a.tensor(DType::ue4m3, {e, 2 * i, h / 16});
    w.w2_sf = a.tensor(DType::ue4m3, {e, h, i / 16});
  } else {
    w.w13_sf = a.tensor(DType::ue4m3, {e, 768, 48});  // 2I = 768 rows, H/16 = 48 columns
    w.w2_sf = a.tensor(DType::u8, {e, 768, 24});      // H = 768 rows, I/16 = 24 columns
  }
  w.w13_global = a.tensor(DType::f32, {e});
  w.w2_global = a.tensor(DType::f32, {e});
  w.fc2_input_scale = a.tensor(DType::f32, {e});
  return w;
}

Nvfp4KernelWeights kernel_weights(FakeAllocator& a, const MoEConfig& c) {
  const std::int64_t e = c.experts_per_rank();
  Nvfp4KernelWeights w;
  w.w13 = a.tensor(DType::u8, {static_cast<std::int64_t>(kBytes.w13)});
  w.w13_sf = a.tensor(DType::u8, {static_cast<std::int64_t>(kBytes.w13_sf)});
  w.w2 = a.tensor(DType::u8, {2, static_cast<std::int64_t>(kBytes.w2)});  // larger is fine
  w.w2_sf = a.tensor(DType::u8, {static_cast<std::int64_t>(kBytes.w2_sf)});
  w.fc1_alpha = a.tensor(DType::f32, {e});
  w.fc2_alpha = a.tensor(DType::f32, {e});
  w.fc2_input_scale = a.tensor(DType::f32, {e});
  return w;
}

struct Call {
  test::Seeded seeded;
  MoEConfig cfg = config();
  SymmBuffer buffer = test::fake_buffer(cfg);
  FakeAllocator alloc;
  std::vector<Nvfp4KernelWeights> weights;
  std::vector<Nvfp4MoEOutputs> outputs;
  Call() {
    // Ranks in a random order: outputs need not be sorted.
    const bool swap = seeded.uniform(0, 1) == 1;
    for (int i = 0; i < 2; ++i) {
      weights.push_back(kernel_weights(alloc, cfg));
      Nvfp4MoEOutputs o;
      o.rank = swap ? 1 - i : i;
      o.out =
          alloc.tensor(DType::bf16, {seeded.uniform(0, cfg.max_tokens_per_rank), cfg.shape.hidden});
      outputs.push_back(o);
    }
  }
  void run(std::int64_t max_tokens_across_ranks = 0) const {
    validate::validate_nvfp4_mega_moe(buffer_facts(buffer, kGpu0), weights, outputs, kBytes,
                                      max_tokens_across_ranks);
  }
};

TEST(ValidationNvfp4, CheckpointAcceptsBothScaleLayouts) {
  FakeAllocator a;
  const MoEConfig c = config();
  EXPECT_NO_THROW(validate::validate_nvfp4_checkpoint_weights(
      c, checkpoint(a, c, ScaleLayout::row_major), kGpu0));
  EXPECT_NO_THROW(validate::validate_nvfp4_checkpoint_weights(
      c, checkpoint(a, c, ScaleLayout::swizzled_128x4), kGpu0));
}

TEST(ValidationNvfp4, CheckpointNeedsNvfp4Config) {
  FakeAllocator a;
  MoEConfig c = config();
  const Nvfp4CheckpointWeights w = checkpoint(a, c, ScaleLayout::row_major);
  c.weight_format = Format::fp8;
  c.act_format = Format::fp8;
  EXPECT_INVALID(validate::validate_nvfp4_checkpoint_weights(c, w, kGpu0), "config.weight_format",
                 "must be nvfp4 for NVFP4 weights");
}

TEST(ValidationNvfp4, CheckpointScaleLayoutValue) {
  FakeAllocator a;
  const MoEConfig c = config();
  Nvfp4CheckpointWeights w = checkpoint(a, c, ScaleLayout::row_major);
  w.sf_layout = static_cast<ScaleLayout>(4);
  EXPECT_INVALID(validate::validate_nvfp4_checkpoint_weights(c, w, kGpu0), "in.sf_layout",
                 "must be row_major or swizzled_128x4");
}

TEST(ValidationNvfp4, CheckpointPackedShape) {
  FakeAllocator a;
  const MoEConfig c = config();
  Nvfp4CheckpointWeights w = checkpoint(a, c, ScaleLayout::row_major);
  w.w13 = a.tensor(DType::e2m1x2, {4, 768, 768});  // unpacked width
  EXPECT_INVALID(validate::validate_nvfp4_checkpoint_weights(c, w, kGpu0), "in.w13",
                 "dim 2 must equal hidden / 2 = 384");
  w = checkpoint(a, c, ScaleLayout::row_major);
  w.w2 = a.tensor(DType::e2m1x2, {8, 768, 192});  // all experts instead of the local 4
  EXPECT_INVALID(validate::validate_nvfp4_checkpoint_weights(c, w, kGpu0), "in.w2",
                 "dim 0 must equal experts per rank = 4");
}

TEST(ValidationNvfp4, CheckpointPackedDtype) {
  FakeAllocator a;
  const MoEConfig c = config();
  Nvfp4CheckpointWeights w = checkpoint(a, c, ScaleLayout::row_major);
  w.w2.dtype = DType::e4m3;
  EXPECT_INVALID(validate::validate_nvfp4_checkpoint_weights(c, w, kGpu0), "in.w2",
                 "dtype must be e2m1x2 or u8");
}

TEST(ValidationNvfp4, CheckpointRowMajorScaleShape) {
  FakeAllocator a;
  const MoEConfig c = config();
  Nvfp4CheckpointWeights w = checkpoint(a, c, ScaleLayout::row_major);
  w.w2_sf = a.tensor(DType::ue4m3, {4, 768, 12});  // per 32 instead of per 16
  EXPECT_INVALID(validate::validate_nvfp4_checkpoint_weights(c, w, kGpu0), "in.w2_sf",
                 "dim 2 must equal intermediate / 16 = 24");
}

TEST(ValidationNvfp4, CheckpointSwizzledScaleShape) {
  // With H and I multiples of 128 the 128x4 padding never adds rows or columns, so the padded
  // shape equals the plain one; the rule still names the padding.
  FakeAllocator a;
  const MoEConfig c = config();
  Nvfp4CheckpointWeights w = checkpoint(a, c, ScaleLayout::swizzled_128x4);
  w.w2_sf = a.tensor(DType::ue4m3, {4, 768, 20});
  EXPECT_INVALID(validate::validate_nvfp4_checkpoint_weights(c, w, kGpu0), "in.w2_sf",
                 "dim 2 must equal intermediate / 16 rounded up to 4 = 24");
  w = checkpoint(a, c, ScaleLayout::swizzled_128x4);
  w.w13_sf = a.tensor(DType::ue4m3, {4, 700, 48});
  EXPECT_INVALID(validate::validate_nvfp4_checkpoint_weights(c, w, kGpu0), "in.w13_sf",
                 "dim 1 must equal 2 * intermediate rounded up to 128 = 768");
}

TEST(ValidationNvfp4, CheckpointPerExpertScales) {
  FakeAllocator a;
  const MoEConfig c = config();
  Nvfp4CheckpointWeights w = checkpoint(a, c, ScaleLayout::row_major);
  w.fc2_input_scale = a.tensor(DType::f32, {1});
  EXPECT_INVALID(validate::validate_nvfp4_checkpoint_weights(c, w, kGpu0), "in.fc2_input_scale",
                 "dim 0 must equal experts per rank = 4");
  w = checkpoint(a, c, ScaleLayout::row_major);
  w.w13_global.data = nullptr;
  EXPECT_INVALID(validate::validate_nvfp4_checkpoint_weights(c, w, kGpu0), "in.w13_global",
                 "is required but missing");
}

TEST(ValidationNvfp4, MegaMoeAcceptsValidCall) {
  Call c;
  EXPECT_NO_THROW(c.run());
}

TEST(ValidationNvfp4, MegaMoeNeedsNvfp4Buffer) {
  Call c;
  c.cfg.weight_format = Format::mxfp4;
  c.cfg.act_format = Format::mxfp4;
  c.buffer = test::fake_buffer(c.cfg);
  EXPECT_INVALID(c.run(), "buffer", "nvfp4_mega_moe needs a buffer planned for nvfp4 x nvfp4");
}

TEST(ValidationNvfp4, MegaMoeWeightsPerOutput) {
  Call c;
  c.weights.pop_back();
  EXPECT_INVALID(c.run(), "weights", "must have one entry per entry of outputs (2)");
}

TEST(ValidationNvfp4, MegaMoeOutputsCoverDrivenRanks) {
  Call c;
  c.outputs.pop_back();
  c.weights.pop_back();
  EXPECT_INVALID(c.run(), "outputs", "must have one entry per driven rank (2)");
  Call d;
  d.outputs[1].rank = d.outputs[0].rank;
  EXPECT_INVALID(d.run(), "outputs[1].rank", "must not repeat a rank");
}

TEST(ValidationNvfp4, KernelWeightUndersized) {
  Call c;
  c.weights[1].w13_sf = c.alloc.tensor(DType::u8, {static_cast<std::int64_t>(kBytes.w13_sf) - 16});
  EXPECT_INVALID(c.run(), "weights[1].w13_sf",
                 "must hold at least " + std::to_string(kBytes.w13_sf) + " bytes");
}

TEST(ValidationNvfp4, KernelWeightDtypeAndContiguity) {
  Call c;
  c.weights[0].w2.dtype = DType::e2m1x2;
  EXPECT_INVALID(c.run(), "weights[0].w2", "dtype must be u8");
  Call d;
  d.weights[0].w2.strides[0] = static_cast<std::int64_t>(kBytes.w2) + 16;
  EXPECT_INVALID(d.run(), "weights[0].w2", "must be contiguous");
}

TEST(ValidationNvfp4, KernelWeightAlphaShape) {
  Call c;
  c.weights[0].fc2_alpha = c.alloc.tensor(DType::f32, {8});
  EXPECT_INVALID(c.run(), "weights[0].fc2_alpha", "dim 0 must equal experts per rank = 4");
  Call d;
  d.weights[1].fc1_alpha.dtype = DType::bf16;
  EXPECT_INVALID(d.run(), "weights[1].fc1_alpha", "dtype must be f32");
}

TEST(ValidationNvfp4, OutputShape) {
  Call c;
  c.outputs[0].out = c.alloc.tensor(DType::bf16, {4, 1024});
  EXPECT_INVALID(c.run(), "outputs[0].out", "dim 1 must equal hidden = 768");
  Call d;
  d.outputs[1].out = d.alloc.tensor(DType::bf16, {33, 768});
  EXPECT_INVALID(d.run(), "outputs[1].out", "dim 0 must be in [0, max_tokens_per_rank = 32]");
  Call e;
  e.outputs[1].out.dtype = DType::f32;
  EXPECT_INVALID(e.run(), "outputs[1].out", "dtype must be bf16");
}

// Ragged batches: the largest count of any rank, where the caller knows it, from the largest
// count among this call's outputs up to max_tokens_per_rank; 0 means not known.
TEST(ValidationNvfp4, MaxTokensAcrossRanks) {
  Call c;
  c.outputs[0].out = c.alloc.tensor(DType::bf16, {0, 768});  // an idle rank
  c.outputs[1].out = c.alloc.tensor(DType::bf16, {9, 768});
  for (std::int64_t ok : {0, 9, 10, 32}) EXPECT_NO_THROW(c.run(ok)) << ok;
  const char* rule =
      "must be 0 (not known) or in [the largest token count among outputs = 9, "
      "max_tokens_per_rank = 32]";
  for (std::int64_t bad : {-1, 1, 8, 33}) {
    EXPECT_INVALID(c.run(bad), "max_tokens_across_ranks", rule);
  }
}

}  // namespace
}  // namespace megamoe
