// Rules of the side-LoRA forward and backward: base weights per base format, adapters (shapes
// in the lora rank, tied A1 = A3), the saved-forward context, scratch and gradient outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "core/validate.hpp"
#include "megamoe/side_lora.hpp"
#include "validation_test_support.hpp"

namespace megamoe {
namespace {

using test::FakeAllocator;
using test::kGpu0;
using validate::buffer_facts;

constexpr std::int64_t kH = 256, kI = 128, kE = 4, kEl = 2, kK = 2, kR = 32;

MoEConfig config(Format base) {
  MoEConfig c;
  c.shape = {kH, kI, kE, static_cast<int>(kK)};
  c.weight_format = base;
  c.act_format = Format::bf16;
  c.num_ranks = 2;
  c.max_tokens_per_rank = 24;
  c.side_lora = true;
  c.lora_rank = static_cast<int>(kR);
  return c;
}

SideLoraBaseWeights base_weights(FakeAllocator& a, Format f) {
  SideLoraBaseWeights w;
  if (f == Format::bf16) {
    w.w13 = a.tensor(DType::bf16, {kEl, 2 * kI, kH});
    w.w2 = a.tensor(DType::bf16, {kEl, kH, kI});
  } else {
    w.w13 = a.tensor(DType::e2m1x2, {kEl, 2 * kI, kH / 2});
    w.w13_sf = a.tensor(DType::ue8m0, {kEl, 2 * kI, kH / 32});
    w.w2 = a.tensor(DType::e2m1x2, {kEl, kH, kI / 2});
    w.w2_sf = a.tensor(DType::ue8m0, {kEl, kH, kI / 32});
  }
  return w;
}

SideLoraAdapters adapters(FakeAllocator& a, bool tied) {
  SideLoraAdapters ad;
  ad.tied_a13 = tied;
  ad.a1 = a.tensor(DType::bf16, {kH, kR});
  if (!tied) ad.a3 = a.tensor(DType::bf16, {kH, kR});
  ad.b1 = a.tensor(DType::bf16, {kEl, kR, kI});
  ad.b3 = a.tensor(DType::bf16, {kEl, kR, kI});
  ad.a2 = a.tensor(DType::bf16, {kEl, kI, kR});
  ad.b2 = a.tensor(DType::bf16, {kR, kH});
  ad.scale = 0.5f;
  return ad;
}

SideLoraSaved saved(FakeAllocator& a, const SymmBufferPlan& plan, std::int64_t t, bool tied) {
  SideLoraSaved s;
  s.x_a = a.tensor(DType::f32, {t, tied ? kR : 2 * kR});
  s.z = a.tensor(DType::f32, {t, kR});
  s.pool = a.tensor(DType::u8, {static_cast<std::int64_t>(side_lora_saved_pool_bytes(plan))});
  return s;
}

struct Forward {
  test::Seeded seeded;
  MoEConfig cfg;
  SymmBuffer buffer;
  FakeAllocator alloc;
  std::vector<SideLoraForwardArgs> ranks;
  explicit Forward(Format base = Format::mxfp4, bool tied = false)
      : cfg(config(base)), buffer(test::fake_buffer(cfg)) {
    for (int r = 0; r < 2; ++r) {
      const std::int64_t t = seeded.uniform(1, cfg.max_tokens_per_rank);
      SideLoraForwardArgs a;
      a.rank = r;
      a.base = base_weights(alloc, base);
      a.adapters = adapters(alloc, tied);
      a.out = alloc.tensor(DType::bf16, {t, kH});
      a.saved = saved(alloc, buffer.plan, t, tied);
      ranks.push_back(a);
    }
  }
  void run() const { validate::validate_side_lora_forward(buffer_facts(buffer, kGpu0), ranks); }
};

struct Backward {
  test::Seeded seeded;
  MoEConfig cfg;
  SymmBuffer buffer;
  FakeAllocator alloc;
  std::vector<SideLoraBackwardArgs> ranks;
  // min_t > 1 where a test needs row strides to matter (one row has no stride).
  explicit Backward(Format base = Format::bf16, bool tied = false, std::int64_t min_t = 1)
      : cfg(config(base)), buffer(test::fake_buffer(cfg)) {
    for (int r = 0; r < 2; ++r) {
      const std::int64_t t = seeded.uniform(min_t, cfg.max_tokens_per_rank);
      SideLoraBackwardArgs a;
      a.rank = r;
      a.x = alloc.tensor(DType::bf16, {t, kH});
      a.topk_idx = alloc.tensor(DType::i64, {t, kK});
      a.topk_weights = alloc.tensor(DType::f32, {t, kK});
      a.d_out = alloc.tensor(DType::bf16, {t, kH});
      a.base = base_weights(alloc, base);
      a.adapters = adapters(alloc, tied);
      a.saved = saved(alloc, buffer.plan, t, tied);
      a.scratch = alloc.tensor(DType::u8,
                               {static_cast<std::int64_t>(side_lora_scratch_bytes(buffer.plan))});
      SideLoraGrads& g = a.grads;
      g.dx = alloc.tensor(DType::bf16, {t, kH});
      g.d_topk_weights = alloc.tensor(DType::f32, {t, kK});
      g.da1 = alloc.tensor(DType::f32, {kH, kR});
      if (!tied) g.da3 = alloc.tensor(DType::f32, {kH, kR});
      g.db1 = alloc.tensor(DType::f32, {kEl, kR, kI});
      g.db3 = alloc.tensor(DType::f32, {kEl, kR, kI});
      g.da2 = alloc.tensor(DType::f32, {kEl, kI, kR});
      g.db2 = alloc.tensor(DType::f32, {kR, kH});
      ranks.push_back(a);
    }
  }
  void run() const { validate::validate_side_lora_backward(buffer_facts(buffer, kGpu0), ranks); }
  std::int64_t tokens(int r) const { return ranks[static_cast<std::size_t>(r)].x.shape[0]; }
};

void expect_unsupported(const std::function<void()>& f, std::string_view function) {
  try {
    f();
    ADD_FAILURE() << function << " returned instead of refusing";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find(std::string(function) + ": no sm90 kernel"),
              std::string::npos)
        << e.what();
  }
}

TEST(ValidationSideLora, ValidCallsValidateThenRefuse) {
  for (Format base : {Format::bf16, Format::mxfp4}) {
    for (bool tied : {false, true}) {
      Forward f(base, tied);
      EXPECT_NO_THROW(f.run());
      expect_unsupported([&] { side_lora_mega_moe_forward(f.buffer, f.ranks, nullptr); },
                         "side_lora_mega_moe_forward");
      Backward b(base, tied);
      EXPECT_NO_THROW(b.run());
      expect_unsupported([&] { side_lora_mega_moe_backward(b.buffer, b.ranks, nullptr); },
                         "side_lora_mega_moe_backward");
    }
  }
}

TEST(ValidationSideLora, BufferMustBePlannedForSideLora) {
  Forward f;
  MoEConfig plain = f.cfg;
  plain.side_lora = false;
  f.buffer = test::fake_buffer(plain);
  EXPECT_INVALID(f.run(), "buffer",
                 "side_lora_mega_moe_forward needs a buffer planned for side_lora = true");
  EXPECT_INVALID(side_lora_saved_pool_bytes(f.buffer.plan), "plan",
                 "side_lora_saved_pool_bytes needs a plan with side_lora = true");
  EXPECT_INVALID(side_lora_scratch_bytes(f.buffer.plan), "plan",
                 "side_lora_scratch_bytes needs a plan with side_lora = true");
}

TEST(ValidationSideLora, Bf16BaseHasNoScales) {
  Forward f(Format::bf16);
  f.ranks[0].base.w13_sf = f.alloc.tensor(DType::ue8m0, {kEl, 2 * kI, kH / 32});
  EXPECT_INVALID(f.run(), "ranks[0].base.w13_sf", "must be left empty with bf16 base weights");
}

TEST(ValidationSideLora, Mxfp4BaseScales) {
  Forward f(Format::mxfp4);
  f.ranks[1].base.w2_sf.data = nullptr;
  EXPECT_INVALID(f.run(), "ranks[1].base.w2_sf", "is required but missing");
}

TEST(ValidationSideLora, AdapterRank) {
  Forward f;
  f.ranks[0].adapters.a1 = f.alloc.tensor(DType::bf16, {kH, 64});
  EXPECT_INVALID(f.run(), "ranks[0].adapters.a1", "dim 1 must equal lora_rank = 32");
  Forward g;
  g.ranks[1].adapters.b2 = g.alloc.tensor(DType::bf16, {kH, kR});  // transposed
  EXPECT_INVALID(g.run(), "ranks[1].adapters.b2", "dim 0 must equal lora_rank = 32");
}

TEST(ValidationSideLora, ExpertLocalAdapters) {
  Forward f;
  f.ranks[0].adapters.b3 = f.alloc.tensor(DType::bf16, {kE, kR, kI});  // all experts
  EXPECT_INVALID(f.run(), "ranks[0].adapters.b3", "dim 0 must equal experts per rank = 2");
  Forward g;
  g.ranks[0].adapters.a2 = g.alloc.tensor(DType::bf16, {kEl, kR, kI});  // B-shaped
  EXPECT_INVALID(g.run(), "ranks[0].adapters.a2", "dim 1 must equal intermediate = 128");
}

TEST(ValidationSideLora, AdapterDtype) {
  Forward f;
  f.ranks[1].adapters.b1.dtype = DType::f32;
  EXPECT_INVALID(f.run(), "ranks[1].adapters.b1", "dtype must be bf16");
}

TEST(ValidationSideLora, TiedA3MustBeEmpty) {
  Forward f(Format::mxfp4, /*tied=*/true);
  f.ranks[0].adapters.a3 = f.alloc.tensor(DType::bf16, {kH, kR});
  EXPECT_INVALID(f.run(), "ranks[0].adapters.a3", "must be left empty when tied_a13");
}

TEST(ValidationSideLora, UntiedA3Required) {
  Forward f(Format::mxfp4, /*tied=*/false);
  f.ranks[1].adapters.a3 = TensorView{};
  EXPECT_INVALID(f.run(), "ranks[1].adapters.a3", "is required but missing");
}

TEST(ValidationSideLora, ScaleFinite) {
  Forward f;
  f.ranks[0].adapters.scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_INVALID(f.run(), "ranks[0].adapters.scale", "must be finite");
  f.ranks[0].adapters.scale = 0.0f;  // s = 0 is the base layer, allowed
  EXPECT_NO_THROW(f.run());
}

TEST(ValidationSideLora, SavedWidthFollowsTying) {
  Forward f(Format::bf16, /*tied=*/true);
  const std::int64_t t = f.ranks[0].out.shape[0];
  f.ranks[0].saved.x_a = f.alloc.tensor(DType::f32, {t, 2 * kR});
  EXPECT_INVALID(f.run(), "ranks[0].saved.x_a", "dim 1 must equal lora_rank (tied) = 32");
  Forward g(Format::bf16, /*tied=*/false);
  g.ranks[1].saved.x_a = g.alloc.tensor(DType::f32, {g.ranks[1].out.shape[0], kR});
  EXPECT_INVALID(g.run(), "ranks[1].saved.x_a", "dim 1 must equal 2 * lora_rank = 64");
}

TEST(ValidationSideLora, SavedTokensMatchOutput) {
  Forward f;
  const std::int64_t t = f.ranks[1].out.shape[0];
  f.ranks[1].saved.z = f.alloc.tensor(DType::f32, {t + 1, kR});
  EXPECT_INVALID(f.run(), "ranks[1].saved.z",
                 "dim 0 must equal the token count = " + std::to_string(t));
}

TEST(ValidationSideLora, SavedPoolUndersized) {
  Forward f;
  const auto need = static_cast<std::int64_t>(side_lora_saved_pool_bytes(f.buffer.plan));
  f.ranks[0].saved.pool = f.alloc.tensor(DType::u8, {need - 1});
  EXPECT_INVALID(
      f.run(), "ranks[0].saved.pool",
      "must hold at least " + std::to_string(need) + " bytes (side_lora_saved_pool_bytes)");
}

TEST(ValidationSideLora, ForwardOutput) {
  Forward f;
  f.ranks[0].out.dtype = DType::f32;
  EXPECT_INVALID(f.run(), "ranks[0].out", "dtype must be bf16");
}

TEST(ValidationSideLora, ForwardRanks) {
  Forward f;
  f.ranks[0].rank = 1;
  EXPECT_INVALID(f.run(), "ranks[1].rank", "must not repeat a rank (also given at ranks[0])");
}

TEST(ValidationSideLora, BackwardScratchUndersized) {
  Backward b;
  const auto need = static_cast<std::int64_t>(side_lora_scratch_bytes(b.buffer.plan));
  b.ranks[1].scratch = b.alloc.tensor(DType::u8, {need / 2});
  EXPECT_INVALID(b.run(), "ranks[1].scratch",
                 "must hold at least " + std::to_string(need) + " bytes (side_lora_scratch_bytes)");
}

TEST(ValidationSideLora, BackwardScratchMissing) {
  Backward b;
  b.ranks[0].scratch = TensorView{};
  EXPECT_INVALID(b.run(), "ranks[0].scratch", "is required but missing");
}

TEST(ValidationSideLora, BackwardGradOfTokens) {
  Backward b;
  b.ranks[0].d_out = b.alloc.tensor(DType::bf16, {b.tokens(0) + 1, kH});
  EXPECT_INVALID(b.run(), "ranks[0].d_out",
                 "dim 0 must equal x's token count = " + std::to_string(b.tokens(0)));
  Backward c;
  c.ranks[1].grads.d_topk_weights = c.alloc.tensor(DType::f32, {c.tokens(1), kK + 1});
  EXPECT_INVALID(c.run(), "ranks[1].grads.d_topk_weights", "dim 1 must equal top_k = 2");
}

TEST(ValidationSideLora, BackwardRouting) {
  Backward b;
  b.ranks[1].topk_idx.dtype = DType::u8;
  EXPECT_INVALID(b.run(), "ranks[1].topk_idx", "dtype must be i32 or i64");
}

TEST(ValidationSideLora, BackwardAdapterGradsAreF32) {
  Backward b;
  b.ranks[0].grads.db1.dtype = DType::bf16;
  EXPECT_INVALID(b.run(), "ranks[0].grads.db1", "dtype must be f32");
  Backward c;
  c.ranks[1].grads.da2 = c.alloc.tensor(DType::f32, {kEl, kR, kI});
  EXPECT_INVALID(c.run(), "ranks[1].grads.da2", "dim 1 must equal intermediate = 128");
  Backward d;
  d.ranks[0].grads.db2 = d.alloc.tensor(DType::f32, {kR, kH + 128});
  EXPECT_INVALID(d.run(), "ranks[0].grads.db2", "dim 1 must equal hidden = 256");
}

TEST(ValidationSideLora, BackwardTiedDa3MustBeEmpty) {
  Backward b(Format::mxfp4, /*tied=*/true);
  b.ranks[0].grads.da3 = b.alloc.tensor(DType::f32, {kH, kR});
  EXPECT_INVALID(b.run(), "ranks[0].grads.da3", "must be left empty when tied_a13");
  Backward c(Format::mxfp4, /*tied=*/false);
  c.ranks[0].grads.da3 = TensorView{};
  EXPECT_INVALID(c.run(), "ranks[0].grads.da3", "is required but missing");
}

TEST(ValidationSideLora, BackwardDxRows) {
  Backward b(Format::bf16, /*tied=*/false, /*min_t=*/2);
  b.ranks[1].grads.dx.strides[0] = kH + 2;  // 4 bytes past the row
  EXPECT_INVALID(b.run(), "ranks[1].grads.dx", "stride of dim 0 must be a multiple of 16 bytes");
}

}  // namespace
}  // namespace megamoe
