#pragma once
// The NVFP4 MegaMoE layer on the ranks one process drives, with weights and inputs that every
// process derives from one shared seed: a run with R virtual ranks on one GPU (`local`) and a
// run with one process per GPU (`nccl`) see the same bytes, so their outputs can be compared
// bitwise with only the outputs crossing processes (docs/multi_gpu.md). Used by
// `megamoe bench --ranks R` and tests/gpu/test_multi_gpu.cpp.
#include <cstdint>
#include <memory>
#include <vector>

#include "megamoe/buffer.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "megamoe/reference.hpp"
#include "runtime/device_memory.hpp"

namespace megamoe::runtime {

struct EpNvfp4Setup {
  // nvfp4 x nvfp4; num_ranks = R; max_tokens_per_rank >= every token count used.
  MoEConfig config;
  std::uint64_t seed = 1;
  reference::RoutingOptions routing;
};

// Routes that cross ranks for one token count (from the generated routing, exact).
struct EpRouteCounts {
  std::vector<std::int64_t> remote_in;   // [R] routes of other ranks' tokens to rank r's experts
  std::vector<std::int64_t> remote_out;  // [R] routes of rank r's tokens to other ranks' experts
  std::int64_t live = 0;                 // unmasked routes, all ranks
};

class EpNvfp4Ranks {
 public:
  // Weights of every rank `buffer` drives: checkpoint tensors filled on the device from
  // (seed, rank) (random e2m1 codes, UE4M3 scales in [2^-2, 2^2 * 1.875]), then
  // transform_weights_for_mega_moe. buffer.plan.config must be setup.config.
  EpNvfp4Ranks(const EpNvfp4Setup& setup, const SymmBuffer& buffer);
  ~EpNvfp4Ranks();
  EpNvfp4Ranks(const EpNvfp4Ranks&) = delete;
  EpNvfp4Ranks& operator=(const EpNvfp4Ranks&) = delete;

  // New inputs of `tokens` tokens per rank: reference::random_inputs for all R ranks (every
  // process generates all of them and keeps its own ranks' rows), uploaded; outputs poisoned
  // with 0xFF bytes (a bf16 NaN) so unwritten rows show. tokens in [1, max_tokens_per_rank].
  void set_tokens(std::int64_t tokens);
  // Ragged batches: counts[r] tokens on rank r, 0 for an idle rank (its tensors empty with null
  // data); one draw of max(counts) tokens per rank of which rank r keeps its first counts[r].
  void set_rank_tokens(const std::vector<std::int64_t>& counts);
  std::int64_t tokens(int rank) const;
  EpRouteCounts route_counts() const;
  // Routes per expert over every rank's tokens (masked routes excluded): [E].
  std::vector<std::int64_t> expert_route_counts() const;

  // mega_moe_pre_dispatch of the driven ranks, then nvfp4_mega_moe: enqueued on `stream`. With
  // one process per GPU the kernel's entry barrier orders every rank's pre-dispatch before any
  // rank's phase 0 (docs/multi_gpu.md, "Start of a call").
  void pre_dispatch(megamoe::Stream stream);
  // share_largest: pass the largest count of the last set_rank_tokens as
  // max_tokens_across_ranks (every rank's BLOCK_M from it); else each process's own outputs.
  void moe(megamoe::Stream stream, bool share_largest = false);

  // bf16 bits [T, H] of driven rank `rank` (synchronous copy).
  std::vector<std::uint16_t> output(int rank) const;
  const std::vector<int>& driven() const { return driven_; }

 private:
  struct Rank;
  EpNvfp4Setup setup_;
  const SymmBuffer& buffer_;
  std::vector<int> driven_;
  std::vector<std::unique_ptr<Rank>> ranks_;  // in driven_ order
  std::vector<Nvfp4KernelWeights> weight_views_;
  std::vector<PreDispatchInputs> pd_;
  std::vector<Nvfp4MoEOutputs> outputs_;
  // The rank's first row among all ranks' tokens (ranks in order).
  std::int64_t first_token(int rank) const;

  reference::MoEInputs inputs_;
  std::vector<std::int64_t> rank_tokens_;  // of the last set_rank_tokens; empty before it
};

// Index of the first difference of two bf16 arrays, or -1 when bitwise equal (sizes differing:
// the shorter size).
std::int64_t first_difference(const std::vector<std::uint16_t>& a,
                              const std::vector<std::uint16_t>& b);
// Elements equal to 0xFFFF (the poison): rows the kernel never wrote.
std::int64_t count_poison(const std::vector<std::uint16_t>& v);

}  // namespace megamoe::runtime
