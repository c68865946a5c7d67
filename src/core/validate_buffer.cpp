// Validation of the buffer a call runs on, of the rank lists, and of pre-dispatch inputs.
#include <algorithm>
#include <string>

#include "core/validate.hpp"
#include "megamoe/error.hpp"

namespace megamoe::validate {
namespace {

std::string num(std::int64_t v) {
  return std::to_string(v);
}

std::string list_string(const std::vector<int>& v) {
  std::string s = "{";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

}  // namespace

BufferFacts buffer_facts(const SymmBuffer& buffer, Device device) {
  if (!buffer.memory) {
    throw_invalid("buffer.memory",
                  "is required (allocate the buffer with get_symm_buffer_for_mega_moe)");
  }
  BufferFacts f;
  f.plan = &buffer.plan;
  f.num_ranks = buffer.memory->num_ranks();
  f.driven_ranks = buffer.memory->driven_ranks();
  f.bytes_per_rank = buffer.memory->bytes_per_rank();
  f.device = device;
  f.buffer_device = buffer.device;
  return f;
}

void validate_buffer(const BufferFacts& b) {
  if (b.plan == nullptr) throw_invalid("buffer.plan", "is required");
  validate_config(b.plan->config);
  const int r = b.plan->config.num_ranks;
  if (b.num_ranks != r) {
    throw_invalid("buffer.memory", "must have the plan's num_ranks = " + num(r) + " ranks",
                  num(b.num_ranks));
  }
  if (b.bytes_per_rank < b.plan->total_bytes) {
    throw_invalid("buffer.memory",
                  "must hold at least the plan's total_bytes = " +
                      std::to_string(b.plan->total_bytes) + " bytes per rank",
                  std::to_string(b.bytes_per_rank) + " bytes");
  }
  if (b.driven_ranks.empty()) {
    throw_invalid("buffer.memory", "must drive at least one rank", "none");
  }
  std::vector<int> sorted = b.driven_ranks;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() < 0 || sorted.back() >= r ||
      std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw_invalid("buffer.memory", "driven ranks must be distinct and in [0, " + num(r) + ")",
                  list_string(b.driven_ranks));
  }
  if (b.device.kind != DeviceKind::cuda) {
    throw_invalid("buffer", "must live on a CUDA device", "cpu");
  }
  if (b.buffer_device != b.device.index) {
    throw_invalid("buffer",
                  "lives on cuda:" + num(b.buffer_device) +
                      ": call with that GPU current and its tensors there",
                  "a call on cuda:" + num(b.device.index));
  }
}

void check_family(const BufferFacts& b, std::string_view function, bool ok,
                  std::string_view wanted) {
  if (!ok) {
    throw_invalid("buffer",
                  std::string(function) + " needs a buffer planned for " + std::string(wanted),
                  describe(b.plan->config));
  }
}

void check_rank_set(const BufferFacts& b, std::span<const int> ranks, std::string_view list,
                    RankCoverage coverage) {
  const int r = b.plan->config.num_ranks;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::string name = field(indexed(list, i), "rank");
    const int rank = ranks[i];
    if (rank < 0 || rank >= r) {
      throw_invalid(name, "must be in [0, num_ranks = " + num(r) + ")", num(rank));
    }
    if (std::find(b.driven_ranks.begin(), b.driven_ranks.end(), rank) == b.driven_ranks.end()) {
      throw_invalid(name, "must be a rank this process drives " + list_string(b.driven_ranks),
                    num(rank));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (ranks[j] == rank) {
        throw_invalid(name, "must not repeat a rank (also given at " + indexed(list, j) + ")",
                      num(rank));
      }
    }
  }
  if (coverage == RankCoverage::subset) {
    if (ranks.empty()) throw_invalid(list, "must name at least one driven rank", "0 entries");
    return;
  }
  if (ranks.size() != b.driven_ranks.size()) {
    throw_invalid(list,
                  "must have one entry per driven rank (" + num(std::ssize(b.driven_ranks)) + ")",
                  num(std::ssize(ranks)) + " entries");
  }
}

void validate_pre_dispatch(const BufferFacts& b, std::span<const PreDispatchInputs> inputs) {
  validate_buffer(b);
  const MoEConfig& c = b.plan->config;
  std::vector<int> ranks;
  for (const PreDispatchInputs& in : inputs) ranks.push_back(in.rank);
  check_rank_set(b, ranks, "inputs", RankCoverage::subset);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const PreDispatchInputs& in = inputs[i];
    const std::string base = indexed("inputs", i);
    const std::int64_t t = check_token_rows(in.x, field(base, "x"), DType::bf16, c, b.device);
    check_tensor_any(in.topk_idx, field(base, "topk_idx"), {DType::i32, DType::i64},
                     {{t, "x's token count"}, {c.shape.top_k, "top_k"}}, b.device);
    check_tensor(in.topk_weights, field(base, "topk_weights"), DType::f32,
                 {{t, "x's token count"}, {c.shape.top_k, "top_k"}}, b.device);
    if (in.expert_scales.data != nullptr || in.expert_scales.ndim != 0) {
      check_tensor(in.expert_scales, field(base, "expert_scales"), DType::f32,
                   {{c.shape.num_experts, "num_experts"}}, b.device);
    }
  }
}

}  // namespace megamoe::validate
