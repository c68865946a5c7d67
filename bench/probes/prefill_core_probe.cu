// What the consume loop of a prefill kernel could reach (bench/NOTES.md, thirty-first session).
// At T = 8192 the wide kernel runs at ~240 TFLOP/s (run 261): it streams and decodes each weight
// once per sub-tile of at most 32 tokens (6-8 times at T = 8192). Here each weight is decoded
// once for N = 128 or 256 tokens: two consumer warpgroups of 64 weight rows (8 warps, one CTA a
// SM), each warp decoding its 16 rows of a k16 step with the kernels' decode
// (nvfp4::decode_weight_word) into wgmma's register A operand, the tokens in shared memory as
// K-major 8 x 8 core matrices. Words, scales and tokens stay in shared memory and are read afresh
// every pass (the loop's rate, not the memory system's). Modes:
//   0  wgmma m64n128k16 (twice a step for N = 256) after the decode, 4 steps a fence / commit,
//      one group in flight;
//   1  the same wgmmas with constant A fragments: the register-A form's ceiling without decode;
//   2  mma.sync m16n8k16 over N / 8 token groups after the same decode (the kernels' MMA form
//      with more groups);
//   3  mode 0 with wait_group 0 after each group (nothing in flight).
// Before timing, one pass of modes 0, 2 and 3 on CTA 0 is checked against double sums of the
// decoded weights (`dump_weights`) times the tokens, with both readings of the descriptor's
// offsets; the timed modes 0 and 3 print their relative L2 against mode 2. Each group's register
// A operands are kept live until the wait that ends it (wgmma_rs.cuh, keep_a_live).
// Standalone; build and run on the GPU machine:
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I kernels \
//        -o prefill_core_probe bench/probes/prefill_core_probe.cu && ./prefill_core_probe
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "megamoe/formats/nvfp4_fragment_decode.cuh"
#include "megamoe/ptx/bulk_copy.cuh"
#include "megamoe/ptx/mma_sm90.cuh"
#include "probe_check.cuh"
#include "wgmma_rs.cuh"

namespace nvd = megamoe::device::nvfp4;
namespace px = megamoe::device::ptx;
using namespace wgmma_probe;

constexpr int kWarps = 8;                 // two warpgroups
constexpr int kK = 256;                   // k of the token tile in shared memory
constexpr int kSteps = kK / 16;           // k16 steps a pass
constexpr int kMaxTokens = 256;           // N
constexpr u32 kKStride = 128;             // bytes between K-adjacent core matrices
constexpr u32 kNStride = (kK / 8) * 128;  // bytes between 8-token groups

struct Shared {
  u32 words[kWarps][kSteps][32];               // step q's nibble word of every lane
  u32 scales[kWarps][kSteps / 4][32];          // re-encoded scale bytes [g, g8, g, g8] of two steps
  alignas(128) uint16_t tok[kMaxTokens * kK];  // [token group][k octet][8 tokens][8 k]
};

__device__ __forceinline__ int core_index(int tok, int k) {
  return ((tok >> 3) * (kK / 8) + (k >> 3)) * 64 + (tok & 7) * 8 + (k & 7);
}

// Valid codes, small scales and zero-free tokens, the same for every CTA.
__device__ void fill(Shared& s) {
  for (int i = threadIdx.x; i < kWarps * kSteps * 32; i += blockDim.x) {
    u32 x = (i + 1) * 2654435761u;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    (&s.words[0][0][0])[i] = x ^ (x >> 15);
  }
  for (int i = threadIdx.x; i < kWarps * (kSteps / 4) * 32; i += blockDim.x) {
    const u32 b = 0x70u + (i % 7);  // f16 bits b << 7: scales 0.5 .. 2
    (&s.scales[0][0][0])[i] = b | (b << 8) | (b << 16) | (b << 24);
  }
  for (int i = threadIdx.x; i < kMaxTokens * kK; i += blockDim.x) {
    const int tok = i / kK, k = i % kK;
    const float v = static_cast<float>(static_cast<int>((tok * 7 + k * 3) % 9u) - 4) * 0.25f;
    s.tok[core_index(tok, k)] = __half_as_ushort(__float2half(v));
  }
}

// Four k16 steps from q0: decode into `f` (modes 0, 3; mode 1 takes the constant fragment), one
// fence, the wgmmas, one commit, then the wait: wait_group 1 (mode 0, 1) leaves this group in
// flight and ends the previous one, whose operands `prev` are kept live until here.
template <int MODE, int kHalves>
__device__ __forceinline__ void wgmma_group(const Shared& s, nvd::HalfFragment (&f)[4],
                                            nvd::HalfFragment (&prev)[4],
                                            const nvd::HalfFragment& fixed,
                                            Acc<128> (&wacc)[kHalves], u32 tok_base, int q0,
                                            u32 lbo, u32 sbo) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int q = q0 + i;
    f[i] = MODE == 1 ? fixed
                     : nvd::decode_weight_word(
                           s.words[warp][q][lane],
                           nvd::scale_pair(s.scales[warp][q >> 2][lane], (q & 1) != 0));
  }
  wg_fence();
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      const u32 at = tok_base + h * 16 * kNStride + (q0 + i) * 2 * kKStride;
      wgmma_rs<128>(wacc[h], f[i].a0, f[i].a1, f[i].a2, f[i].a3, make_desc(at, lbo, sbo));
    }
  }
  wg_commit();
  if constexpr (MODE == 3) {
    wg_wait<0>();
  } else {
    wg_wait<1>();
  }
  keep_live(prev);
}

template <int MODE, int N>
__global__ void __launch_bounds__(kWarps * 32, 1)
    prefill_core(int passes, u32 lbo, u32 sbo, float* sums, long long* nanos) {
  static_assert(N == 128 || N == 256, "one or two m64n128 wgmmas a step");
  constexpr int kHalves = N / 128;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Shared& s = *reinterpret_cast<Shared*>(smem_raw);
  fill(s);
  // wgmma reads the token tile through the async proxy: the threads' generic stores must be
  // made visible to it before the barrier.
  px::fence_proxy_async_shared();
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const u32 tok_base = static_cast<u32>(__cvta_generic_to_shared(s.tok));
  Acc<128> wacc[kHalves] = {};
  float acc[MODE == 2 ? N / 8 : 1][4] = {};
  nvd::HalfFragment fa[4] = {}, fb[4] = {};  // the A operands of alternate groups of 4 steps
  const nvd::HalfFragment fixed =
      nvd::decode_weight_word(s.words[warp][0][lane], nvd::scale_pair(s.scales[warp][0][lane], 0));
  const u64 n0 = px::globaltimer_ns();
  for (int p = 0; p < passes; ++p) {
    asm volatile("" ::: "memory");  // words and scales read afresh every pass
    if constexpr (MODE == 2) {
#pragma unroll 1
      for (int q = 0; q < kSteps; ++q) {
        const nvd::HalfFragment f = nvd::decode_weight_word(
            s.words[warp][q][lane], nvd::scale_pair(s.scales[warp][q >> 2][lane], (q & 1) != 0));
#pragma unroll
        for (int nt = 0; nt < N / 8; ++nt) {
          const int tok = nt * 8 + g, k = q * 16 + 2 * t;
          const u32 b0 = *reinterpret_cast<const u32*>(&s.tok[core_index(tok, k)]);
          const u32 b1 = *reinterpret_cast<const u32*>(&s.tok[core_index(tok, k + 8)]);
          px::mma_m16n8k16_f16(acc[nt], f.a0, f.a1, f.a2, f.a3, b0, b1);
        }
      }
    } else {
#pragma unroll 1
      for (int q0 = 0; q0 < kSteps; q0 += 8) {
        wgmma_group<MODE, kHalves>(s, fa, fb, fixed, wacc, tok_base, q0, lbo, sbo);
        wgmma_group<MODE, kHalves>(s, fb, fa, fixed, wacc, tok_base, q0 + 4, lbo, sbo);
      }
    }
  }
  if constexpr (MODE != 2) {
    wg_wait<0>();
    keep_live(fa);
    keep_live(fb);
  }
  const u64 n1 = px::globaltimer_ns();
  // Per thread: its m16n8 fragments in token-group order, [cta][warp][nt][i][lane].
  float* o = sums + (static_cast<size_t>(blockIdx.x) * kWarps + warp) * (N / 8) * 4 * 32;
#pragma unroll
  for (int nt = 0; nt < N / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o[(nt * 4 + i) * 32 + lane] =
          MODE == 2 ? acc[MODE == 2 ? nt : 0][i] : wacc[nt / 16].v[(nt % 16) * 4 + i];
    }
  }
  if (lane == 0) nanos[blockIdx.x * kWarps + warp] = static_cast<long long>(n1 - n0);
  (void)t;
}

// Warp w's decoded weights of CTA 0 as [warp][16 rows][kK] f16 bits, written from the A
// fragments (a0: row g, k 2t..2t+1; a1: row g + 8; a2 / a3: the same at k + 8): the reference's
// operand, taken from the very decode the modes run.
__global__ void __launch_bounds__(kWarps * 32, 1) dump_weights(uint16_t* a) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Shared& s = *reinterpret_cast<Shared*>(smem_raw);
  fill(s);
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  for (int q = 0; q < kSteps; ++q) {
    const nvd::HalfFragment f = nvd::decode_weight_word(
        s.words[warp][q][lane], nvd::scale_pair(s.scales[warp][q >> 2][lane], (q & 1) != 0));
    const u32 regs[4] = {f.a0, f.a1, f.a2, f.a3};
    for (int r = 0; r < 4; ++r) {
      const int row = g + (r & 1) * 8, k = q * 16 + 2 * t + (r >> 1) * 8;
      uint16_t* at = a + (static_cast<size_t>(warp) * 16 + row) * kK + k;
      at[0] = static_cast<uint16_t>(regs[r] & 0xFFFFu);
      at[1] = static_cast<uint16_t>(regs[r] >> 16);
    }
  }
}

struct Rate {
  double tflops;
  double weight_kb_per_us_sm;  // NVFP4 bytes (with scales) the SM consumes a microsecond
};

template <int MODE, int N>
Rate run(int sms, int passes, std::vector<float>& out, u32 lbo = kKStride, u32 sbo = kNStride) {
  const int smem = static_cast<int>(sizeof(Shared));
  CK(cudaFuncSetAttribute(prefill_core<MODE, N>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          smem));
  const size_t n = static_cast<size_t>(sms) * kWarps * (N / 8) * 4 * 32;
  float* sums;
  long long* ns;
  CK(cudaMalloc(&sums, n * sizeof(float)));
  CK(cudaMalloc(&ns, sms * kWarps * sizeof(long long)));
  Rate best{0, 0};
  for (int rep = 0; rep < 3; ++rep) {
    prefill_core<MODE, N><<<sms, kWarps * 32, smem>>>(passes, lbo, sbo, sums, ns);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<long long> t(sms * kWarps);
    CK(cudaMemcpy(t.data(), ns, t.size() * sizeof(long long), cudaMemcpyDeviceToHost));
    long long worst = 0;
    for (long long v : t) worst = v > worst ? v : worst;
    // Per SM and pass: 128 weight rows x kK k x N tokens, 2 flops each; 0.5625 bytes a weight.
    const double flops = 2.0 * 128 * kK * N * passes * sms;
    const double bytes_sm = 128.0 * kK * 0.5625 * passes;
    const Rate r{flops / (worst * 1e-9) / 1e12, bytes_sm / 1024.0 / (worst * 1e-3)};
    if (r.tflops > best.tflops) best = r;
  }
  out.resize(n);
  CK(cudaMemcpy(out.data(), sums, n * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaFree(sums));
  CK(cudaFree(ns));
  return best;
}

// The largest |mode - reference| over CTA 0's outputs of one pass, relative to the largest
// |reference|: the reference sums the dumped weights times the tokens (fill's formula) in double.
template <int MODE, int N>
double check_one_pass(int sms, u32 lbo, u32 sbo) {
  const int smem = static_cast<int>(sizeof(Shared));
  CK(cudaFuncSetAttribute(dump_weights, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  uint16_t* a_dev;
  CK(cudaMalloc(&a_dev, kWarps * 16 * kK * sizeof(uint16_t)));
  dump_weights<<<1, kWarps * 32, smem>>>(a_dev);
  CK(cudaGetLastError());
  std::vector<uint16_t> a(kWarps * 16 * kK);
  CK(cudaMemcpy(a.data(), a_dev, a.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  CK(cudaFree(a_dev));
  std::vector<float> out;
  run<MODE, N>(sms, 1, out, lbo, sbo);
  double worst = 0, largest = 0;
  for (int w = 0; w < kWarps; ++w) {
    for (int nt = 0; nt < N / 8; ++nt) {
      for (int i = 0; i < 4; ++i) {
        for (int lane = 0; lane < 32; ++lane) {
          const int row = (lane >> 2) + (i >> 1) * 8, tok = nt * 8 + 2 * (lane & 3) + (i & 1);
          double ref = 0;
          for (int k = 0; k < kK; ++k) {
            const double x =
                static_cast<double>(static_cast<int>((tok * 7 + k * 3) % 9u) - 4) * 0.25;
            ref +=
                static_cast<double>(__half2float(__ushort_as_half(a[(w * 16 + row) * kK + k]))) * x;
          }
          const double got = out[((static_cast<size_t>(w) * (N / 8) + nt) * 4 + i) * 32 + lane];
          worst = std::fmax(worst, std::fabs(got - ref));
          largest = std::fmax(largest, std::fabs(ref));
        }
      }
    }
  }
  return largest > 0 ? worst / largest : -1.0;
}

template <int N>
void compare(int sms, int passes) {
  std::vector<float> ref, out;
  std::printf(
      "PREFILLCHECK N=%d one pass against double sums (max error / max |sum|): mma.sync "
      "%.3g, wgmma LBO = K stride %.3g, wgmma LBO = N stride %.3g\n",
      N, check_one_pass<2, N>(sms, 0, 0), check_one_pass<0, N>(sms, kKStride, kNStride),
      check_one_pass<0, N>(sms, kNStride, kKStride));
  std::printf(
      "PREFILLCHECK N=%d wgmma waited at once (wait_group 0): LBO = K stride %.3g, LBO = "
      "N stride %.3g\n",
      N, check_one_pass<3, N>(sms, kKStride, kNStride),
      check_one_pass<3, N>(sms, kNStride, kKStride));
  const Rate r2 = run<2, N>(sms, passes, ref);
  std::printf("PREFILLCORE N=%d %-40s %6.1f TFLOP/s  %6.1f KB/us/SM of weights\n", N,
              "mma.sync m16n8k16 after the decode", r2.tflops, r2.weight_kb_per_us_sm);
  // The descriptor's offsets as the checks above found them: LBO the K-direction stride.
  auto wgmma_row = [&](const char* what, const Rate& r) {
    std::printf(
        "PREFILLCORE N=%d %-40s %6.1f TFLOP/s  %6.1f KB/us/SM of weights  rel-L2 vs "
        "mma.sync %.3g\n",
        N, what, r.tflops, r.weight_kb_per_us_sm, rel_l2(ref, out));
  };
  wgmma_row("wgmma after the decode, 1 group in flight", run<0, N>(sms, passes, out));
  wgmma_row("wgmma after the decode, wait_group 0", run<3, N>(sms, passes, out));
  const Rate r1 = run<1, N>(sms, passes, out);
  std::printf("PREFILLCORE N=%d %-40s %6.1f TFLOP/s  %6.1f KB/us/SM of weights\n", N,
              "wgmma, constant A (no decode)", r1.tflops, r1.weight_kb_per_us_sm);
  std::fflush(stdout);
}

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int passes = 2000;
  compare<128>(sms, passes);
  compare<256>(sms, passes);
  return 0;
}
