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
//      layer (layer_call_timing.cuh, as t1_stream_floor.cu)? Today's W2 layout gives a CTA's
//      FC2 share as runs of 1152 bytes (one 16 x 128 block each) 18 KB apart; a k-block-major W2
//      would make it one contiguous run, and would hand today's 64-row FC2 units runs of four
//      blocks instead. One CTA per SM, a producer thread with four 36 KB stages; patterns
//      (stream_pattern below):
//        today             FC1 units then FC2 units, equal counts a CTA (the pipelined kernel's
//                          bytes); _w2kb128 / _w2kb64 with W2 k-block-major in 128- / 64-k blocks;
//        fused4            items of four CTAs, today's W2 layout (FC2 in 1152-byte runs);
//        fused4_w2kb128    the same with W2 k-block-major (the FC2 share contiguous);
//        fused2_w2kb64     items of two CTAs (64 columns), W2 k-block-major in 64-k blocks.
// Standalone; build and run on the GPU machine:
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I kernels \
//        -o fused_t1_feasibility bench/probes/fused_t1_feasibility.cu && ./fused_t1_feasibility
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <set>
#include <vector>

#include "layer_call_timing.cuh"
#include "megamoe/common.cuh"
#include "megamoe/ptx/bulk_copy.cuh"
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
using layer_timing::Experts;

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
  layer_timing::init_stages_then_wait(full, kStages);
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

using layer_timing::Context;
using layer_timing::Preset;

template <int PATTERN, int GROUP, int W2KB>
void run(const Context& cx, const char* label, const Preset& p, const Shape& sh, const u8* w13,
         const u8* w2, double bw_tbs, int grid) {
  const double us = layer_timing::us_per_call(
      cx, stream_pattern<PATTERN, GROUP, W2KB>, grid, kStage * kStages, p.k,
      [&](const Experts& e) { return std::tuple(w13, w2, sh, e, cx.sink); });
  const double bytes = static_cast<double>(sh.w13_bytes + sh.w2_bytes) * p.k;
  const double floor_us = bytes / (bw_tbs * 1e12) * 1e6;
  std::printf(
      "FUSEDSTREAM %s %-14s grid %d: %.1f us, floor %.1f us (%.0f MB at %.3f TB/s), "
      "ratio %.2f\n",
      p.name, label, grid, us, floor_us, bytes / 1e6, bw_tbs, us / floor_us);
  std::fflush(stdout);
}

int main() {
  const Context cx = Context::create();
  const int sms = cx.sms;
  cluster_fit(sms);
  for (const Preset& p : layer_timing::kPresets) {
    Shape sh{p.h, p.i, 2ull * p.h * p.i * 9 / 16, 1ull * p.h * p.i * 9 / 16};
    u8 *w13, *w2;
    CK(cudaMalloc(&w13, sh.w13_bytes * 256));
    CK(cudaMalloc(&w2, sh.w2_bytes * 256));
    layer_timing::fill_varying<<<sms * 8, 256, 0, cx.st>>>(reinterpret_cast<u32*>(w13),
                                                           sh.w13_bytes * 256 / 4);
    layer_timing::fill_varying<<<sms * 8, 256, 0, cx.st>>>(reinterpret_cast<u32*>(w2),
                                                           sh.w2_bytes * 256 / 4);
    CK(cudaGetLastError());
    const double bw =
        layer_timing::read_bandwidth_tbs(cx.st, w13, sh.w13_bytes * 256, cx.sink, sms);
    for (int pass = 0; pass < 2; ++pass) {
      const int g4 = sms / 4 * 4;
      run<kToday, 1, 0>(cx, "today", p, sh, w13, w2, bw, sms);
      run<kToday, 1, 128>(cx, "today_w2kb128", p, sh, w13, w2, bw, sms);
      run<kToday, 1, 64>(cx, "today_w2kb64", p, sh, w13, w2, bw, sms);
      run<kFused, 4, 0>(cx, "fused4", p, sh, w13, w2, bw, g4);
      run<kFused, 4, 128>(cx, "fused4_w2kb128", p, sh, w13, w2, bw, g4);
      run<kFused, 2, 64>(cx, "fused2_w2kb64", p, sh, w13, w2, bw, sms);
      // As many SMs as four-CTA clusters cover on the H200 (run 246: 30 clusters).
      run<kFused, 4, 128>(cx, "fused4_w2kb128", p, sh, w13, w2, bw, 120);
    }
    CK(cudaFree(w13));
    CK(cudaFree(w2));
  }
  return 0;
}
