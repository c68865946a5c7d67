// SymmBuffer views and get_symm_buffer_for_mega_moe: plan the layout, then allocate it through
// the requested peer-memory provider.
#include <cstdint>
#include <string>

#include "megamoe/buffer.hpp"
#include "megamoe/error.hpp"
#include "runtime/device_select.hpp"

namespace megamoe {

void* SymmBuffer::view(int rank, std::string_view region) const {
  if (!memory) throw_invalid("buffer.memory", "is required (the buffer was never allocated)");
  const BufferRegion& r = plan.region(region);
  return static_cast<char*>(memory->base(rank)) + r.offset;
}

SymmBuffer get_symm_buffer_for_mega_moe(const MoEConfig& config, std::string_view provider,
                                        void* nccl_comm) {
  SymmBuffer b;
  b.plan = plan_symm_buffer(config);
  if (provider == "local") {
    if (nccl_comm != nullptr) {
      throw_invalid("nccl_comm", "must be null for the \"local\" provider");
    }
    b.memory = make_local_peer_memory(config.num_ranks, b.plan.total_bytes);
  } else if (provider == "nccl") {
    if (nccl_comm == nullptr) {
      throw_invalid("nccl_comm", "the \"nccl\" provider needs the ncclComm_t");
    }
    b.memory = make_nccl_peer_memory(nccl_comm, b.plan.total_bytes);
    if (b.memory->num_ranks() != config.num_ranks) {
      throw_invalid(
          "config.num_ranks",
          "must equal the NCCL communicator's size " + std::to_string(b.memory->num_ranks()),
          std::to_string(config.num_ranks));
    }
  } else {
    throw_invalid("provider", "must be \"local\" or \"nccl\"", std::string(provider));
  }
  b.device = cuda::current_device();
  return b;
}

}  // namespace megamoe
