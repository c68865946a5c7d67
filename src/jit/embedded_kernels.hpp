#pragma once
// The kernels/ tree compiled into the library (see cmake/EmbedKernels.cmake).
#include <span>
#include <string_view>

namespace megamoe::jit {

struct EmbeddedFile {
  std::string_view path;     // relative to kernels/, e.g. "megamoe/impls/sm90_nvfp4_mega_moe.cuh"
  std::string_view content;  // exact bytes of the file at build time
};

// Sorted by path. Empty when the build embedded nothing.
std::span<const EmbeddedFile> embedded_kernel_files();

}  // namespace megamoe::jit
