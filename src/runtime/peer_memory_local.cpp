// `local` peer memory: R virtual ranks on the current GPU, one allocation per rank, so a kernel
// that addresses "rank r's buffer" works the same as with one process per GPU.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "megamoe/buffer.hpp"
#include "megamoe/error.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"

namespace megamoe {
namespace {

class LocalPeerMemory final : public PeerMemory {
 public:
  LocalPeerMemory(int num_ranks, std::size_t bytes_per_rank) : bytes_(bytes_per_rank) {
    buffers_.reserve(static_cast<std::size_t>(num_ranks));
    for (int r = 0; r < num_ranks; ++r) {
      buffers_.emplace_back(bytes_per_rank);
      // Counters and flags in the buffer start at zero.
      buffers_.back().fill_bytes(0);
    }
  }

  std::string_view kind() const override { return "local"; }
  int num_ranks() const override { return static_cast<int>(buffers_.size()); }
  std::vector<int> driven_ranks() const override {
    std::vector<int> all(buffers_.size());
    for (std::size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int>(r);
    return all;
  }
  std::size_t bytes_per_rank() const override { return bytes_; }
  void* base(int rank) const override {
    if (rank < 0 || rank >= num_ranks()) {
      throw_invalid("rank", "must be in 0.." + std::to_string(num_ranks() - 1),
                    std::to_string(rank));
    }
    return reinterpret_cast<void*>(
        static_cast<std::uintptr_t>(buffers_[static_cast<std::size_t>(rank)].get()));
  }

 private:
  std::size_t bytes_;
  std::vector<runtime::DeviceBuffer> buffers_;
};

}  // namespace

std::unique_ptr<PeerMemory> make_local_peer_memory(int num_ranks, std::size_t bytes_per_rank) {
  if (num_ranks < 1) throw_invalid("num_ranks", "must be >= 1", std::to_string(num_ranks));
  if (bytes_per_rank == 0) throw_invalid("bytes_per_rank", "must be > 0", "0");
  return std::make_unique<LocalPeerMemory>(num_ranks, bytes_per_rank);
}

}  // namespace megamoe
