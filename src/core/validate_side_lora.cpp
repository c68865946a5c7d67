// Validation of the side-LoRA forward and backward (side_lora.hpp).
#include <cmath>
#include <string>

#include "core/validate.hpp"
#include "megamoe/error.hpp"

namespace megamoe::validate {
namespace {

void check_side_lora_buffer(const BufferFacts& b, std::string_view function) {
  validate_buffer(b);
  check_family(b, function, b.plan->config.side_lora, "side_lora = true");
}

void check_base(const MoEConfig& c, const SideLoraBaseWeights& w, const std::string& name,
                Device device) {
  if (c.weight_format == Format::mxfp4) {
    check_mxfp4_weight_pair(c, w.w13, w.w13_sf, w.w2, w.w2_sf, name, device);
  } else {
    check_bf16_weight_pair(c, w.w13, w.w2, name, device);
    check_absent(w.w13_sf, field(name, "w13_sf"), "with bf16 base weights");
    check_absent(w.w2_sf, field(name, "w2_sf"), "with bf16 base weights");
  }
}

void check_adapters(const MoEConfig& c, const SideLoraAdapters& a, const std::string& name,
                    Device device) {
  const std::int64_t h = c.shape.hidden;
  const std::int64_t inter = c.shape.intermediate;
  const Dim experts{c.experts_per_rank(), "experts per rank"};
  const Dim rank{c.lora_rank, "lora_rank"};
  if (!std::isfinite(a.scale)) {
    throw_invalid(field(name, "scale"), "must be finite", std::to_string(a.scale));
  }
  check_tensor(a.a1, field(name, "a1"), DType::bf16, {{h, "hidden"}, rank}, device);
  if (a.tied_a13) {
    check_absent(a.a3, field(name, "a3"), "when tied_a13 (A3 = A1)");
  } else {
    check_tensor(a.a3, field(name, "a3"), DType::bf16, {{h, "hidden"}, rank}, device);
  }
  check_tensor(a.b1, field(name, "b1"), DType::bf16, {experts, rank, {inter, "intermediate"}},
               device);
  check_tensor(a.b3, field(name, "b3"), DType::bf16, {experts, rank, {inter, "intermediate"}},
               device);
  check_tensor(a.a2, field(name, "a2"), DType::bf16, {experts, {inter, "intermediate"}, rank},
               device);
  check_tensor(a.b2, field(name, "b2"), DType::bf16, {rank, {h, "hidden"}}, device);
}

void check_saved(const SymmBufferPlan& plan, const SideLoraSaved& s, bool tied, std::int64_t t,
                 const std::string& name, Device device) {
  const std::int64_t r = plan.config.lora_rank;
  const Dim tokens{t, "the token count"};
  check_tensor(s.x_a, field(name, "x_a"), DType::f32,
               {tokens, {tied ? r : 2 * r, tied ? "lora_rank (tied)" : "2 * lora_rank"}}, device);
  check_tensor(s.z, field(name, "z"), DType::f32, {tokens, {r, "lora_rank"}}, device);
  const std::string pool = field(name, "pool");
  check_defined(s.pool, pool);
  check_device(s.pool, pool, device);
  check_dtype(s.pool, pool, DType::u8);
  check_contiguous(s.pool, pool);
  check_pointer_aligned(s.pool, pool);
  check_min_bytes(s.pool, pool, side_lora_saved_pool_bytes(plan), "side_lora_saved_pool_bytes");
}

}  // namespace

void validate_side_lora_forward(const BufferFacts& b, std::span<const SideLoraForwardArgs> ranks) {
  check_side_lora_buffer(b, "side_lora_mega_moe_forward");
  const MoEConfig& c = b.plan->config;
  std::vector<int> ids;
  for (const SideLoraForwardArgs& a : ranks) ids.push_back(a.rank);
  check_rank_set(b, ids, "ranks");
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const SideLoraForwardArgs& a = ranks[i];
    const std::string name = indexed("ranks", i);
    check_base(c, a.base, field(name, "base"), b.device);
    check_adapters(c, a.adapters, field(name, "adapters"), b.device);
    const std::int64_t t = check_token_rows(a.out, field(name, "out"), DType::bf16, c, b.device);
    check_saved(*b.plan, a.saved, a.adapters.tied_a13, t, field(name, "saved"), b.device);
  }
}

void validate_side_lora_backward(const BufferFacts& b,
                                 std::span<const SideLoraBackwardArgs> ranks) {
  check_side_lora_buffer(b, "side_lora_mega_moe_backward");
  const MoEConfig& c = b.plan->config;
  std::vector<int> ids;
  for (const SideLoraBackwardArgs& a : ranks) ids.push_back(a.rank);
  check_rank_set(b, ids, "ranks");
  const std::int64_t e = c.experts_per_rank();
  const std::int64_t h = c.shape.hidden;
  const std::int64_t inter = c.shape.intermediate;
  const std::int64_t k = c.shape.top_k;
  const Dim experts{e, "experts per rank"};
  const Dim rank{c.lora_rank, "lora_rank"};
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const SideLoraBackwardArgs& a = ranks[i];
    const std::string name = indexed("ranks", i);
    const std::int64_t t = check_token_rows(a.x, field(name, "x"), DType::bf16, c, b.device);
    const Dim tokens{t, "x's token count"};
    check_tensor_any(a.topk_idx, field(name, "topk_idx"), {DType::i32, DType::i64},
                     {tokens, {k, "top_k"}}, b.device);
    check_tensor(a.topk_weights, field(name, "topk_weights"), DType::f32, {tokens, {k, "top_k"}},
                 b.device);
    check_tensor(a.d_out, field(name, "d_out"), DType::bf16, {tokens, {h, "hidden"}}, b.device,
                 /*contiguous=*/false);
    check_base(c, a.base, field(name, "base"), b.device);
    check_adapters(c, a.adapters, field(name, "adapters"), b.device);
    check_saved(*b.plan, a.saved, a.adapters.tied_a13, t, field(name, "saved"), b.device);
    const std::string scratch = field(name, "scratch");
    check_defined(a.scratch, scratch);
    check_device(a.scratch, scratch, b.device);
    check_dtype(a.scratch, scratch, DType::u8);
    check_contiguous(a.scratch, scratch);
    check_pointer_aligned(a.scratch, scratch);
    check_min_bytes(a.scratch, scratch, side_lora_scratch_bytes(*b.plan),
                    "side_lora_scratch_bytes");

    const SideLoraGrads& g = a.grads;
    const std::string gn = field(name, "grads");
    check_tensor(g.dx, field(gn, "dx"), DType::bf16, {tokens, {h, "hidden"}}, b.device,
                 /*contiguous=*/false);
    check_tensor(g.d_topk_weights, field(gn, "d_topk_weights"), DType::f32, {tokens, {k, "top_k"}},
                 b.device);
    check_tensor(g.da1, field(gn, "da1"), DType::f32, {{h, "hidden"}, rank}, b.device);
    if (a.adapters.tied_a13) {
      check_absent(g.da3, field(gn, "da3"), "when tied_a13 (da1 receives both gradients)");
    } else {
      check_tensor(g.da3, field(gn, "da3"), DType::f32, {{h, "hidden"}, rank}, b.device);
    }
    check_tensor(g.db1, field(gn, "db1"), DType::f32, {experts, rank, {inter, "intermediate"}},
                 b.device);
    check_tensor(g.db3, field(gn, "db3"), DType::f32, {experts, rank, {inter, "intermediate"}},
                 b.device);
    check_tensor(g.da2, field(gn, "da2"), DType::f32, {experts, {inter, "intermediate"}, rank},
                 b.device);
    check_tensor(g.db2, field(gn, "db2"), DType::f32, {rank, {h, "hidden"}}, b.device);
  }
}

}  // namespace megamoe::validate
