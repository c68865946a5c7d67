#pragma once
// The HBM read bandwidth of the current GPU, measured the way the benchmark brief defines the
// decode floor: a large read-only reduction, median of event-timed repetitions.
#include <cuda.h>

#include <cstddef>

namespace megamoe::runtime {

// Reads `bytes` (rounded down to 16) of a fresh buffer filled with non-zero data; TB/s.
double measure_read_bandwidth_tbs(std::size_t bytes, CUstream stream);

// Reads an existing device range of `bytes`; TB/s (callers that already hold a large buffer).
double measure_read_bandwidth_tbs(CUdeviceptr data, std::size_t bytes, CUstream stream);

}  // namespace megamoe::runtime
