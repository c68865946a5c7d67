#pragma once
// Work held back to back on a stream for a while: the steady state of a loop of layer calls, which
// from T = 16 on keeps an H200 at its board power limit (bench/NOTES.md, twentieth session). The
// bench's soak windows and the demo's steady-state line measure through it.
#include <cuda.h>

#include <chrono>

#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"

namespace megamoe::runtime {

// Calls `batch` (which queues work on `stream`) until `seconds` of wall time have passed, queueing
// each batch before the host waits for the previous one, so that the GPU never idles between
// them (waiting after each batch idled it a few us a batch: ~0.5-2.5 % on short calls). Returns
// the number of batches, with the stream synchronized.
template <class Batch>
long long run_back_to_back(CUstream stream, double seconds, Batch&& batch) {
  using Clock = std::chrono::steady_clock;
  Event done[2];
  const auto t0 = Clock::now();
  long long n = 0;
  for (;; ++n) {
    batch();
    done[n & 1].record(stream);
    if (n > 0) done[(n - 1) & 1].synchronize();
    if (std::chrono::duration<double>(Clock::now() - t0).count() >= seconds) break;
  }
  MEGAMOE_CU(cuda::driver().cuStreamSynchronize(stream));
  return n + 1;
}

}  // namespace megamoe::runtime
