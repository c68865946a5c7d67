#pragma once
// The symmetric buffer (docs/design.md, "Symmetric buffer"): every rank allocates the same byte
// layout; kernels receive the peer base pointers and their rank id.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "megamoe/config.hpp"

namespace megamoe {

// One named view of the buffer. Offsets are from the rank's base pointer.
struct BufferRegion {
  std::string name;
  std::size_t offset = 0;
  std::size_t bytes = 0;
  std::size_t alignment = 0;  // the offset is a multiple of this
  // Row-structured regions: `rows` rows `row_pitch` bytes apart (pitch a multiple of 16 where
  // TMA reads the rows, so scale rows may be padded past H/block). 0 for unstructured regions.
  std::size_t rows = 0;
  std::size_t row_pitch = 0;
};

// The exact byte layout of one rank's buffer for a configuration.
//
// Regions (names are the contract between planner, pre-dispatch and the fused kernels):
//   input region, written by pre-dispatch on the owning rank, read by every rank:
//     "x"            [T_max, H] quantized tokens (bytes per row: H fp8, H/2 fp4, 2H bf16)
//     "x_sf"         block scales, row-major [T_max, H/block] (fp8 f32 scales: 4 B each); rows
//                    are BufferRegion::row_pitch bytes apart (padded to 16 B for TMA)
//     "x_global"     [T_max] f32 per-token global scale (nvfp4 activations only)
//     "topk_idx"     [T_max, K] i32, -1 = masked (padding rows [T, T_max) are all -1)
//     "topk_weights" [T_max, K] f32 (0 on masked routes)
//     "num_tokens"   i32 live token count of the last pre-dispatch
//     "error_count"  u32 out-of-range or repeated expert ids seen by pre-dispatch (host-readable)
//   expert pools, local to the rank that owns the experts:
//     "route_list"   i32 triples {src_rank, token, k} of the routes to local experts, grouped by
//                    expert, each expert padded to BLOCK_M
//     "fc1_pool", "fc1_pool_sf", "fc1_pool_global"  gathered FC1 inputs (same formats as "x")
//     "fc2_pool", "fc2_pool_sf"                     the re-quantized intermediate [rows, I]
//     "token_f16"    NVFP4 only (H, I multiples of 256, bf16 combine): the wide kernel's exactly
//                    decoded FC1 / FC2 operand, per pool tile max(H, I) / 256 chunks of
//                    [BLOCK_M][264] f16 (rank-local scratch)
//   "combine"       [K, T_max, H] bf16 (or fp8 + "combine_sf" f32 [K, T_max, H/128]), written by
//                   the expert owners
//   "sync"          counters and flags (cross-rank barrier, grid barrier, expert counts)
// Pool rows are sized for the worst case reachable at each live-token count under the BLOCK_M
// heuristic, not for the smallest BLOCK_M's worst case.
struct SymmBufferPlan {
  MoEConfig config;
  std::vector<BufferRegion> regions;  // in offset order, non-overlapping
  std::size_t total_bytes = 0;
  // Rows of every expert pool ("route_list", "fc1_pool*", "fc2_pool*"): the largest padded
  // route count any reachable (token count, BLOCK_M) pair can produce (docs/api.md).
  std::int64_t pool_rows = 0;
  // Fields of the "sync" region, offsets from its start: "rank_barrier", "grid_barrier",
  // "send_counts", "expert_offsets", "block_ready", "status" (docs/api.md).
  std::vector<BufferRegion> sync_fields;

  // Throws InvalidArgument when no region has that name (absent regions: e.g. "x_global" for fp8).
  const BufferRegion& region(std::string_view name) const;
  bool has(std::string_view name) const;
};

// Validates the configuration (throws InvalidArgument) and plans the layout.
SymmBufferPlan plan_symm_buffer(const MoEConfig& config);

// Where the per-rank buffers live. `local`: R virtual ranks on one GPU, one allocation per rank;
// `nccl`: one process per GPU, NCCL symmetric windows (ncclMemAlloc + ncclCommWindowRegister).
class PeerMemory {
 public:
  virtual ~PeerMemory() = default;
  virtual std::string_view kind() const = 0;
  virtual int num_ranks() const = 0;
  // Ranks whose kernels this process launches: all R for `local`, its own rank for `nccl`.
  virtual std::vector<int> driven_ranks() const = 0;
  virtual std::size_t bytes_per_rank() const = 0;
  // Device pointer to rank `rank`'s buffer, valid in this process.
  virtual void* base(int rank) const = 0;
};

std::unique_ptr<PeerMemory> make_local_peer_memory(int num_ranks, std::size_t bytes_per_rank);
// `comm` is an ncclComm_t. Throws CudaError when NCCL is missing or older than 2.28.
std::unique_ptr<PeerMemory> make_nccl_peer_memory(void* comm, std::size_t bytes_per_rank);

// A planned buffer with its memory: what get_symm_buffer_for_mega_moe returns.
struct SymmBuffer {
  SymmBufferPlan plan;
  std::shared_ptr<PeerMemory> memory;
  // Ordinal of the GPU the memory lives on: the current GPU when get_symm_buffer_for_mega_moe
  // allocated it. Calls on the buffer must run with that GPU current.
  int device = 0;

  // Device pointer to `region` of rank `rank`'s buffer.
  void* view(int rank, std::string_view region) const;
};

// Plans and allocates. `provider` is "local" (num_ranks virtual ranks on the current GPU) or
// "nccl" (then `nccl_comm` is the ncclComm_t and config.num_ranks must equal its size).
SymmBuffer get_symm_buffer_for_mega_moe(const MoEConfig& config,
                                        std::string_view provider = "local",
                                        void* nccl_comm = nullptr);

}  // namespace megamoe
