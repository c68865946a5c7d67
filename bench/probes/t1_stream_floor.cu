// What the T = 1 bytes alone cost (bench/NOTES.md, twenty-eighth session): one CTA per SM streams
// the weights and scales of K distinct random experts (the bytes of a T = 1 layer call: the
// bench's floor) into a ring of shared-memory stages with bulk copies, and does nothing else --
// no routes, no token, no decode, no MMA, no barrier, no combine. Timed as the bench times the
// layer (bench/nvfp4_mega_moe.cpp): a CUDA graph of 8 calls, each after a small device-to-device
// copy, launched with programmatic dependent launch as the library launches its kernels, minus the
// graph of the copies alone, median of 21 replays; the floor from the median of 15 launches of the
// bench's read-only reduction (kernels/megamoe/selftest/read_bandwidth.cuh) in the same process.
// Standalone; build and run on the GPU machine:
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I kernels \
//        -o t1_stream_floor bench/probes/t1_stream_floor.cu && ./t1_stream_floor
// One line per preset and ring: "T1STREAM preset stages x bytes: time us, floor us, ratio".
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "megamoe/common.cuh"
#include "megamoe/ptx/bulk_copy.cuh"
#include "megamoe/ptx/pdl.cuh"
#include "megamoe/selftest/read_bandwidth.cuh"
#include "probe_check.cuh"

namespace ptx = megamoe::device::ptx;
using megamoe::device::u32;
using megamoe::device::u64;
using megamoe::device::u8;

constexpr int kMaxK = 8;
struct Experts {
  int id[kMaxK];
  int k;
};

// CTA c streams chunks [c n / grid, (c + 1) n / grid) of the k experts' bytes, STAGE bytes a
// chunk, STAGES chunks in flight: the producer re-arms a stage once its previous copy has landed.
template <int STAGE, int STAGES>
__global__ void __launch_bounds__(32, 1)
    stream_experts(const u8* weights, unsigned long long expert_bytes, Experts ex, u32* sink) {
  extern __shared__ __align__(128) u8 ring[];
  __shared__ u64 full[STAGES];
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) ptx::mbarrier_init(full + s, 1);
    ptx::fence_mbarrier_init();
  }
  __syncwarp();
  ptx::griddep_wait();
  const unsigned long long per_expert = expert_bytes / STAGE;
  const unsigned long long n = per_expert * static_cast<unsigned long long>(ex.k);
  const unsigned long long lo = n * blockIdx.x / gridDim.x, hi = n * (blockIdx.x + 1) / gridDim.x;
  const u64 policy = ptx::l2_evict_first_policy();
  if (threadIdx.x == 0) {
    for (unsigned long long c = lo; c < hi; ++c) {
      const auto j = c - lo;
      const int s = static_cast<int>(j % STAGES);
      if (j >= STAGES) ptx::mbarrier_wait_parity(full + s, static_cast<u32>((j / STAGES - 1) & 1));
      const unsigned long long e = c / per_expert, off = (c % per_expert) * STAGE;
      const u8* src = weights + static_cast<unsigned long long>(ex.id[e]) * expert_bytes + off;
      ptx::mbarrier_arrive_expect_tx(full + s, STAGE);
      ptx::bulk_load(ring + s * STAGE, src, STAGE, full + s, policy);
    }
    // Every copy has landed before the CTA leaves.
    for (unsigned long long j = (hi - lo > STAGES ? hi - lo - STAGES : 0); j < hi - lo; ++j) {
      ptx::mbarrier_wait_parity(full + j % STAGES, static_cast<u32>((j / STAGES) & 1));
    }
    if (ring[0] == 0x5Au && ring[STAGE - 1] == 0xA5u && hi == lo + 12345) sink[0] = 1;
  }
}

// Non-zero, varying contents.
__global__ void fill(u32* p, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += gridDim.x * 256ull) {
    p[i] = static_cast<u32>(i * 0x9E3779B1ull) | 0x01010101u;
  }
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

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

struct Preset {
  const char* name;
  long long h, i;
  int k;
};

template <int STAGE, int STAGES>
void run(const Preset& p, const u8* weights, unsigned long long expert_bytes, double bw_tbs,
         int sms, u32* sink, u8* img_src, u8* img_dst, cudaStream_t st) {
  auto kernel = stream_experts<STAGE, STAGES>;
  const int smem = STAGE * STAGES;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  constexpr int kSets = 8;
  std::mt19937 gen(20261201u);
  std::vector<Experts> sets(kSets);
  for (Experts& s : sets) {
    std::vector<int> all(256);
    for (int e = 0; e < 256; ++e) all[static_cast<size_t>(e)] = e;
    std::shuffle(all.begin(), all.end(), gen);
    s.k = p.k;
    for (int j = 0; j < p.k; ++j) s.id[j] = all[static_cast<size_t>(j)];
  }
  auto layer = [&](int s, bool moe) {
    CK(cudaMemcpyAsync(img_dst, img_src + s * 4096, 4096, cudaMemcpyDeviceToDevice, st));
    if (!moe) return;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(sms));
    cfg.blockDim = dim3(32);
    cfg.dynamicSmemBytes = static_cast<size_t>(smem);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, kernel, weights, expert_bytes, sets[static_cast<size_t>(s)], sink));
  };
  for (int s = 0; s < kSets; ++s) layer(s, true);
  CK(cudaStreamSynchronize(st));
  auto capture = [&](bool moe) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int s = 0; s < kSets; ++s) layer(s, moe);
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
  const double us = (full_ms - pre_ms) * 1000.0 / kSets;
  const double bytes = static_cast<double>(expert_bytes) * p.k;
  const double floor_us = bytes / (bw_tbs * 1e12) * 1e6;
  std::printf("T1STREAM %s %d x %d B: %.1f us, floor %.1f us (%.0f MB at %.3f TB/s), ratio %.2f\n",
              p.name, STAGES, STAGE, us, floor_us, bytes / 1e6, bw_tbs, us / floor_us);
  std::fflush(stdout);
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  u32* sink;
  CK(cudaMalloc(&sink, 4));
  u8 *img_src, *img_dst;
  CK(cudaMalloc(&img_src, 8 * 4096));
  CK(cudaMalloc(&img_dst, 4096));
  CK(cudaMemset(img_src, 0x3C, 8 * 4096));
  const Preset presets[] = {{"dsv4-flash", 4096, 2048, 6}, {"h6144-e256-k8", 6144, 3072, 8}};
  for (const Preset& p : presets) {
    // Nibbles and UE4M3 scales of gate, up and down: 3 H I x (1/2 + 1/16) bytes.
    const unsigned long long expert_bytes = 3ull * p.h * p.i * 9 / 16;
    const unsigned long long total = expert_bytes * 256;
    u8* weights;
    CK(cudaMalloc(&weights, total));
    fill<<<sms * 8, 256, 0, st>>>(reinterpret_cast<u32*>(weights), total / 4);
    CK(cudaGetLastError());
    const unsigned long long n16 = std::min<unsigned long long>(total, 4ull << 30) / 16;
    const float bw_ms = median_ms(st, 15, [&] {
      megamoe::device::selftest::read_bandwidth_kernel<<<sms * 4, 512, 0, st>>>(
          reinterpret_cast<const uint4*>(weights), n16, sink);
    });
    const double bw = static_cast<double>(n16 * 16) / (bw_ms * 1e-3) / 1e12;
    // The pipelined kernel's ring at the decode presets (2 stages of 4 blocks a consumer warp,
    // 16 warps: 73 728 B) and two finer rings of the same or more bytes in flight.
    run<73728, 2>(p, weights, expert_bytes, bw, sms, sink, img_src, img_dst, st);
    run<36864, 5>(p, weights, expert_bytes, bw, sms, sink, img_src, img_dst, st);
    run<18432, 8>(p, weights, expert_bytes, bw, sms, sink, img_src, img_dst, st);
    CK(cudaFree(weights));
  }
  return 0;
}
