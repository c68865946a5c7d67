// How finely %globaltimer ticks on this GPU (bench/NOTES.md, run 107): the per-CTA timelines of
// the NVFP4 kernels are %globaltimer marks, so their gaps mean something only above this step.
// One thread spins on the timer and records 2000 successive changes. Standalone; build with
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o globaltimer_resolution \
//     globaltimer_resolution.cu
// and run with no arguments: one line, the smallest / mean / largest step in ns.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

__global__ void record_timer_steps(unsigned long long* steps, int n) {
  unsigned long long prev, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(prev));
  for (int k = 0; k < n;) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now != prev) {
      steps[k++] = now - prev;
      prev = now;
    }
  }
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "globaltimer_resolution: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main() {
  constexpr int kSteps = 2000;
  unsigned long long* d = nullptr;
  if (!ok(cudaMalloc(&d, kSteps * sizeof(unsigned long long)), "cudaMalloc")) return 1;
  std::vector<unsigned long long> h(kSteps);
  for (int pass = 0; pass < 2; ++pass) {  // the first pass loads the module
    record_timer_steps<<<1, 1>>>(d, kSteps);
    if (!ok(cudaDeviceSynchronize(), "kernel")) return 1;
  }
  if (!ok(cudaMemcpy(h.data(), d, kSteps * sizeof(unsigned long long), cudaMemcpyDeviceToHost),
          "cudaMemcpy")) {
    return 1;
  }
  unsigned long long lo = ~0ull, hi = 0, sum = 0;
  for (int i = 1; i < kSteps; ++i) {  // step 0 may include the spin's start
    lo = h[i] < lo ? h[i] : lo;
    hi = h[i] > hi ? h[i] : hi;
    sum += h[i];
  }
  std::printf("globaltimer steps over %d changes: min %llu ns, mean %.1f ns, max %llu ns\n",
              kSteps - 1, lo, static_cast<double>(sum) / (kSteps - 1), hi);
  cudaFree(d);
  return 0;
}
