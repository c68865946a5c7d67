#pragma once
// Requests for the JIT self-test kernel (kernels/megamoe/selftest/cluster_axpy.cuh), used by the
// JIT tests and registered so that `megamoe precompile` always has a kernel to build.
#include <cstddef>

#include "jit/compiler.hpp"

namespace megamoe::jit {

struct SelftestShape {
  int threads = 256;          // block size, a multiple of 32 in [32, 1024]
  int items_per_thread = 64;  // tile = threads * items_per_thread elements
  int tile() const { return threads * items_per_thread; }
  std::size_t dynamic_smem_bytes() const {
    return static_cast<std::size_t>(tile()) * sizeof(float);
  }
};

// InvalidArgument when the shape is out of range (the tile must fit 227 KB of shared memory).
KernelRequest selftest_request(const SelftestShape& shape, const std::string& arch = "sm_90a");

}  // namespace megamoe::jit
