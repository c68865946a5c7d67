#include "runtime/module.hpp"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "megamoe/error.hpp"
#include "runtime/cuda_driver.hpp"

namespace megamoe::runtime {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::pair<CUcontext, std::string>, CUfunction> functions;  // (context, key)
  std::map<CUfunction, std::size_t> smem_limit;
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string dims(const std::array<unsigned, 3>& d) {
  return "(" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) +
         ")";
}

}  // namespace

CUfunction load(const jit::CompiledKernel& kernel) {
  const cuda::Driver& d = cuda::driver();
  CUcontext context = nullptr;
  MEGAMOE_CU(d.cuCtxGetCurrent(&context));
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto id = std::make_pair(context, kernel.key);
  if (auto it = r.functions.find(id); it != r.functions.end()) return it->second;
  CUmodule module = nullptr;
  cuda::check(d.cuModuleLoadData(&module, kernel.cubin.data()),
              ("cuModuleLoadData(kernel '" + kernel.name + "')").c_str());
  CUfunction function = nullptr;
  const CUresult got = d.cuModuleGetFunction(&function, module, kernel.lowered_name.c_str());
  if (got != CUDA_SUCCESS) {
    d.cuModuleUnload(module);
    cuda::check(got, ("cuModuleGetFunction(" + kernel.lowered_name + ")").c_str());
  }
  r.functions.emplace(id, function);
  return function;
}

CUfunction load_cached(const jit::KernelRequest& request,
                       const std::function<void(const jit::CompiledKernel&)>& check) {
  static std::mutex mutex;
  static std::map<std::pair<CUcontext, std::string>, CUfunction> by_entry;
  CUcontext context = nullptr;
  MEGAMOE_CU(cuda::driver().cuCtxGetCurrent(&context));
  const auto id = std::make_pair(context, request.entry);
  {
    const std::lock_guard lock(mutex);
    if (const auto it = by_entry.find(id); it != by_entry.end()) return it->second;
  }
  const auto kernel = jit::compile(request);
  if (check) check(*kernel);
  const CUfunction function = load(*kernel);
  const std::lock_guard lock(mutex);
  by_entry.emplace(id, function);
  return function;
}

void ensure_dynamic_smem(CUfunction function, std::size_t bytes) {
  // Below the default 48 KB no attribute is needed.
  if (bytes <= 48 * 1024) return;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::size_t& current = r.smem_limit[function];
  if (current >= bytes) return;
  MEGAMOE_CU(cuda::driver().cuFuncSetAttribute(
      function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(bytes)));
  current = bytes;
}

CUstream launch_stream(void* stream) {
  return stream != nullptr ? static_cast<CUstream>(stream) : CU_STREAM_LEGACY;
}

bool use_pdl(CUstream stream) {
  static const bool enabled = [] {
    const char* env = std::getenv("MEGAMOE_PDL");
    return env == nullptr || std::string(env) != "0";
  }();
  return enabled && stream != nullptr && stream != CU_STREAM_LEGACY;
}

void launch(CUfunction function, const LaunchConfig& c, void** args) {
  if (function == nullptr) throw_invalid("function", "must be a loaded kernel", "null");
  for (int i = 0; i < 3; ++i) {
    if (c.grid[i] == 0) throw_invalid("grid", "every dimension must be >= 1", dims(c.grid));
    if (c.block[i] == 0) throw_invalid("block", "every dimension must be >= 1", dims(c.block));
    if (c.cluster[i] == 0)
      throw_invalid("cluster", "every dimension must be >= 1", dims(c.cluster));
    if (c.grid[i] % c.cluster[i] != 0) {
      throw_invalid("grid", "must be a multiple of the cluster shape " + dims(c.cluster),
                    dims(c.grid));
    }
  }
  if (static_cast<unsigned long long>(c.block[0]) * c.block[1] * c.block[2] > 1024) {
    throw_invalid("block", "must have at most 1024 threads", dims(c.block));
  }
  ensure_dynamic_smem(function, c.dynamic_smem);
  // Hopper runs clusters of up to 16 blocks, but above 8 only when the function opts in.
  if (c.cluster[0] * c.cluster[1] * c.cluster[2] > 8) {
    MEGAMOE_CU(cuda::driver().cuFuncSetAttribute(
        function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
  }

  CUlaunchAttribute attributes[2] = {};
  unsigned count = 0;
  if (c.cluster != std::array<unsigned, 3>{1, 1, 1}) {
    CUlaunchAttribute& a = attributes[count++];
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = c.cluster[0];
    a.value.clusterDim.y = c.cluster[1];
    a.value.clusterDim.z = c.cluster[2];
  }
  if (c.pdl) {
    CUlaunchAttribute& a = attributes[count++];
    a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    a.value.programmaticStreamSerializationAllowed = 1;
  }
  CUlaunchConfig config{};
  config.gridDimX = c.grid[0];
  config.gridDimY = c.grid[1];
  config.gridDimZ = c.grid[2];
  config.blockDimX = c.block[0];
  config.blockDimY = c.block[1];
  config.blockDimZ = c.block[2];
  config.sharedMemBytes = static_cast<unsigned>(c.dynamic_smem);
  config.hStream = c.stream;
  config.attrs = count > 0 ? attributes : nullptr;
  config.numAttrs = count;
  MEGAMOE_CU(cuda::driver().cuLaunchKernelEx(&config, function, args, nullptr));
}

}  // namespace megamoe::runtime
