#pragma once
// What the standalone stream probes share (t1_stream_floor.cu, fused_t1_feasibility.cu): random
// expert sets, weights with non-zero contents, the floor's read bandwidth, and the bench's way of
// timing a layer call (bench/nvfp4_mega_moe.cpp): a CUDA graph of calls, each after a small
// device-to-device copy and launched with programmatic dependent launch as the library launches
// its kernels, minus the graph of the copies alone, median of 21 replays.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "megamoe/common.cuh"
#include "megamoe/ptx/bulk_copy.cuh"
#include "megamoe/ptx/pdl.cuh"
#include "megamoe/selftest/read_bandwidth.cuh"
#include "probe_check.cuh"

namespace layer_timing {

using megamoe::device::u32;
using megamoe::device::u8;

constexpr int kMaxK = 8;

// The decode presets of ../shared/BENCHMARKS.md: name, hidden, intermediate, top-k (256 experts).
struct Preset {
  const char* name;
  int h, i, k;
};
constexpr Preset kPresets[] = {{"dsv4-flash", 4096, 2048, 6}, {"h6144-e256-k8", 6144, 3072, 8}};

// What every probe call needs: the SM count, a stream, a sink for results nobody reads, and the
// small copies' images (`graph_us_per_call`, below) for up to 8 calls.
struct Context {
  int sms = 0;
  cudaStream_t st = nullptr;
  u32* sink = nullptr;
  u8* img_src = nullptr;
  u8* img_dst = nullptr;

  static Context create() {
    Context c;
    CK(cudaDeviceGetAttribute(&c.sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaStreamCreateWithFlags(&c.st, cudaStreamNonBlocking));
    CK(cudaMalloc(&c.sink, 4));
    CK(cudaMalloc(&c.img_src, 8 * 4096));
    CK(cudaMalloc(&c.img_dst, 4096));
    CK(cudaMemset(c.img_src, 0x3C, 8 * 4096));
    return c;
  }
};

// The experts one call's single token is routed to: k distinct ids of 256.
struct Experts {
  int id[kMaxK];
  int k;
};

inline std::vector<Experts> random_expert_sets(int count, int k, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<Experts> sets(static_cast<size_t>(count));
  for (Experts& s : sets) {
    std::vector<int> all(256);
    for (int e = 0; e < 256; ++e) all[static_cast<size_t>(e)] = e;
    std::shuffle(all.begin(), all.end(), gen);
    s.k = k;
    for (int j = 0; j < k; ++j) s.id[j] = all[static_cast<size_t>(j)];
  }
  return sets;
}

// A stream kernel's prologue (one warp a CTA): barrier full[s] of each of n stages expects one
// arrival, the producer's expect_tx, plus the bytes; then the wait for the previous kernel.
__device__ __forceinline__ void init_stages_then_wait(megamoe::device::u64* full, int n) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < n; ++s) megamoe::device::ptx::mbarrier_init(full + s, 1);
    megamoe::device::ptx::fence_mbarrier_init();
  }
  __syncwarp();
  megamoe::device::ptx::griddep_wait();
}

// Non-zero, varying contents.
__global__ void fill_varying(u32* p, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += gridDim.x * 256ull) {
    p[i] = static_cast<u32>(i * 0x9E3779B1ull) | 0x01010101u;
  }
}

inline float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median of `reps` timed runs of f on st, after two untimed ones.
template <class F>
float median_ms(cudaStream_t st, int reps, F f) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < reps + 2; ++i) {
    CK(cudaEventRecord(a, st));
    f();
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    if (i >= 2) ms.push_back(t);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return median(ms);
}

// HBM read bandwidth in TB/s: the bench's read-only reduction over up to 4 GiB of `data`, median
// of 15 launches.
inline double read_bandwidth_tbs(cudaStream_t st, const u8* data, unsigned long long bytes,
                                 u32* sink, int sms) {
  const unsigned long long n16 = std::min<unsigned long long>(bytes, 4ull << 30) / 16;
  const float ms = median_ms(st, 15, [&] {
    megamoe::device::selftest::read_bandwidth_kernel<<<sms * 4, 512, 0, st>>>(
        reinterpret_cast<const uint4*>(data), n16, sink);
  });
  return static_cast<double>(n16 * 16) / (ms * 1e-3) / 1e12;
}

// Launches kernel<<<grid, block, smem, st>>>(args...) with programmatic stream serialization.
template <class... Params, class... Args>
void launch_with_pdl(void (*kernel)(Params...), int grid, int block, int smem, cudaStream_t st,
                     Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(static_cast<unsigned>(block));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// Microseconds a call: `call(s)` enqueues call s of `calls` on st, each after a 4 KB copy from
// img_src + 4096 s (img_src holds `calls` such images) to img_dst. One eager pass first.
template <class Call>
double graph_us_per_call(cudaStream_t st, int calls, const u8* img_src, u8* img_dst, Call call) {
  auto layer = [&](int s, bool with_call) {
    CK(cudaMemcpyAsync(img_dst, img_src + s * 4096, 4096, cudaMemcpyDeviceToDevice, st));
    if (with_call) call(s);
  };
  for (int s = 0; s < calls; ++s) layer(s, true);
  CK(cudaStreamSynchronize(st));
  auto capture = [&](bool with_call) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int s = 0; s < calls; ++s) layer(s, with_call);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&e, g, 0));
    CK(cudaGraphDestroy(g));
    return e;
  };
  cudaGraphExec_t full = capture(true), pre = capture(false);
  const float full_ms = median_ms(st, 21, [&] { CK(cudaGraphLaunch(full, st)); });
  const float pre_ms = median_ms(st, 21, [&] { CK(cudaGraphLaunch(pre, st)); });
  CK(cudaGraphExecDestroy(full));
  CK(cudaGraphExecDestroy(pre));
  return (full_ms - pre_ms) * 1000.0 / calls;
}

// Microseconds a call of a one-warp stream kernel over 8 random sets of k experts (the same sets
// in every probe): kernel<<<grid, 32, smem>>>(args_of(set)...), args_of returning a std::tuple.
template <class... Params, class ArgsOf>
double us_per_call(const Context& cx, void (*kernel)(Params...), int grid, int smem, int k,
                   ArgsOf args_of) {
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  constexpr int kSets = 8;
  const std::vector<Experts> sets = random_expert_sets(kSets, k, 20261201u);
  return graph_us_per_call(cx.st, kSets, cx.img_src, cx.img_dst, [&](int s) {
    std::apply([&](auto... a) { launch_with_pdl(kernel, grid, 32, smem, cx.st, a...); },
               args_of(sets[static_cast<size_t>(s)]));
  });
}

}  // namespace layer_timing
