// Sizes of the caller-allocated side-LoRA tensors (side_lora.hpp). Provisional until the
// side-LoRA kernels land: callers must always ask these functions, never hard-code the sizes.
#include "megamoe/error.hpp"
#include "megamoe/side_lora.hpp"

namespace megamoe {
namespace {

std::size_t align128(std::size_t v) {
  return (v + 127) / 128 * 128;
}

void require_side_lora(const SymmBufferPlan& plan, std::string_view function) {
  if (!plan.config.side_lora) {
    throw_invalid("plan", std::string(function) + " needs a plan with side_lora = true");
  }
}

}  // namespace

std::size_t side_lora_saved_pool_bytes(const SymmBufferPlan& plan) {
  require_side_lora(plan, "side_lora_saved_pool_bytes");
  const auto rows = static_cast<std::size_t>(plan.pool_rows);
  const auto inter = static_cast<std::size_t>(plan.config.shape.intermediate);
  // The forward's route list (i32 {src_rank, token, k}) and the bf16 FC1 output g|u [rows, 2I]
  // of every pool row, in pool order.
  return align128(rows * 12) + align128(rows * 2 * inter * 2);
}

std::size_t side_lora_scratch_bytes(const SymmBufferPlan& plan) {
  require_side_lora(plan, "side_lora_scratch_bytes");
  const auto rows = static_cast<std::size_t>(plan.pool_rows);
  const auto tokens = static_cast<std::size_t>(plan.config.max_tokens_per_rank);
  const auto r = static_cast<std::size_t>(plan.config.lora_rank);
  // FP32 rank-space vectors (a BF16 rank-space buffer is a known accuracy trap): per pool row
  // dg B1^T, du B3^T and a A2_e; per token their sums over the token's routes.
  return align128(rows * 3 * r * 4) + align128(tokens * 3 * r * 4);
}

}  // namespace megamoe
