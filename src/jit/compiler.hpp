#pragma once
// NVRTC compilation of kernels/ sources to cubins, with a content-hash cache in memory and on
// disk (docs/design.md, "JIT"). Needs no GPU: compiling and caching work on any machine.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace megamoe::jit {

struct KernelRequest {
  std::string name;    // for messages, dumps and the verbose log, e.g. "sm90_pre_dispatch"
  std::string source;  // generated translation unit; #includes resolve against kernels/
  // The __global__ function to fetch: a name expression such as
  // "megamoe::pre_dispatch_kernel<7168, 8, 1>" (NVRTC lowers it) or an extern "C" name.
  std::string entry;
  std::string arch = "sm_90a";        // sm_90a now; sm_100a accepted for later kernels
  std::vector<std::string> options;   // extra NVRTC flags, e.g. "-DMEGAMOE_FOO=1"
  std::string arguments;              // human-readable template arguments, for messages
};

struct CompiledKernel {
  std::string key;           // hex content hash (no paths inside; see cache_key)
  std::string cubin;         // the SASS binary for `arch`
  std::string lowered_name;  // mangled name of `entry` in the cubin
  int registers = 0;         // per thread, from ptxas
  std::size_t local_bytes = 0;   // stack frame / local memory per thread
  std::size_t spill_bytes = 0;   // spill stores + loads reported by ptxas
  bool from_cache = false;
  double compile_ms = 0.0;
  std::string log;           // NVRTC + ptxas log
};

// Hash of: the source, the content of every header it includes (recursively, from kernels/),
// the options, the arch and the NVRTC version. Never a path.
std::string cache_key(const KernelRequest& request);

// Compiles (or fetches from the caches) and returns the kernel. Throws CudaError with the kernel
// name, its arguments and the compile log when NVRTC fails.
std::shared_ptr<const CompiledKernel> compile(const KernelRequest& request);

}  // namespace megamoe::jit
