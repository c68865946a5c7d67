#pragma once
// Precompile (DESIGN §1, §7): every kernel a configuration can launch, compiled ahead of serving
// into the kernel cache, so that no call compiles on the hot path and a first call can already be
// captured in a CUDA graph. `megamoe precompile` is the same for presets and MoE families.
#include <cstddef>
#include <string>
#include <vector>

#include "megamoe/config.hpp"

namespace megamoe {

struct PrecompiledKernel {
  std::string name;       // e.g. "sm90_nvfp4_mega_moe_pipelined"
  std::string arguments;  // its template arguments, named, e.g. "H, I, ... = 4096, 2048, ..."
  bool from_disk_cache = false;  // read from the disk cache, not compiled in this process
  int registers = 0;             // per thread
  std::size_t spill_bytes = 0;   // spill stores + loads; 0 for every kernel megamoe ships
  std::size_t local_bytes = 0;   // local memory per thread; likewise 0
};

// Compiles, or finds in the kernel cache (MEGAMOE_CACHE_DIR, default ~/.cache/megamoe), every
// kernel `config` can launch: each BLOCK_M and kernel version reachable for token counts up to
// config.max_tokens_per_rank, with its activation kind and combine format, the pre-dispatch
// kernels and the weight transforms. Needs NVRTC, not a GPU. InvalidArgument (naming the field)
// for a config the layer calls refuse, before anything is compiled; CudaError with the kernel and
// its compile log when one fails (the kernels before it stay cached).
std::vector<PrecompiledKernel> precompile(const MoEConfig& config);

}  // namespace megamoe
