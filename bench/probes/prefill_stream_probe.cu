// The prefill core loop of prefill_core_probe.cu fed from memory (bench/NOTES.md, thirty-first
// session): how much of its ~970 TFLOP/s is left once the weights stream from HBM in the kernel
// layout and the tokens from an L2-resident f16 scratch? Timing only -- the loop's sums are
// checked in prefill_core_probe.cu; here the bytes come from memory and nothing is compared.
//
// The work is FC1 of dsv4-flash at one 128-token tile an expert (T ~ 5,500, uniform): 256
// experts x 4096 weight rows (gate and up) x 4096 k. A CTA tile is 256 weight rows (16 row
// groups: two consumer warpgroups of two m64 halves each) x 128 tokens over all of K; tile j is
// expert j / 16, row slice j % 16, so the 16 CTAs that share an expert's token tile run at about
// the same time and read it from L2. One CTA a SM, tiles dealt round robin.
//   * producer warp: per stage of 128 k, lanes 0..15 copy their row group's 16 x 128 block (1024
//     B of nibbles, 128 B of scales, the kernel layout: [row group][128-k block] in two arrays);
//     lane 16 copies the tile's 128 x 128 f16 token chunk (32 KB, K-major 8 x 8 core matrices).
//   * consumer warps (8): each decodes its two row groups' words (one per m64 half) a k16 step
//     into wgmma's register A operand; per k16 step one fence, two m64n128k16, one commit,
//     wait_group 1 (the operands of the step before kept live until then); at a stage's end
//     wait_group 0, then every thread releases the stage (DEFER: one group later).
// Standalone; build and run on the GPU machine:
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I kernels \
//        -o prefill_stream_probe bench/probes/prefill_stream_probe.cu && ./prefill_stream_probe
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "megamoe/formats/nvfp4_fragment_decode.cuh"
#include "megamoe/ptx/bulk_copy.cuh"
#include "probe_check.cuh"
#include "wgmma_rs.cuh"

namespace nvd = megamoe::device::nvfp4;
namespace px = megamoe::device::ptx;
using namespace wgmma_probe;

constexpr int kExperts = 256;
constexpr int kRowsPerExpert = 4096;  // 2 I of dsv4-flash
constexpr int kK = 4096;              // H
constexpr int kTokens = 128;          // N
constexpr int kTileRows = 256;
constexpr int kSlices = kRowsPerExpert / kTileRows;  // 16 CTA tiles an expert
constexpr int kBlocksK = kK / 128;                   // 128-k blocks a row group
constexpr int kRowGroups = kRowsPerExpert / 16;      // 256 an expert
constexpr int kStages = 4;
constexpr int kWeightStage = 16 * 1152;                  // 16 row groups x (1024 + 128) bytes
constexpr int kTokenStage = kTokens * 128 * 2;           // 128 tokens x 128 k f16
constexpr int kStageBytes = kWeightStage + kTokenStage;  // 51,200
constexpr int kConsumerWarps = 8;
constexpr u32 kKStride = 128;              // core matrices adjacent in K
constexpr u32 kNStride = (128 / 8) * 128;  // core matrices adjacent in N (one chunk's octets)

// Stage layout: row group r's nibbles at r x 1152, its scales at r x 1152 + 1024; the token
// chunk at kWeightStage.
struct Shared {
  alignas(128) unsigned char ring[kStages][kStageBytes];
  unsigned long long full[kStages], empty[kStages];
};

// SETMAXNREG: the producer is a whole warpgroup (one warp of it copies) that gives its registers
// to the consumers (setmaxnreg 40 / 232), instead of one warp beside them (288 threads: 224
// registers a thread at most, where ptxas serializes the wgmmas for want of registers).
// DEFER: no wait_group 0 at a stage's end; the stage is released after the next stage's first
// wait_group 1 (which ends every group of the stage before), so one group stays in flight across
// stage boundaries; wait_group 0 only at a tile's end.
template <bool SETMAXNREG, bool DEFER>
__global__ void __launch_bounds__(SETMAXNREG ? 384 : (kConsumerWarps + 1) * 32, 1)
    prefill_stream(const unsigned char* w13, const unsigned char* w13_sf, const uint16_t* tokens,
                   int tiles, float* sink) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Shared& s = *reinterpret_cast<Shared*>(smem_raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      px::mbarrier_init(&s.full[i], 1);                     // producer's expect_tx + bytes
      px::mbarrier_init(&s.empty[i], kConsumerWarps * 32);  // every consumer thread
    }
    px::fence_mbarrier_init();
  }
  __syncthreads();
  if (warp >= kConsumerWarps) {
    if constexpr (SETMAXNREG) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (warp != kConsumerWarps) return;
    // Producer.
    const unsigned long long policy = px::l2_evict_first_policy();
    int stage = 0;
    unsigned round = 0;
    for (int j = blockIdx.x; j < tiles; j += gridDim.x) {
      const int e = j / kSlices, slice = j % kSlices;
      const size_t rg0 = static_cast<size_t>(e) * kRowGroups + slice * 16;
      for (int kb = 0; kb < kBlocksK; ++kb) {
        if (round > 0) px::mbarrier_wait_parity(&s.empty[stage], (round - 1) & 1u);
        if (lane == 0) px::mbarrier_arrive_expect_tx(&s.full[stage], kStageBytes);
        __syncwarp();
        unsigned char* dst = s.ring[stage];
        if (lane < 16) {
          const size_t blk = (rg0 + lane) * kBlocksK + kb;
          px::bulk_load(dst + lane * 1152, w13 + blk * 1024, 1024, &s.full[stage], policy);
          px::bulk_load(dst + lane * 1152 + 1024, w13_sf + blk * 128, 128, &s.full[stage], policy);
        } else if (lane == 16) {
          const uint16_t* src = tokens + (static_cast<size_t>(e) * kBlocksK + kb) * (kTokens * 128);
          px::bulk_load(dst + kWeightStage, src, kTokenStage, &s.full[stage],
                        px::l2_evict_last_policy());
        }
        if (++stage == kStages) {
          stage = 0;
          ++round;
        }
      }
    }
    return;
  }
  if constexpr (SETMAXNREG) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  // Consumers: warp w of warpgroup wg = w / 4 holds row groups 8 wg + (w % 4) (half 0) and
  // 8 wg + 4 + (w % 4) (half 1) of the tile.
  const int wg = warp >> 2, wi = warp & 3;
  const int rg[2] = {8 * wg + wi, 8 * wg + 4 + wi};
  const u32 ring_base = static_cast<u32>(__cvta_generic_to_shared(s.ring[0]));
  Acc<128> acc[2];
  nvd::HalfFragment fa[2] = {}, fb[2] = {};  // alternate steps' operands (one per m64 half)
  float checksum = 0;
  int stage = 0;
  unsigned round = 0;
  int pending = -1;  // DEFER: the stage read by groups that may still run
  for (int j = blockIdx.x; j < tiles; j += gridDim.x) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[h].v[i] = 0.0f;
    }
#pragma unroll 1
    for (int kb = 0; kb < kBlocksK; ++kb) {
      px::mbarrier_wait_parity(&s.full[stage], round & 1u);
      const unsigned char* st = s.ring[stage];
      const u32 tok = ring_base + stage * kStageBytes + kWeightStage;
      // One k16 step as one group: each half's word and scale word straight from the stage (a
      // lane's words of steps 0..3 at lane x 16, of 4..7 512 bytes on; scale word step / 2 of its
      // quad's 16 bytes), the decode, one fence, two m64n128k16, one commit, wait_group 1.
      auto group = [&](nvd::HalfFragment(&f)[2], nvd::HalfFragment(&prev)[2], int step) {
        const bool first = step == 0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const unsigned char* blk = st + rg[h] * 1152;
          const u32 w =
              *reinterpret_cast<const u32*>(blk + (step >> 2) * 512 + lane * 16 + (step & 3) * 4);
          const u32 sw =
              *reinterpret_cast<const u32*>(blk + 1024 + (lane >> 2) * 16 + (step >> 1) * 4);
          f[h] = nvd::decode_weight_word(w, nvd::scale_pair(sw, (step & 1) != 0));
        }
        wg_fence();
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wgmma_rs<128>(acc[h], f[h].a0, f[h].a1, f[h].a2, f[h].a3,
                        make_desc(tok + step * 2 * kKStride, kKStride, kNStride));
        }
        wg_commit();
        wg_wait<1>();
        keep_live(prev);
        if (DEFER && first && pending >= 0) {
          px::mbarrier_arrive(&s.empty[pending]);
          pending = -1;
        }
      };
#pragma unroll
      for (int step = 0; step < 8; step += 2) {
        group(fa, fb, step);
        group(fb, fa, step + 1);
      }
      if constexpr (DEFER) {
        pending = stage;
      } else {
        wg_wait<0>();  // the stage's token chunk is read by wgmma until here
        keep_live(fa);
        keep_live(fb);
        px::mbarrier_arrive(&s.empty[stage]);
      }
      if (++stage == kStages) {
        stage = 0;
        ++round;
      }
    }
    if constexpr (DEFER) {
      wg_wait<0>();
      keep_live(fa);
      keep_live(fb);
      px::mbarrier_arrive(&s.empty[pending]);
      pending = -1;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int i = 0; i < 64; ++i) checksum += acc[h].v[i];
    }
  }
  sink[blockIdx.x * kConsumerWarps * 32 + threadIdx.x] = checksum;
}

__global__ void fill_bytes(unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 0x5bd1e995u;
    p[i] = static_cast<unsigned char>(x >> 13);
  }
}
__global__ void fill_scales(unsigned char* p, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    p[i] = static_cast<unsigned char>(0x70 + i % 7);  // re-encoded scales 0.5 .. 2
  }
}
__global__ void fill_tokens(uint16_t* p, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    p[i] = __half_as_ushort(__float2half(static_cast<float>(static_cast<int>(i % 9) - 4) * 0.25f));
  }
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t wbytes = size_t{kExperts} * kRowsPerExpert * kK / 2;
  const size_t sbytes = wbytes / 8;
  const size_t tok_elems = size_t{kExperts} * kTokens * kK;
  unsigned char *w13, *sf;
  uint16_t* tokens;
  float* sink;
  CK(cudaMalloc(&w13, wbytes));
  CK(cudaMalloc(&sf, sbytes));
  CK(cudaMalloc(&tokens, tok_elems * 2));
  CK(cudaMalloc(&sink, static_cast<size_t>(sms) * kConsumerWarps * 32 * sizeof(float)));
  fill_bytes<<<sms * 8, 256>>>(w13, wbytes, 12345u);
  fill_scales<<<sms * 8, 256>>>(sf, sbytes);
  fill_tokens<<<sms * 8, 256>>>(tokens, tok_elems);
  CK(cudaGetLastError());
  const int smem = static_cast<int>(sizeof(Shared));
  const int tiles = kExperts * kSlices;
  const double flops = 2.0 * kExperts * kRowsPerExpert * double{kK} * kTokens;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  auto time_form = [&](auto kernel, int threads, const char* what) {
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    std::vector<float> ms;
    for (int rep = 0; rep < 7; ++rep) {
      CK(cudaEventRecord(a));
      kernel<<<sms, threads, smem>>>(w13, sf, tokens, tiles, sink);
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      CK(cudaGetLastError());
      float t = 0;
      CK(cudaEventElapsedTime(&t, a, b));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double t = ms[ms.size() / 2];
    std::printf(
        "PREFILLSTREAM FC1 dsv4-flash, 256 experts x 128 tokens, %s: median of 7 %.3f ms = %.0f "
        "TFLOP/s; weights %.2f GB from HBM at %.2f TB/s, tokens %.2f GB read (x%d) from L2\n",
        what, t, flops / (t * 1e-3) / 1e12, (wbytes + sbytes) / 1e9,
        (wbytes + sbytes) / (t * 1e-3) / 1e12, tok_elems * 2.0 * kSlices / 1e9, kSlices);
    std::fflush(stdout);
  };
  time_form(prefill_stream<false, false>, (kConsumerWarps + 1) * 32, "producer warp (288 threads)");
  time_form(prefill_stream<true, false>, 384, "producer warpgroup, setmaxnreg 40 / 232");
  time_form(prefill_stream<true, true>, 384, "setmaxnreg, stages released one group late");
  return 0;
}
