// `nccl` peer memory: one process per GPU, each rank's buffer in an NCCL (>= 2.28) symmetric
// window (ncclMemAlloc + ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC). The peers'
// buffers are reached through the window's load/store-accessible (LSA) mapping: NCCL maps the
// ranks of one NVLink domain into one flat range, rank i at lsaFlatBase + i * stride4G * 4 GiB.
#include <cuda.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "megamoe/buffer.hpp"
#include "megamoe/error.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/nccl_library.hpp"

namespace megamoe {
namespace {

// The leading members of NCCL's device-side window record (nccl_device/impl/core__types.h of
// the NCCL headers megamoe is built with), where ncclGetLsaPointer reads the flat base and
// stride. Used only with more than one rank, only when the loaded NCCL is that release, and
// checked against the local pointer.
struct WindowHead {
  void* win_host;
  char* lsa_flat_base;
  int lsa_rank;
  int world_rank;
  std::uint32_t stride_4g;
};

class NcclPeerMemory final : public PeerMemory {
 public:
  NcclPeerMemory(ncclComm_t comm, std::size_t bytes) : comm_(comm), bytes_(bytes) {
    const nccl::Library& n = nccl::library();
    const cuda::Driver& d = cuda::driver();
    MEGAMOE_NCCL(n.ncclCommCount(comm_, &num_ranks_));
    MEGAMOE_NCCL(n.ncclCommUserRank(comm_, &rank_));
    MEGAMOE_NCCL(n.ncclMemAlloc(&local_, bytes_));
    try {
      // Zero before the collective registration: no peer can start using a rank's buffer
      // before that rank has registered, hence before it was cleared.
      MEGAMOE_CU(d.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(local_), 0, bytes_, nullptr));
      MEGAMOE_CU(d.cuCtxSynchronize());
      MEGAMOE_NCCL(
          n.ncclCommWindowRegister(comm_, local_, bytes_, &window_, NCCL_WIN_COLL_SYMMETRIC));
      resolve_peers(d);
    } catch (...) {
      release();
      throw;
    }
  }

  ~NcclPeerMemory() override { release(); }

  std::string_view kind() const override { return "nccl"; }
  int num_ranks() const override { return num_ranks_; }
  std::vector<int> driven_ranks() const override { return {rank_}; }
  std::size_t bytes_per_rank() const override { return bytes_; }
  void* base(int rank) const override {
    if (rank < 0 || rank >= num_ranks_) {
      throw_invalid("rank", "must be in 0.." + std::to_string(num_ranks_ - 1),
                    std::to_string(rank));
    }
    return peers_[static_cast<std::size_t>(rank)];
  }

 private:
  void resolve_peers(const cuda::Driver& d) {
    peers_.assign(static_cast<std::size_t>(num_ranks_), nullptr);
    peers_[static_cast<std::size_t>(rank_)] = local_;
    if (num_ranks_ == 1) return;
    // The window record's layout is NCCL's own: read it only from the release whose headers
    // this library was built with, and check the result against the local pointer.
    const int version = nccl::library().version;
    if (version != NCCL_VERSION_CODE) {
      throw CudaError("nccl peer memory: the loaded NCCL " + std::to_string(version) +
                      " differs from the NCCL " + std::to_string(NCCL_VERSION_CODE) +
                      " headers megamoe was built with; peer pointers of a symmetric window are "
                      "only read from the same release (set MEGAMOE_NCCL_LIBRARY)");
    }
    WindowHead head{};
    MEGAMOE_CU(d.cuMemcpyDtoH(&head, reinterpret_cast<CUdeviceptr>(window_), sizeof(head)));
    for (int r = 0; r < num_ranks_; ++r) {
      // The LSA team of a single NVLink domain holds every rank in world order.
      const std::int64_t lsa = head.lsa_rank + (r - head.world_rank);
      peers_[static_cast<std::size_t>(r)] =
          head.lsa_flat_base +
          lsa * static_cast<std::int64_t>(head.stride_4g) * (std::int64_t{1} << 32);
    }
    // NCCL maps the window a second time into the flat LSA range, so this rank's flat address
    // differs from the ncclMemAlloc pointer; prove both name the same memory with a marker.
    char* flat_self = head.lsa_flat_base + static_cast<std::int64_t>(head.lsa_rank) *
                                               static_cast<std::int64_t>(head.stride_4g) *
                                               (std::int64_t{1} << 32);
    const std::uint64_t marker = 0x6D6567616D6F6531ull ^ static_cast<std::uint64_t>(rank_);
    std::uint64_t seen = 0;
    MEGAMOE_CU(d.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(local_), &marker, sizeof marker));
    MEGAMOE_CU(d.cuMemcpyDtoH(&seen, reinterpret_cast<CUdeviceptr>(flat_self), sizeof seen));
    if (head.world_rank != rank_ || seen != marker) {
      throw CudaError(
          "nccl peer memory: the NCCL window's LSA mapping does not reach this rank's "
          "buffer (world rank " +
          std::to_string(head.world_rank) + ", lsa rank " + std::to_string(head.lsa_rank) +
          ", expected rank " + std::to_string(rank_) + "); ranks outside one NVLink domain?");
    }
    peers_[static_cast<std::size_t>(rank_)] = local_;
  }

  void release() noexcept {
    if (local_ == nullptr) return;
    const nccl::Library& n = nccl::library();
    if (window_ != nullptr) n.ncclCommWindowDeregister(comm_, window_);
    n.ncclMemFree(local_);
    window_ = nullptr;
    local_ = nullptr;
  }

  ncclComm_t comm_;
  std::size_t bytes_;
  int num_ranks_ = 0;
  int rank_ = 0;
  void* local_ = nullptr;
  ncclWindow_t window_ = nullptr;
  std::vector<void*> peers_;
};

}  // namespace

std::unique_ptr<PeerMemory> make_nccl_peer_memory(void* comm, std::size_t bytes_per_rank) {
  if (comm == nullptr) throw_invalid("comm", "must be an ncclComm_t", "null");
  if (bytes_per_rank == 0) throw_invalid("bytes_per_rank", "must be > 0", "0");
  nccl::library();  // a clear CudaError when NCCL is missing or too old
  return std::make_unique<NcclPeerMemory>(static_cast<ncclComm_t>(comm), bytes_per_rank);
}

}  // namespace megamoe
