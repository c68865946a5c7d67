#pragma once
// One NVRTC compilation: source + project headers in memory -> cubin, PTX and log.
#include <string>
#include <vector>

#include "jit/compiler.hpp"
#include "jit/kernel_tree.hpp"

namespace megamoe::jit {

struct NvrtcResult {
  bool ok = false;
  std::string error;      // NVRTC's status name when !ok
  CompiledKernel kernel;  // cubin, lowered_name, log, resources (log only when !ok)
  std::string ptx;        // for MEGAMOE_JIT_DUMP
};

// `flags` as from compile_flags(); the toolkit include directory is appended here.
NvrtcResult nvrtc_compile(const KernelRequest& request, const IncludeClosure& headers,
                          const std::vector<std::string>& flags);

// "13.0"; empty when NVRTC is not part of this build.
std::string nvrtc_version_string();

// The CUDA toolkit include directory (holds cuda_bf16.h): CUDA_HOME, CUDA_PATH, the toolkit
// that holds the loaded libnvrtc, /usr/local/cuda. Empty when none is found.
std::string find_cuda_include_dir();

// CUDA_VERSION as written in <include dir>/cuda.h ("13000"), or "none".
std::string cuda_headers_version(const std::string& include_dir);

}  // namespace megamoe::jit
