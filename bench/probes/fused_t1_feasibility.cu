// Two questions a fused small-batch design would have to answer first (bench/NOTES.md,
// twenty-ninth session). The design: an item is one expert's 128 intermediate columns; four CTAs
// of a cluster each run FC1 for one 32-column tile of it (today's FC1 unit, 147 KB contiguous at
// dsv4-flash), swap the re-quantized columns through distributed shared memory, and each runs that
// 128-k block of FC2 for a quarter of the hidden rows; FC2's partial sums over the k blocks meet
// in the combine. No FC1 -> FC2 grid barrier.
//   1. Do 33 clusters of four 1-CTA-per-SM CTAs fit on the H200 at once? (GPCs hold whole
//      clusters; an SM left over in a GPC is lost to a clustered grid.) Asked of the occupancy
//      API, then checked by launching that many clusters that wait for each other.
//   2. What do the fused design's bytes cost alone, streamed and timed as the bench times the
//      layer (as bench/probes/t1_stream_floor.cu)? Today's W2 layout gives a CTA's FC2 share as
//      runs of 1152 bytes (one 16 x 128 block each) 18 KB apart; a k-block-major W2 would make it
//      one contiguous run, and would hand today's 64-row FC2 units runs of four blocks instead.
//      One CTA per SM, a producer thread with four 36 KB stages; patterns (stream_pattern below):
//        today             FC1 units then FC2 units, equal counts a CTA (the pipelined kernel's
//                          bytes); _w2kb128 / _w2kb64 with W2 k-block-major in 128- / 64-k blocks;
//        fused4            items of four CTAs, today's W2 layout (FC2 in 1152-byte runs);
//        fused4_w2kb128    the same with W2 k-block-major (the FC2 share contiguous);
//        fused2_w2kb64     items of two CTAs (64 columns), W2 k-block-major in 64-k blocks.
// Standalone; build and run on the GPU machine:
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I kernels \
//        -o fused_t1_feasibility bench/probes/fused_t1_feasibility.cu && ./fused_t1_feasibility
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
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

// ---- 1. cluster fit -------------------------------------------------------------------------

constexpr int kThreads = 544;  // the pipelined kernel's 17 warps
constexpr int kSmem = 220 * 1024;

// Every CTA arrives, then waits (bounded) until all have: only a grid whose CTAs are all resident
// at once sees every arrival. Records each CTA's SM.
__global__ void __launch_bounds__(kThreads, 1)
    residency_check(u32* arrived, u32* smid, u32* timed_out, u32 expected) {
  if (threadIdx.x != 0) return;
  u32 sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  smid[blockIdx.x] = sm;
  atomicAdd(arrived, 1u);
  u64 t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    if (*reinterpret_cast<volatile u32*>(arrived) >= expected) return;
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > 200000000ull) {  // 200 ms
      atomicAdd(timed_out, 1u);
      return;
    }
  }
}

void cluster_fit(int sms) {
  CK(cudaFuncSetAttribute(residency_check, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  u32 *arrived, *smid, *timed_out;
  CK(cudaMalloc(&arrived, 4));
  CK(cudaMalloc(&timed_out, 4));
  CK(cudaMalloc(&smid, 4 * 1024));
  for (int cs : {1, 2, 4, 8}) {
    cudaLaunchConfig_t cfg = {};
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kSmem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(cs);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cfg.gridDim = dim3(static_cast<unsigned>(cs));
    int clusters = 0;
    CK(cudaOccupancyMaxActiveClusters(&clusters, residency_check, &cfg));
    const u32 grid = static_cast<u32>(clusters * cs);
    CK(cudaMemset(arrived, 0, 4));
    CK(cudaMemset(timed_out, 0, 4));
    cfg.gridDim = dim3(grid);
    CK(cudaLaunchKernelEx(&cfg, residency_check, arrived, smid, timed_out, grid));
    CK(cudaDeviceSynchronize());
    u32 to = 0;
    std::vector<u32> ids(grid);
    CK(cudaMemcpy(&to, timed_out, 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ids.data(), smid, 4 * grid, cudaMemcpyDeviceToHost));
    const std::set<u32> distinct(ids.begin(), ids.end());
    std::printf(
        "CLUSTERFIT size %d: %d clusters resident (occupancy API), %u CTAs on %zu distinct "
        "SMs of %d, %u CTAs timed out waiting for the others\n",
        cs, clusters, grid, distinct.size(), sms, to);
  }
  CK(cudaFree(arrived));
  CK(cudaFree(timed_out));
  CK(cudaFree(smid));
}

// ---- 2. the bytes of each pattern -----------------------------------------------------------

constexpr u32 kBlock = 1152;  // one 16-row x 128-k block: 1024 B of nibbles, 128 B of scales
constexpr u32 kStage = 32 * kBlock;
constexpr int kStages = 4;
constexpr int kMaxK = 8;

struct Experts {
  int id[kMaxK];
  int k;
};

struct Shape {
  int h, i;
  u64 w13_bytes, w2_bytes;  // per expert
};

enum Pattern { kToday = 0, kFused = 1 };

struct Ring {
  u8* base;
  u64* full;
  u64 policy;
  u32 stage = 0;   // stages begun so far
  u32 filled = 0;  // bytes of the open stage

  // The open stage's buffer; waits until its previous copies have landed when the stage is begun.
  __device__ u8* slot(u32 bytes) {
    const u32 s = stage % kStages;
    if (filled == 0) {
      if (stage >= kStages) ptx::mbarrier_wait_parity(full + s, ((stage / kStages) - 1) & 1);
      ptx::mbarrier_arrive_expect_tx(full + s, kStage);
    }
    u8* dst = base + s * kStage + filled;
    filled += bytes;
    return dst;
  }
  __device__ void copy(const u8* src, u32 bytes) {
    u8* dst = slot(bytes);
    ptx::bulk_load(dst, src, bytes, full + stage % kStages, policy);
    if (filled == kStage) {
      filled = 0;
      ++stage;
    }
  }
  __device__ void drain() {
    for (u32 j = stage > kStages ? stage - kStages : 0; j < stage; ++j) {
      ptx::mbarrier_wait_parity(full + j % kStages, (j / kStages) & 1);
    }
  }
};

// PATTERN kToday: FC1 units then FC2 units (64 hidden rows, all of I) in equal counts a CTA.
// PATTERN kFused: items of GROUP CTAs (32 GROUP intermediate columns of one expert); CTA q of a
// group streams FC1 tile GROUP b + q, then its FC2 share (H / GROUP rows x the item's columns).
// W2KB: the W2 layout read. 0 = today's ([64-row tile][row group][128-k block] of 1152 bytes: a
// 64-row unit is contiguous, a fused share is runs of 1152 bytes); 128 or 64 = k-block-major
// ([k block][row group over H] of 16 x W2KB weights: a 64-row unit is runs of 4 blocks, a fused
// share of a GROUP whose columns are one such block is contiguous).
template <int PATTERN, int GROUP, int W2KB>
__global__ void __launch_bounds__(32, 1)
    stream_pattern(const u8* w13, const u8* w2, Shape sh, Experts ex, u32* sink) {
  static_assert(PATTERN == kToday || W2KB == 0 || W2KB == 32 * GROUP,
                "a fused share is contiguous only where the item's columns are one k block");
  extern __shared__ __align__(128) u8 ring_bytes[];
  __shared__ u64 full[kStages];
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) ptx::mbarrier_init(full + s, 1);
    ptx::fence_mbarrier_init();
  }
  __syncwarp();
  ptx::griddep_wait();
  if (threadIdx.x != 0) return;
  Ring ring{ring_bytes, full, ptx::l2_evict_first_policy()};
  const u32 fc1_unit = 4u * static_cast<u32>(sh.h / 128) * kBlock;  // 32 columns, gate and up
  const u32 kb2 = static_cast<u32>(sh.i / 128);                     // W2 128-k blocks a row group
  const u32 fc2_unit = 4u * kb2 * kBlock;                           // 64 hidden rows
  const u32 row_groups = static_cast<u32>(sh.h / 16);
  const u32 grid = gridDim.x;
  if constexpr (PATTERN == kToday) {
    const u32 n1 = static_cast<u32>(ex.k) * static_cast<u32>(sh.i / 32);
    for (u32 u = n1 * blockIdx.x / grid; u < n1 * (blockIdx.x + 1) / grid; ++u) {
      const u8* src =
          w13 + ex.id[u / (sh.i / 32)] * sh.w13_bytes + (u % (sh.i / 32)) * u64{fc1_unit};
      for (u32 o = 0; o < fc1_unit; o += kStage) ring.copy(src + o, kStage);
    }
    const u32 n2 = static_cast<u32>(ex.k) * static_cast<u32>(sh.h / 64);
    for (u32 u = n2 * blockIdx.x / grid; u < n2 * (blockIdx.x + 1) / grid; ++u) {
      const u8* x2 = w2 + ex.id[u / (sh.h / 64)] * sh.w2_bytes;
      const u32 r = u % (sh.h / 64);
      if constexpr (W2KB == 0) {
        for (u32 o = 0; o < fc2_unit; o += kStage / 2) {
          ring.copy(x2 + r * u64{fc2_unit} + o, kStage / 2);
        }
      } else {
        constexpr u32 kBlockBytes = 9u * W2KB;  // 16 rows x W2KB k, nibbles and scales
        for (u32 b = 0; b < static_cast<u32>(sh.i / W2KB); ++b) {
          ring.copy(x2 + (u64{b} * row_groups + 4 * r) * kBlockBytes, 4 * kBlockBytes);
        }
      }
    }
  } else {
    const u32 groups = grid / GROUP, group = blockIdx.x / GROUP, q = blockIdx.x % GROUP;
    const u32 per_expert = static_cast<u32>(sh.i / (32 * GROUP));
    const u32 n = static_cast<u32>(ex.k) * per_expert;
    const u32 rows = static_cast<u32>(sh.h) / GROUP;  // this CTA's hidden rows in FC2
    const u32 share = rows * 18u * GROUP;             // rows x 32 GROUP k x 9 / 16 bytes
    for (u32 it = n * group / groups; it < n * (group + 1) / groups; ++it) {
      const u32 e = it / per_expert, b = it % per_expert;
      const u8* src1 = w13 + ex.id[e] * sh.w13_bytes + (GROUP * b + q) * u64{fc1_unit};
      for (u32 o = 0; o < fc1_unit; o += kStage) ring.copy(src1 + o, kStage);
      const u8* x2 = w2 + ex.id[e] * sh.w2_bytes;
      if constexpr (W2KB == 0) {
        // Today's layout, GROUP 4: the item is 128-k block b of every row group of the share.
        for (u32 rg = q * rows / 16; rg < (q + 1) * rows / 16; ++rg) {
          ring.copy(x2 + (u64{rg} * kb2 + b) * kBlock, kBlock);
        }
      } else {
        const u8* src2 = x2 + (u64{b} * GROUP + q) * share;
        for (u32 o = 0; o < share; o += kStage / 2) ring.copy(src2 + o, kStage / 2);
      }
    }
  }
  ring.drain();
  if (ring_bytes[0] == 0x5Au && ring_bytes[kStage - 1] == 0xA5u && ring.stage == 12345) sink[0] = 1;
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
  int h, i, k;
};

template <int PATTERN, int GROUP, int W2KB>
void run(const char* label, const Preset& p, const Shape& sh, const u8* w13, const u8* w2,
         double bw_tbs, int grid, u32* sink, u8* img_src, u8* img_dst, cudaStream_t st) {
  auto kernel = stream_pattern<PATTERN, GROUP, W2KB>;
  const int smem = kStage * kStages;
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
    cfg.gridDim = dim3(static_cast<unsigned>(grid));
    cfg.blockDim = dim3(32);
    cfg.dynamicSmemBytes = static_cast<size_t>(smem);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, kernel, w13, w2, sh, sets[static_cast<size_t>(s)], sink));
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
  const double bytes = static_cast<double>(sh.w13_bytes + sh.w2_bytes) * p.k;
  const double floor_us = bytes / (bw_tbs * 1e12) * 1e6;
  std::printf(
      "FUSEDSTREAM %s %-14s grid %d: %.1f us, floor %.1f us (%.0f MB at %.3f TB/s), "
      "ratio %.2f\n",
      p.name, label, grid, us, floor_us, bytes / 1e6, bw_tbs, us / floor_us);
  std::fflush(stdout);
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cluster_fit(sms);
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
    Shape sh{p.h, p.i, 2ull * p.h * p.i * 9 / 16, 1ull * p.h * p.i * 9 / 16};
    u8 *w13, *w2;
    CK(cudaMalloc(&w13, sh.w13_bytes * 256));
    CK(cudaMalloc(&w2, sh.w2_bytes * 256));
    fill<<<sms * 8, 256, 0, st>>>(reinterpret_cast<u32*>(w13), sh.w13_bytes * 256 / 4);
    fill<<<sms * 8, 256, 0, st>>>(reinterpret_cast<u32*>(w2), sh.w2_bytes * 256 / 4);
    CK(cudaGetLastError());
    const unsigned long long n16 =
        std::min<unsigned long long>(sh.w13_bytes * 256, 4ull << 30) / 16;
    const float bw_ms = median_ms(st, 15, [&] {
      megamoe::device::selftest::read_bandwidth_kernel<<<sms * 4, 512, 0, st>>>(
          reinterpret_cast<const uint4*>(w13), n16, sink);
    });
    const double bw = static_cast<double>(n16 * 16) / (bw_ms * 1e-3) / 1e12;
    for (int pass = 0; pass < 2; ++pass) {
      const int g4 = sms / 4 * 4;
      run<kToday, 1, 0>("today", p, sh, w13, w2, bw, sms, sink, img_src, img_dst, st);
      run<kToday, 1, 128>("today_w2kb128", p, sh, w13, w2, bw, sms, sink, img_src, img_dst, st);
      run<kToday, 1, 64>("today_w2kb64", p, sh, w13, w2, bw, sms, sink, img_src, img_dst, st);
      run<kFused, 4, 0>("fused4", p, sh, w13, w2, bw, g4, sink, img_src, img_dst, st);
      run<kFused, 4, 128>("fused4_w2kb128", p, sh, w13, w2, bw, g4, sink, img_src, img_dst, st);
      run<kFused, 2, 64>("fused2_w2kb64", p, sh, w13, w2, bw, sms, sink, img_src, img_dst, st);
      // As many SMs as four-CTA clusters cover on the H200 (run 246: 30 clusters).
      run<kFused, 4, 128>("fused4_w2kb128", p, sh, w13, w2, bw, 120, sink, img_src, img_dst, st);
    }
    CK(cudaFree(w13));
    CK(cudaFree(w2));
  }
  return 0;
}
