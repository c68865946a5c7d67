// `megamoe info`: what this machine offers megamoe — the GPU, or why there is none, and the JIT.
// Always exits 0: "no GPU" is an answer, not an error.
#include <cstdio>
#include <filesystem>
#include <string>

#include "commands.hpp"
#include "jit/compiler.hpp"
#include "options.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"

namespace megamoe::tool {
namespace {

std::string version_text(int v) {  // 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::size_t cache_entries(const std::filesystem::path& dir) {
  std::error_code ec;
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".jit") ++n;
  }
  return n;
}

}  // namespace

int cmd_info(Args args) {
  const Options options(args, {}, {"help"});
  if (options.has("help")) {
    std::printf(
        "usage: megamoe info\n\nPrints the GPU (name, architecture, SMs, memory, driver), "
        "the NVRTC version and the kernel cache directory.\n");
    return 0;
  }
  std::string why;
  if (cuda::driver_available(&why)) {
    try {
      int count = 0;
      MEGAMOE_CU(cuda::driver().cuDeviceGetCount(&count));
      for (int i = 0; i < count; ++i) {
        const runtime::DeviceProperties p = runtime::device_properties(i);
        std::printf("gpu %d: %s, %s, %d SMs, %.1f GiB, %d KB shared memory per block\n", i,
                    p.name.c_str(), p.arch.c_str(), p.sm_count,
                    static_cast<double>(p.total_memory) / (1024.0 * 1024.0 * 1024.0),
                    p.max_shared_memory_per_block / 1024);
      }
      std::printf("driver: CUDA %s\n", version_text(cuda::driver().driver_version).c_str());
    } catch (const std::exception& e) {
      std::printf("no GPU: %s\n", e.what());
    }
  } else {
    std::printf("no GPU: %s\n", why.c_str());
  }
  std::printf("nvrtc: %s (targets sm_90a, sm_100a)\n", jit::nvrtc_version().c_str());
  const std::string include_dir = jit::cuda_include_dir();
  std::printf("cuda headers: %s\n",
              include_dir.empty() ? "not found (set CUDA_HOME)" : include_dir.c_str());
  const std::filesystem::path cache = jit::cache_directory();
  if (cache.empty()) {
    std::printf("kernel cache: memory only (MEGAMOE_CACHE_DIR=off or no HOME)\n");
  } else {
    std::printf("kernel cache: %s (%zu entries)\n", cache.c_str(), cache_entries(cache));
  }
  return 0;
}

}  // namespace megamoe::tool
