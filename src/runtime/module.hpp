#pragma once
// Loading JIT-compiled kernels into the current CUDA context and launching them through
// cuLaunchKernelEx, with cluster dimensions, large dynamic shared memory and programmatic
// dependent launch (PDL) as launch attributes.
#include <cuda.h>

#include <array>
#include <cstddef>
#include <functional>

#include "jit/compiler.hpp"

namespace megamoe::runtime {

// The kernel's function in the current context. Modules are loaded once per (context, key)
// and stay loaded for the life of the process (launches may be captured in CUDA graphs).
CUfunction load(const jit::CompiledKernel& kernel);

// The function of `request` in the current context: compiled (jit::compile) and loaded on the
// first call per (context, entry), remembered after it, so that launch paths called often do not
// re-hash the kernel sources (jit::compile's key) every time. The entry name must hold every
// template argument (it is the cache key). `check`, when given, sees the compiled kernel before
// its first load (and may throw, e.g. to refuse a build that spills).
CUfunction load_cached(const jit::KernelRequest& request,
                       const std::function<void(const jit::CompiledKernel&)>& check = {});

// Raises the function's dynamic shared memory limit to at least `bytes` (needed above 48 KB).
// Remembers what it set, so repeated calls cost a map lookup.
void ensure_dynamic_smem(CUfunction function, std::size_t bytes);

struct LaunchConfig {
  std::array<unsigned, 3> grid{1, 1, 1};
  std::array<unsigned, 3> block{1, 1, 1};
  std::size_t dynamic_smem = 0;  // bytes; the limit is raised as needed
  CUstream stream = nullptr;
  std::array<unsigned, 3> cluster{1, 1, 1};  // {1,1,1}: no cluster attribute
  // Programmatic dependent launch: the kernel may start before the previous kernel on the
  // stream finishes; it must call griddepcontrol.wait before reading that kernel's output.
  bool pdl = false;
};

// The stream a public call's `stream` argument names: its own handle, or for nullptr the legacy
// default stream by its explicit handle (CU_STREAM_LEGACY).
CUstream launch_stream(void* stream);

// Whether launches on `stream` use programmatic dependent launch: yes on real streams; the legacy
// default stream (null or CU_STREAM_LEGACY) serializes with every blocking stream anyway and
// gets a plain launch. MEGAMOE_PDL=0 turns PDL off everywhere (diagnostics).
bool use_pdl(CUstream stream);

// Launches with `args` = pointers to each kernel argument, in order. InvalidArgument when a
// dimension is zero, the block exceeds 1024 threads, or the grid is not a multiple of the
// cluster shape.
void launch(CUfunction function, const LaunchConfig& config, void** args);

// Typed convenience: launch(f, config, out, in, n) passes the addresses of the arguments.
template <typename... Args>
void launch_kernel(CUfunction function, const LaunchConfig& config, const Args&... args) {
  void* pointers[] = {const_cast<void*>(static_cast<const void*>(&args))..., nullptr};
  launch(function, config, pointers);
}

}  // namespace megamoe::runtime
