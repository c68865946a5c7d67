#pragma once
// `megamoe bench --ranks R`: options shared by the parent (cmd_bench.cpp, which spawns one child
// per GPU) and the children (multi_gpu_rank.cpp, which run one rank each). docs/multi_gpu.md.
#include <cstdint>
#include <string>
#include <vector>

#include "commands.hpp"
#include "runtime/process_group.hpp"

namespace megamoe::tool {

struct MultiGpuBenchOptions {
  int ranks = 1;
  std::vector<std::string> presets;  // default: dsv4-flash, h6144-e256-k8
  std::vector<std::int64_t> tokens;  // per rank; default 1, 8, 16, 128
  // Ragged rows (--rank-tokens 0/37,1/512): each row one count per rank, 0 an idle rank. Run
  // after the `tokens` rows, which are left out when only --rank-tokens is given.
  std::vector<std::vector<std::int64_t>> rank_tokens;
  bool check_virtual = false;  // rank 0 reruns with R virtual ranks, compares bitwise
  bool timeout_test = false;   // rank R-1 skips the MoE call; the others must time out
  bool has_seed = false;
  std::uint64_t seed = 0;
  int iters = 20;                   // MoE calls per timed graph
  int reps = 11;                    // timed graph launches (median)
  std::string routing = "uniform";  // uniform | zipf | masked20
  bool fp8_combine = false;         // config.fp8_combine: e4m3 combine slots (half the bytes)
  std::int64_t group_timeout_ms = 600000;
  std::int64_t peer_timeout_ms = 2000;  // MEGAMOE_PEER_TIMEOUT_MS of the timeout test
  std::string out_prefix;               // rank 0 writes <prefix>.md and <prefix>.csv
};

// InvalidArgument naming the option for bad values (ranks outside 1..8, --timeout-test with
// one rank, unknown routing or preset, token counts < 1, --rank-tokens rows without one count
// >= 0 per rank).
MultiGpuBenchOptions parse_multi_gpu_options(Args args);

// The child's work: NCCL communicator, `nccl` symmetric buffer, every preset and token count.
// Returns the process exit code.
int run_bench_rank(const MultiGpuBenchOptions& options, runtime::RankChannel& channel);

// NVLink bytes of one call, per rank that owns `remote_in` routes of other ranks' tokens:
// payload = x row (H/2) + its UE4M3 scales (H/16) + global scale and route weight (8) pulled,
// plus the result row pushed back: bf16 (2H), or with FP8 slots e4m3 (H) and an f32 scale per 128.
double nvlink_payload_bytes(std::int64_t hidden, std::int64_t remote_in, bool fp8_combine);
// The kernels' NVLink traffic, modelled: the pipelined kernel's FC1 re-reads each remote token
// row once per 32-column unit (I/32 times), the wide kernel reads it once (its token-decode
// phase); the route metadata, the pushed result rows, and phase 0 of every CTA scanning every
// peer's topk_idx.
double nvlink_kernel_bytes_model(std::int64_t hidden, std::int64_t inter, int top_k, int ranks,
                                 std::int64_t tokens, int ctas, std::int64_t remote_in,
                                 bool fp8_combine, bool wide_kernel);

}  // namespace megamoe::tool
