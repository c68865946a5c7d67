// Tensor, buffer and rank rules, exercised through validate_pre_dispatch (the first call of
// every layer): one broken argument per test, the message naming it and the rule.
#include <gtest/gtest.h>

#include "core/validate.hpp"
#include "validation_test_support.hpp"

namespace megamoe {
namespace {

using test::FakeAllocator;
using test::kGpu0;
using validate::buffer_facts;
using validate::BufferFacts;
using validate::validate_pre_dispatch;

MoEConfig config() {
  MoEConfig c;
  c.shape = {1024, 512, 16, 4};
  c.weight_format = Format::fp8;
  c.act_format = Format::fp8;
  c.num_ranks = 2;
  c.max_tokens_per_rank = 64;
  return c;
}

// Valid inputs for every rank with a random live token count, fresh addresses each time.
struct Case {
  test::Seeded seeded;
  MoEConfig cfg = config();
  SymmBuffer buffer = test::fake_buffer(cfg);
  FakeAllocator alloc;
  std::vector<PreDispatchInputs> inputs;

  // min_t > 1 where a test needs row strides to matter (one row has no stride).
  explicit Case(std::int64_t min_t = 1) {
    for (int r = 0; r < cfg.num_ranks; ++r) {
      const std::int64_t t = seeded.uniform(min_t, cfg.max_tokens_per_rank);
      PreDispatchInputs in;
      in.rank = r;
      in.x = alloc.tensor(DType::bf16, {t, cfg.shape.hidden});
      in.topk_idx =
          alloc.tensor(seeded.uniform(0, 1) ? DType::i32 : DType::i64, {t, cfg.shape.top_k});
      in.topk_weights = alloc.tensor(DType::f32, {t, cfg.shape.top_k});
      inputs.push_back(in);
    }
  }
  BufferFacts facts() const { return buffer_facts(buffer, kGpu0); }
  void run() const { validate_pre_dispatch(facts(), inputs); }
  std::int64_t tokens(int r) const { return inputs[static_cast<std::size_t>(r)].x.shape[0]; }
};

TEST(ValidationPreDispatch, AcceptsValidInputs) {
  Case c;
  EXPECT_NO_THROW(c.run());
  // Padded rows (16-byte multiple), optional expert scales, and an empty rank are fine.
  c.inputs[0].x.strides[0] = c.cfg.shape.hidden + 64;
  c.inputs[1].expert_scales = c.alloc.tensor(DType::f32, {c.cfg.shape.num_experts});
  c.inputs[1].x = TensorView::contiguous(nullptr, DType::bf16, {0, c.cfg.shape.hidden}, kGpu0);
  c.inputs[1].topk_idx = TensorView::contiguous(nullptr, DType::i32, {0, 4}, kGpu0);
  c.inputs[1].topk_weights = TensorView::contiguous(nullptr, DType::f32, {0, 4}, kGpu0);
  EXPECT_NO_THROW(c.run());
}

TEST(ValidationPreDispatch, MissingTensor) {
  Case c;
  c.inputs[1].topk_weights.data = nullptr;
  EXPECT_INVALID(c.run(), "inputs[1].topk_weights", "is required but missing");
  Case d;
  d.inputs[0].x = TensorView{};
  EXPECT_INVALID(d.run(), "inputs[0].x", "is required but missing");
}

TEST(ValidationPreDispatch, CpuTensor) {
  Case c;
  c.inputs[0].x.device = {DeviceKind::cpu, 0};
  EXPECT_INVALID(c.run(), "inputs[0].x", "must be a CUDA tensor");
}

TEST(ValidationPreDispatch, WrongGpu) {
  Case c;
  c.inputs[1].topk_idx.device.index = 1;
  EXPECT_INVALID(c.run(), "inputs[1].topk_idx", "must be on the buffer's GPU cuda:0");
}

// A buffer allocated on one GPU, called with another current (tensors there too): refused,
// naming the buffer's GPU, before any tensor is looked at.
TEST(ValidationPreDispatch, BufferOnAnotherGpu) {
  Case c;
  c.buffer.device = 1;
  EXPECT_INVALID(c.run(), "buffer", "lives on cuda:1");
  for (PreDispatchInputs& in : c.inputs) {
    for (TensorView* t : {&in.x, &in.topk_idx, &in.topk_weights}) t->device.index = 1;
  }
  EXPECT_NO_THROW(validate_pre_dispatch(buffer_facts(c.buffer, {DeviceKind::cuda, 1}), c.inputs));
}

TEST(ValidationPreDispatch, XDtype) {
  Case c;
  c.inputs[0].x.dtype = DType::f16;
  EXPECT_INVALID(c.run(), "inputs[0].x", "dtype must be bf16");
}

TEST(ValidationPreDispatch, XNdim) {
  Case c;
  c.inputs[0].x = c.alloc.tensor(DType::bf16, {1, c.tokens(0), c.cfg.shape.hidden});
  EXPECT_INVALID(c.run(), "inputs[0].x", "must have 2 dimensions");
}

TEST(ValidationPreDispatch, XHidden) {
  Case c;
  c.inputs[1].x = c.alloc.tensor(DType::bf16, {c.tokens(1), 2048});
  EXPECT_INVALID(c.run(), "inputs[1].x", "dim 1 must equal hidden = 1024");
}

TEST(ValidationPreDispatch, TooManyTokens) {
  Case c;
  c.inputs[0].x = c.alloc.tensor(DType::bf16, {65, c.cfg.shape.hidden});
  EXPECT_INVALID(c.run(), "inputs[0].x", "dim 0 must be in [0, max_tokens_per_rank = 64]");
}

TEST(ValidationPreDispatch, XLastDimNotDense) {
  Case c;
  c.inputs[0].x.strides[1] = 2;
  c.inputs[0].x.strides[0] = 2 * c.cfg.shape.hidden;
  EXPECT_INVALID(c.run(), "inputs[0].x", "last dimension must be dense (stride 1)");
}

TEST(ValidationPreDispatch, XRowStrideAlignment) {
  Case c(/*min_t=*/2);
  c.inputs[1].x.strides[0] = c.cfg.shape.hidden + 4;  // 8 bytes past the row
  EXPECT_INVALID(c.run(), "inputs[1].x", "stride of dim 0 must be a multiple of 16 bytes");
}

TEST(ValidationPreDispatch, XRowsOverlap) {
  Case c;
  c.inputs[0].x = c.alloc.tensor(DType::bf16, {2, c.cfg.shape.hidden});
  c.inputs[0].x.strides[0] = c.cfg.shape.hidden - 8;
  EXPECT_INVALID(c.run(), "inputs[0].x", "rows must not overlap");
}

TEST(ValidationPreDispatch, PointerAlignment) {
  Case c;
  c.inputs[0].x.data = static_cast<char*>(c.inputs[0].x.data) + 8;
  EXPECT_INVALID(c.run(), "inputs[0].x", "data pointer must be 16-byte aligned");
}

TEST(ValidationPreDispatch, TopkDtype) {
  Case c;
  c.inputs[0].topk_idx.dtype = DType::f32;
  EXPECT_INVALID(c.run(), "inputs[0].topk_idx", "dtype must be i32 or i64");
  Case d;
  d.inputs[1].topk_weights.dtype = DType::bf16;
  EXPECT_INVALID(d.run(), "inputs[1].topk_weights", "dtype must be f32");
}

TEST(ValidationPreDispatch, TopkTokenCount) {
  Case c;
  c.inputs[1].topk_idx = c.alloc.tensor(DType::i32, {c.tokens(1) + 1, c.cfg.shape.top_k});
  EXPECT_INVALID(c.run(), "inputs[1].topk_idx",
                 "dim 0 must equal x's token count = " + std::to_string(c.tokens(1)));
}

TEST(ValidationPreDispatch, TopkK) {
  Case c;
  c.inputs[0].topk_weights = c.alloc.tensor(DType::f32, {c.tokens(0), 8});
  EXPECT_INVALID(c.run(), "inputs[0].topk_weights", "dim 1 must equal top_k = 4");
}

TEST(ValidationPreDispatch, TopkContiguous) {
  Case c(/*min_t=*/2);
  c.inputs[0].topk_idx = c.alloc.tensor(DType::i32, {c.tokens(0), c.cfg.shape.top_k});
  c.inputs[0].topk_idx.strides[0] = 8;
  EXPECT_INVALID(c.run(), "inputs[0].topk_idx", "must be contiguous");
}

TEST(ValidationPreDispatch, ExpertScalesShape) {
  Case c;
  c.inputs[0].expert_scales = c.alloc.tensor(DType::f32, {8});
  EXPECT_INVALID(c.run(), "inputs[0].expert_scales", "dim 0 must equal num_experts = 16");
}

TEST(ValidationPreDispatch, RankOutOfRange) {
  Case c;
  c.inputs[1].rank = 2;
  EXPECT_INVALID(c.run(), "inputs[1].rank", "must be in [0, num_ranks = 2)");
  c.inputs[1].rank = -1;
  EXPECT_INVALID(c.run(), "inputs[1].rank", "must be in [0, num_ranks = 2)");
}

TEST(ValidationPreDispatch, RankTwice) {
  Case c;
  c.inputs[1].rank = 0;
  EXPECT_INVALID(c.run(), "inputs[1].rank", "must not repeat a rank (also given at inputs[0])");
}

TEST(ValidationPreDispatch, RankNotDriven) {
  Case c;
  // An NCCL-style process that drives rank 1 only.
  c.buffer.memory =
      std::make_shared<test::FakePeerMemory>(2, std::vector<int>{1}, c.buffer.plan.total_bytes);
  c.inputs.erase(c.inputs.begin() + 1);
  EXPECT_INVALID(c.run(), "inputs[0].rank", "must be a rank this process drives {1}");
}

TEST(ValidationPreDispatch, AnySubsetOfDrivenRanksButNotNone) {
  Case c;
  c.inputs.pop_back();  // one rank's inputs at a time is fine: each region is independent
  EXPECT_NO_THROW(c.run());
  c.inputs.clear();
  EXPECT_INVALID(c.run(), "inputs", "must name at least one driven rank");
}

TEST(ValidationPreDispatch, BufferWithoutMemory) {
  Case c;
  c.buffer.memory.reset();
  EXPECT_INVALID(c.run(), "buffer.memory", "is required");
}

TEST(ValidationPreDispatch, BufferUndersized) {
  Case c;
  c.buffer.memory = std::make_shared<test::FakePeerMemory>(2, std::vector<int>{0, 1},
                                                           c.buffer.plan.total_bytes - 1);
  EXPECT_INVALID(
      c.run(), "buffer.memory",
      "must hold at least the plan's total_bytes = " + std::to_string(c.buffer.plan.total_bytes));
}

TEST(ValidationPreDispatch, BufferRankCount) {
  Case c;
  c.buffer.memory =
      std::make_shared<test::FakePeerMemory>(4, std::vector<int>{0, 1}, c.buffer.plan.total_bytes);
  EXPECT_INVALID(c.run(), "buffer.memory", "must have the plan's num_ranks = 2 ranks");
}

TEST(ValidationPreDispatch, BufferDrivenRanksConsistent) {
  Case c;
  c.buffer.memory =
      std::make_shared<test::FakePeerMemory>(2, std::vector<int>{0, 0}, c.buffer.plan.total_bytes);
  EXPECT_INVALID(c.run(), "buffer.memory", "driven ranks must be distinct and in [0, 2)");
  c.buffer.memory =
      std::make_shared<test::FakePeerMemory>(2, std::vector<int>{}, c.buffer.plan.total_bytes);
  EXPECT_INVALID(c.run(), "buffer.memory", "must drive at least one rank");
}

TEST(ValidationPreDispatch, BufferDeviceIsCuda) {
  Case c;
  EXPECT_INVALID(validate_pre_dispatch(buffer_facts(c.buffer, {DeviceKind::cpu, 0}), c.inputs),
                 "buffer", "must live on a CUDA device");
}

TEST(ValidationPreDispatch, BufferPlanConfigRevalidated) {
  Case c;
  c.buffer.plan.config.shape.hidden = 1000;  // a plan edited after planning
  EXPECT_INVALID(c.run(), "config.shape.hidden", "must be a multiple of 128");
}

}  // namespace
}  // namespace megamoe

namespace megamoe {
namespace {

TEST(ValidationPreDispatch, FactsWithoutPlan) {
  const validate::BufferFacts no_plan;
  EXPECT_INVALID(validate::validate_pre_dispatch(no_plan, {}), "buffer.plan", "is required");
}

}  // namespace
}  // namespace megamoe
