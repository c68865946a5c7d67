#pragma once
// NVRTC compilation of kernels/ sources to cubins, with a content-hash cache in memory and on
// disk (docs/jit.md). Needs no GPU: compiling and caching work on any machine.
//
// Environment:
//   MEGAMOE_CACHE_DIR    disk cache directory (default ~/.cache/megamoe; "off" disables it)
//   MEGAMOE_KERNEL_DIR   read kernels/ headers from this directory instead of the embedded copy
//   MEGAMOE_JIT_VERBOSE  non-empty and not "0": print compile times and cache hits to stderr
//   MEGAMOE_JIT_DUMP     a directory ("1": <cache dir>/dump) that receives source, PTX and log
//                        of every kernel compiled (and of every failed compile)
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace megamoe::jit {

class KernelTree;

struct KernelRequest {
  std::string name;    // for messages, dumps and the verbose log, e.g. "sm90_pre_dispatch"
  std::string source;  // generated translation unit; #includes resolve against kernels/
  // The __global__ function to fetch: a name expression such as
  // "megamoe::pre_dispatch_kernel<7168, 8, 1>" (NVRTC lowers it) or an extern "C" name.
  std::string entry;
  std::string arch = "sm_90a";       // sm_90a now; sm_100a accepted for later kernels
  std::vector<std::string> options;  // extra NVRTC flags, e.g. "-DMEGAMOE_FOO=1"
  std::string arguments;             // human-readable template arguments, for messages
};

struct CompiledKernel {
  std::string key;              // hex content hash (no paths inside; see cache_key)
  std::string cubin;            // the SASS binary for `arch`
  std::string lowered_name;     // mangled name of `entry` in the cubin
  int registers = 0;            // per thread, from ptxas
  std::size_t local_bytes = 0;  // stack frame / local memory per thread
  std::size_t spill_bytes = 0;  // spill stores + loads reported by ptxas
  bool from_cache = false;      // read from the disk cache instead of compiled in this process
  double compile_ms = 0.0;      // NVRTC time when it was compiled (kept in the disk cache)
  std::string log;              // NVRTC + ptxas log
  std::string name;             // request name, for messages
};

// Hash of: the source, the content of every header it includes (recursively, from kernels/),
// the options, the arch and the NVRTC version. Never a path.
std::string cache_key(const KernelRequest& request);
// The same against an explicit header tree (tests compare trees at different places).
std::string cache_key(const KernelRequest& request, const KernelTree& tree);

// Compiles (or fetches from the caches) and returns the kernel. Throws CudaError with the kernel
// name, its arguments and the compile log when NVRTC fails; InvalidArgument for a bad request
// (empty name/source/entry, unknown arch). Thread-safe; concurrent requests for one key compile
// once. Reports local memory and spills on stderr (see resource_problems).
std::shared_ptr<const CompiledKernel> compile(const KernelRequest& request);

// NVRTC flags for `request` as they enter the key: the fixed set, the arch, then
// request.options. The toolkit include directory is added at compile time, outside the key.
std::vector<std::string> compile_flags(const KernelRequest& request);

// "13.0", or "unavailable: <why>" when the library was built without NVRTC.
std::string nvrtc_version();
bool nvrtc_available();
// The CUDA toolkit include directory given to NVRTC ("" when none was found).
std::string cuda_include_dir();

// The disk cache directory, or an empty path when disabled (MEGAMOE_CACHE_DIR=off, or no
// MEGAMOE_CACHE_DIR and no HOME).
std::filesystem::path cache_directory();

struct CacheStats {
  std::size_t memory_hits = 0;
  std::size_t disk_hits = 0;
  std::size_t compiles = 0;
};
CacheStats cache_stats();
// Forgets the in-memory cache (the disk cache stays), so tests can observe disk hits.
void clear_memory_cache();

// "" when the kernel uses no local memory and spills nothing; otherwise a sentence naming the
// kernel and the bytes, e.g. "kernel 'x' spills 16 bytes (local memory 32 bytes per thread)".
std::string resource_problems(const CompiledKernel& kernel);

}  // namespace megamoe::jit
