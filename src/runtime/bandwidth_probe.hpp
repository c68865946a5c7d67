#pragma once
// The HBM read bandwidth of the current GPU, measured the way the benchmark brief defines the
// decode floor: a large read-only reduction, median of event-timed repetitions.
#include <cuda.h>

#include <cstddef>

#include "jit/compiler.hpp"

namespace megamoe::runtime {

// The reduction's kernel (kernels/megamoe/selftest/read_bandwidth.cuh), as the JIT compiles it.
jit::KernelRequest read_bandwidth_request();

// Reads `bytes` (rounded down to 16) of a fresh buffer filled with non-zero data; TB/s.
double measure_read_bandwidth_tbs(std::size_t bytes, CUstream stream);

// Reads an existing device range of `bytes`; TB/s (callers that already hold a large buffer).
double measure_read_bandwidth_tbs(CUdeviceptr data, std::size_t bytes, CUstream stream);

}  // namespace megamoe::runtime
