// Tensor-pipe probe for the wide kernel's consume loop (bench/NOTES.md, "Eighteenth session"):
// cycles per weight word (8 weights a lane, 16 rows x 16 k a warp) of the NVFP4 decode followed
// by (a) NT mma.sync m16n8k16 (the kernels' form: one per live 8-token group) or (b) one
// warpgroup wgmma m64n(8 NT)k16 with the decoded A fragment in registers and the token chunk in
// shared memory. 16 consumer warps a CTA, one CTA per SM, as in the kernel. Also checks that the
// wgmma form computes the same sums as mma.sync (the B descriptor's two strides), so the layout
// the kernel would need is settled here. Mode 4 is the wide kernel's own loop body (its B loads:
// one 16-byte vector per token group and two words, from the paired layout) and mode 5 wgmma with
// one fence, commit and wait per 4 k16 steps -- the fair pair for deciding on wgmma
// (bench/NOTES.md, nineteenth session: modes 0-2 load B as two 32-bit words per group and word).
// MMA_PROBE_SOAK_MS=N relaunches modes 4 and 5 for N ms each and prints
// "SOAKW mode<M>_nt<NT> t0 t1 launches words_per_launch word" for bench/probes/power_soak.py:
// energy per weight word of the two forms at the board's power limit (bench/NOTES.md, twentieth
// session: the layer is power-bound at T >= 16, the MMAs ~20-30 % of its energy at T = 512).
// -DMMA_PROBE_WARPS=N sets the warps a CTA (16 as in the kernel; 24 or 32 ask whether more warps
// a scheduler would raise the decode's issue rate, twenty-fifth session), and
// MMA_PROBE_BODY_ONLY=1 runs only mode 4 (the kernel's block body) at NT = 1..4.
// MMA_PROBE_T1=1 asks why the pipelined kernel's T = 1 units decode at ~37-41 KB/us a SM (bench/
// NOTES.md, twenty-sixth and twenty-seventh sessions): mode 4 at NT = 1 alone, with lanes of token
// rows >= 1 reading row 0's B fragments (one live token, as at T = 1; column 0 must stay bitwise
// equal), and beside a 17th warp that streams into a separate shared-memory ring in the ways of
// `copier` (bulk copies of 16 KB or 256 B, spinning or sleeping waits, from HBM or L2; cp.async;
// plain loads into registers; idle).
// Every pass reads the words and scales afresh from shared memory (a compiler memory clobber) and
// a block's four scale words come from one 16-byte load, as in the kernels: before the
// twenty-seventh session the compiler kept decoded fragments of the pass-invariant words and
// shared the repeated scale words, so mode 4 ran 447 instructions a pass at NT = 1 against the
// kernel's 564 for the same four blocks, and read ~52 KB/us a SM where the kernel's body runs ~45.
// Modes 2 and 5 keep each group's A registers live until the wait that ends it (wgmma_rs.cuh,
// keep_a_live; thirty-first session): before, the compiler could hand them to the next decode
// while the group still ran, so their sums were not checked results -- timings before run 269
// stand for those loops only.
// Standalone; build with
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I kernels \
//        -o mma_rate_probe bench/probes/mma_rate_probe.cu
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "megamoe/formats/nvfp4_fragment_decode.cuh"
#include "megamoe/impls/sm90_nvfp4_mega_moe_pipelined.cuh"
#include "probe_check.cuh"
#include "wgmma_rs.cuh"

using u32 = uint32_t;
using u64 = uint64_t;
namespace nvd = megamoe::device::nvfp4;
namespace px = megamoe::device::ptx;
namespace pipe = megamoe::device::nvfp4_pipe;
using namespace wgmma_probe;

#ifndef MMA_PROBE_WARPS
#define MMA_PROBE_WARPS 16
#endif
constexpr int kWarps = MMA_PROBE_WARPS;
// Warps past 16 read the words and scales of warp w % 16: 24 or 32 warps of their own would not
// fit in shared memory beside the token chunks.
constexpr int kDataWarps = kWarps < 16 ? kWarps : 16;
constexpr int kK = 512;          // k of the token chunk in shared memory
constexpr int kSteps = kK / 16;  // k16 steps a pass
constexpr int kTok = 32;         // token rows in shared memory (up to 4 groups of 8)

// Token chunk for wgmma: core matrices of 8 tokens x 8 k (128 contiguous bytes),
// [token group][k octet][8 rows][8 f16]. For mma.sync the same values are read as fragments.
__device__ __forceinline__ int core_index(int tok, int k) {
  return ((tok >> 3) * (kK / 8) + (k >> 3)) * 64 + (tok & 7) * 8 + (k & 7);
}

// The decode through the hardware e4m3 -> f16 conversion (timing only: the bit layout is not the
// kernel's): e2m1 nibbles placed as e4m3 bytes (sign 7, magnitude 2..4: the value x 2^-6), two
// registers of four bytes (one mask; mask, multiply, mask), four conversions, four multiplies.
__device__ __forceinline__ u32 cvt_e4m3x2(unsigned short v) {
  u32 d;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(d) : "h"(v));
  return d;
}
__device__ __forceinline__ nvd::HalfFragment decode_via_e4m3(u32 word, u32 sp) {
  const u32 r0 = word & 0x9C9C9C9Cu;
  const u32 r1 = ((word & 0x23232323u) * ((1u << 2) + (1u << 6))) & 0x9C9C9C9Cu;
  nvd::HalfFragment f;
  f.a0 = px::hmul2_by_half<0>(cvt_e4m3x2(static_cast<unsigned short>(r0)), sp);
  f.a1 = px::hmul2_by_half<1>(cvt_e4m3x2(static_cast<unsigned short>(r0 >> 16)), sp);
  f.a2 = px::hmul2_by_half<0>(cvt_e4m3x2(static_cast<unsigned short>(r1)), sp);
  f.a3 = px::hmul2_by_half<1>(cvt_e4m3x2(static_cast<unsigned short>(r1 >> 16)), sp);
  return f;
}

struct Shared {
  // A warp's nibble words in the wide kernel's stage order: per 128-k block, words 0..3 of every
  // lane, then words 4..7 (two 16-byte loads a lane and block); word_at names step q's word.
  u32 words[kDataWarps][kSteps / 8][2][32][4];
  u32 scales[kDataWarps][kSteps / 4][32];
  // Mode 4: a block's four scale words as the kernel loads them (one 16-byte load), holding
  // scales 2 d, 2 d, 2 d + 1, 2 d + 1 of `scales` -- equal values the compiler cannot see as equal
  // (read as scw[q / 2] they must not share work that the kernel's four distinct words cannot).
  px::u32x4 scw4[kDataWarps][kSteps / 8][32];
  alignas(128) uint16_t tok[kTok * kK];         // core matrices (wgmma); modes 0 and 3 too
  alignas(128) uint16_t tokp[kTok * (kK + 8)];  // the kernel's paired layout (mode 4)
};

// The copier's ring (MMA_PROBE_T1 with copies): kCopySlots buffers of kCopyBytes, one mbarrier
// each (the copier's expect_tx arrival + the bytes), and the consumer warps that have finished.
constexpr int kCopySlots = 3;  // 48 KB beside Shared (177 KB): within 227 KB
constexpr unsigned kCopyBytes = 16 * 1024;
struct CopyRing {
  alignas(128) unsigned char buf[kCopySlots][kCopyBytes];
  megamoe::device::u64 full[kCopySlots];
  int consumers_done;
};

__device__ __forceinline__ u32 word_at(const Shared& s, int warp, int q, int lane) {
  return s.words[warp][q >> 3][(q >> 2) & 1][lane][q & 3];
}

// Fills shared memory with valid codes (deterministic per seed) and zero-free tokens.
__device__ void fill(Shared& s, u32 seed) {
  for (int i = threadIdx.x; i < kDataWarps * kSteps * 32; i += blockDim.x) {
    u32 x = (i + 1) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    (&s.words[0][0][0][0][0])[i] = x ^ (x >> 15);
  }
  for (int i = threadIdx.x; i < kDataWarps * (kSteps / 4) * 32; i += blockDim.x) {
    // Re-encoded scale bytes of small scales (b << 7 = f16 of 0.5 .. 2)
    u32 b = 0x70u + (i % 7);
    (&s.scales[0][0][0])[i] = b | (b << 8) | (b << 16) | (b << 24);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kDataWarps * (kSteps / 8) * 32; i += blockDim.x) {
    const int lane = i % 32, d = (i / 32) % (kSteps / 8), w = i / (32 * (kSteps / 8));
    const u32 sa = s.scales[w][2 * d][lane], sb = s.scales[w][2 * d + 1][lane];
    s.scw4[w][d][lane] = px::u32x4{sa, sa, sb, sb};
  }
  for (int i = threadIdx.x; i < kTok * kK; i += blockDim.x) {
    const int tok = i / kK, k = i % kK;
    const float v = static_cast<float>(static_cast<int>((tok * 7 + k * 3 + seed) % 9u) - 4) * 0.25f;
    s.tok[core_index(tok, k)] = __half_as_ushort(__float2half(v));
    s.tokp[tok * (kK + 8) + pipe::paired_word_index(k / 16, (k % 16) / 2) * 2 + (k & 1)] =
        __half_as_ushort(__float2half(v));
  }
}

// One look at whether `bar`'s phase of parity `parity` has completed: the non-blocking
// `test_wait` (kTest) or the `try_wait` that may suspend the thread for a while first.
#define MRP_PHASE_ASM(op)                  \
  "{\n .reg .pred p;\n mbarrier." op       \
  ".parity.shared::cta.b64 p, [%1], %2;\n" \
  " selp.u32 %0, 1, 0, p;\n}\n"
template <bool kTest>
__device__ bool phase_done(megamoe::device::u64* bar, u32 parity) {
  const u32 at = static_cast<u32>(__cvta_generic_to_shared(bar));
  u32 done;
  if constexpr (kTest) {
    asm volatile(MRP_PHASE_ASM("test_wait") : "=r"(done) : "r"(at), "r"(parity) : "memory");
  } else {
    asm volatile(MRP_PHASE_ASM("try_wait") : "=r"(done) : "r"(at), "r"(parity) : "memory");
  }
  return done != 0;
}
#undef MRP_PHASE_ASM

// The copier warp (COPY > 0): streams src into the ring until every consumer warp is done, then
// waits for its copies in flight; records the bytes and nanoseconds it streamed. COPY 1: 16 KB
// copies from HBM (the CTAs' slices together are larger than L2), the kernels' spinning
// `try_wait`; 2: the same waits on 256-byte copies (the copier's issue without the shared-memory
// writes); 3: 16 KB copies, each failed `try_wait` followed by a 256 ns sleep; 4: 16 KB copies
// from a 64 KB slice a CTA (L2-resident: more shared-memory writes a microsecond); 5: no copies,
// lane 0 sleeps 1 us at a time until the consumers are done (the 17th warp's presence alone);
// 6: 16 KB copies, waits by the non-blocking `test_wait`, each failed test followed by a 256 ns
// sleep; 7: the warp returns at once (the launch shape alone); 8: 16 KB copies by the warp's 32
// lanes with `cp.async` (16 bytes a lane and instruction, through L1 instead of the bulk-copy
// engine), each lane's `cp.async.mbarrier.arrive.noinc` on the slot's mbarrier (count 32); 9: the
// 32 lanes load 16 KB at a time from HBM into registers (`ld.global.nc`, 16 loads in flight a lane)
// and write nothing to shared memory.
template <int COPY>
__device__ void copier(CopyRing& r, const unsigned char* src, size_t slice, long long* copied) {
  const int lane = threadIdx.x & 31;
  if constexpr (COPY == 8 || COPY == 9) {
    const unsigned char* mine = src + blockIdx.x * slice;
    const u64 t0 = px::globaltimer_ns();
    long long n = 0;
    u32 sink = 0;
    for (; *reinterpret_cast<volatile int*>(&r.consumers_done) < kWarps; ++n) {
      const int q = static_cast<int>(n % kCopySlots);
      const unsigned char* from = mine + (n * kCopyBytes) % slice;
      if constexpr (COPY == 8) {
        if (n >= kCopySlots) {
          px::mbarrier_wait_parity(&r.full[q], static_cast<u32>((n / kCopySlots - 1) & 1));
        }
        const u32 dst = static_cast<u32>(__cvta_generic_to_shared(r.buf[q]));
        for (int c = lane; c < static_cast<int>(kCopyBytes / 16); c += 32) {
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst + c * 16),
                       "l"(from + c * 16)
                       : "memory");
        }
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(
                         static_cast<u32>(__cvta_generic_to_shared(&r.full[q])))
                     : "memory");
      } else {
        for (int c0 = 0; c0 < static_cast<int>(kCopyBytes / 16); c0 += 32 * 16) {
          px::u32x4 v[16];
#pragma unroll
          for (int i = 0; i < 16; ++i)
            v[i] = px::load_global_nc_16(from + (c0 + i * 32 + lane) * 16);
#pragma unroll
          for (int i = 0; i < 16; ++i) sink ^= v[i].x ^ v[i].w;
        }
      }
    }
    if constexpr (COPY == 8) {
      for (long long m = n > kCopySlots ? n - kCopySlots : 0; m < n; ++m) {
        px::mbarrier_wait_parity(&r.full[m % kCopySlots], static_cast<u32>((m / kCopySlots) & 1));
      }
    }
    if (lane == 0) {
      copied[2 * blockIdx.x] = n * static_cast<long long>(kCopyBytes) + (sink == 0x9E3779B9u);
      copied[2 * blockIdx.x + 1] = static_cast<long long>(px::globaltimer_ns() - t0);
    }
    return;
  }
  if constexpr (COPY == 7) {
    if (lane == 0) {
      copied[2 * blockIdx.x] = 0;
      copied[2 * blockIdx.x + 1] = 1;
    }
    return;
  }
  if constexpr (COPY == 5) {
    if (lane == 0) {
      while (*reinterpret_cast<volatile int*>(&r.consumers_done) < kWarps) __nanosleep(1000);
      copied[2 * blockIdx.x] = 0;
      copied[2 * blockIdx.x + 1] = 1;
    }
    return;
  }
  constexpr unsigned kBytes = COPY == 2 ? 256u : kCopyBytes;
  auto wait = [&](megamoe::device::u64* bar, u32 parity) {
    if constexpr (COPY == 3 || COPY == 6) {
      while (!phase_done<COPY == 6>(bar, parity)) __nanosleep(256);
    } else {
      px::mbarrier_wait_parity(bar, parity);
    }
  };
  if (lane == 0) {
    const u64 policy = px::l2_evict_first_policy();
    const unsigned char* mine = src + blockIdx.x * slice;
    const u64 t0 = px::globaltimer_ns();
    long long n = 0;
    for (; *reinterpret_cast<volatile int*>(&r.consumers_done) < kWarps; ++n) {
      const int q = static_cast<int>(n % kCopySlots);
      if (n >= kCopySlots) wait(&r.full[q], static_cast<u32>((n / kCopySlots - 1) & 1));
      px::mbarrier_arrive_expect_tx(&r.full[q], kBytes);
      px::bulk_load(r.buf[q], mine + (n * kBytes) % slice, kBytes, &r.full[q], policy);
    }
    for (long long m = n > kCopySlots ? n - kCopySlots : 0; m < n; ++m) {
      wait(&r.full[m % kCopySlots], static_cast<u32>((m / kCopySlots) & 1));
    }
    copied[2 * blockIdx.x] = n * static_cast<long long>(kBytes);
    copied[2 * blockIdx.x + 1] = static_cast<long long>(px::globaltimer_ns() - t0);
  }
}

// G k16 steps from q0 as one wgmma group (modes 2: G = 1, and 5: G = 4): decode into `f`, one
// fence, the wgmmas, one commit, wait_group 1 -- which ends the group before, whose operands
// `prev` stay live until then.
template <int NT, int G>
__device__ __forceinline__ void wgmma_steps(const Shared& s, int dw, nvd::HalfFragment (&f)[G],
                                            nvd::HalfFragment (&prev)[G], Acc<8 * NT>& wacc,
                                            u32 tok_base, int q0, u32 lbo, u32 sbo) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < G; ++i) {
    const int q = q0 + i;
    f[i] = nvd::decode_weight_word(word_at(s, dw, q, lane),
                                   nvd::scale_pair(s.scales[dw][q >> 2][lane], (q & 1) != 0));
  }
  wg_fence();
#pragma unroll
  for (int i = 0; i < G; ++i) {
    // Step q: core matrices (group, octets 2q and 2q + 1).
    wgmma_rs<8 * NT>(wacc, f[i].a0, f[i].a1, f[i].a2, f[i].a3,
                     make_desc(tok_base + (q0 + i) * 2 * 128, lbo, sbo));
  }
  wg_commit();
  wg_wait<1>();
  keep_live(prev);
}

// Mode 0: mma.sync, NT groups. Mode 1: wgmma N = 8 NT, A from registers (2: one group in
// flight). Mode 3: mode 0 with the e4m3-conversion decode. Mode 4: the wide kernel's block body
// (nvfp4_pipe::block_mma); `live_rows` < 8 (NT = 1): lanes of token rows at or past it read row
// 0's B fragments. Mode 5: wgmma, 4 steps a fence / commit / wait (one group in flight). COPY >
// 0: one more warp runs `copier<COPY>` during the consumers' loop.
template <int MODE, int NT, int COPY = 0>
__global__ void __launch_bounds__(kWarps * 32 + (COPY > 0 ? 32 : 0), 1)
    rate_kernel(int passes, u32 seed, u32 lbo, u32 sbo, float* sums, long long* cycles,
                long long* nanos, int live_rows = 8, const unsigned char* copy_src = nullptr,
                size_t copy_slice = 0, long long* copied = nullptr) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Shared& s = *reinterpret_cast<Shared*>(smem_raw);
  CopyRing& ring = *reinterpret_cast<CopyRing*>(smem_raw + (sizeof(Shared) + 127) / 128 * 128);
  if (COPY && threadIdx.x == 0) {
    for (int q = 0; q < kCopySlots; ++q) px::mbarrier_init(&ring.full[q], COPY == 8 ? 32 : 1);
    ring.consumers_done = 0;
    px::fence_mbarrier_init();
  }
  fill(s, seed);
  // The wgmma modes read the token chunk through the async proxy: the generic stores of `fill`
  // are made visible to it first, as the PTX memory model asks (missing before the thirty-first
  // session).
  px::fence_proxy_async_shared();
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (COPY && warp == kWarps) {
    if constexpr (COPY > 0) copier<COPY>(ring, copy_src, copy_slice, copied);
    return;
  }
  const int g = lane >> 2, t = lane & 3;
  const int dw = warp % kDataWarps;  // the warp whose words and scales this one reads
  float acc[NT][4] = {};
  Acc<8 * NT> wacc = {};
  // Modes 2 and 5: the A operands of alternate steps (groups of 4 steps), each kept live until
  // the wait that ends its group (wgmma_rs.cuh, keep_a_live).
  nvd::HalfFragment f2a[1] = {}, f2b[1] = {}, f5a[4] = {}, f5b[4] = {};
  const u32 tok_base = static_cast<u32>(__cvta_generic_to_shared(s.tok));
  const long long c0 = clock64();
  const u64 n0 = px::globaltimer_ns();
  // Mode 4: this lane's view of the paired token chunk (nvfp4_pipe::lane_token_block at block 0).
  const int row = NT == 1 && g >= live_rows ? 0 : g;
  const uint16_t* bl = s.tokp + row * (kK + 8) + pipe::paired_load_index(0, 0, t);
  for (int p = 0; p < passes; ++p) {
    // Every pass reads shared memory afresh: without this the compiler keeps decoded fragments
    // of the (pass-invariant) words in registers across passes where registers allow, and the
    // loop is cheaper than the kernels' (447 instructions a pass of mode 4 at NT = 1 against the
    // kernel's 564 for the same four blocks; bench/NOTES.md, twenty-seventh session).
    asm volatile("" ::: "memory");
    if constexpr (MODE == 4) {
#pragma unroll
      for (int d = 0; d < kSteps / 8; ++d) {
        const px::u32x4 q0 = *reinterpret_cast<const px::u32x4*>(&s.words[dw][d][0][lane][0]);
        const px::u32x4 q1 = *reinterpret_cast<const px::u32x4*>(&s.words[dw][d][1][lane][0]);
        const u32 words[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
        // block_mma takes step q's scale word from scw[q / 2]; modes 0-3 from scales[q / 4].
        const px::u32x4 sc = s.scw4[dw][d][lane];
        const u32 scw[4] = {sc.x, sc.y, sc.z, sc.w};
        pipe::block_mma<kK, NT>(words, scw, bl + d * 128, acc);
      }
    } else if constexpr (MODE == 5) {
#pragma unroll 1
      for (int q0 = 0; q0 < kSteps; q0 += 8) {
        wgmma_steps<NT, 4>(s, dw, f5a, f5b, wacc, tok_base, q0, lbo, sbo);
        wgmma_steps<NT, 4>(s, dw, f5b, f5a, wacc, tok_base, q0 + 4, lbo, sbo);
      }
    } else if constexpr (MODE == 2) {
#pragma unroll 2
      for (int q = 0; q < kSteps; q += 2) {
        wgmma_steps<NT, 1>(s, dw, f2a, f2b, wacc, tok_base, q, lbo, sbo);
        wgmma_steps<NT, 1>(s, dw, f2b, f2a, wacc, tok_base, q + 1, lbo, sbo);
      }
    } else {
#pragma unroll 4
      for (int q = 0; q < kSteps; ++q) {
        const u32 word = word_at(s, dw, q, lane);
        const u32 sw = s.scales[dw][q >> 2][lane];
        const u32 sp = nvd::scale_pair(sw, (q & 1) != 0);
        const nvd::HalfFragment f =
            MODE == 3 ? decode_via_e4m3(word, sp) : nvd::decode_weight_word(word, sp);
        if constexpr (MODE == 0 || MODE == 3) {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            // B fragment: b0 = k 2t, 2t+1 of token g; b1 = k 2t+8, 2t+9.
            const int tok = nt * 8 + g, k = q * 16 + 2 * t;
            const u32 b0 = *reinterpret_cast<const u32*>(&s.tok[core_index(tok, k)]);
            const u32 b1 = *reinterpret_cast<const u32*>(&s.tok[core_index(tok, k + 8)]);
            px::mma_m16n8k16_f16(acc[nt], f.a0, f.a1, f.a2, f.a3, b0, b1);
          }
        } else {
          // Step q: core matrices (group, octets 2q and 2q + 1). K-direction stride 128 B,
          // N-direction stride (kK / 8) x 128 B.
          const u64 desc = make_desc(tok_base + q * 2 * 128, lbo, sbo);
          wg_fence();
          wgmma_rs<8 * NT>(wacc, f.a0, f.a1, f.a2, f.a3, desc);
          wg_commit();
          wg_wait<0>();  // mode 1
        }
      }
    }
  }
  if constexpr (MODE == 1 || MODE == 2 || MODE == 5) {
    wg_wait<0>();
    keep_live(f2a);
    keep_live(f2b);
    keep_live(f5a);
    keep_live(f5b);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][i] = wacc.v[nt * 4 + i];
  }
  const long long c1 = clock64();
  const u64 n1 = px::globaltimer_ns();
  if (COPY) {
    __syncwarp();
    if (lane == 0) atomicAdd(&ring.consumers_done, 1);
  }
  // Per thread: its fragment of the 16 x (8 NT) result, [cta][warp][nt][i][lane].
  float* o = sums + ((static_cast<size_t>(blockIdx.x) * kWarps + warp) * NT * 4) * 32;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[(nt * 4 + i) * 32 + lane] = acc[nt][i];
  if (lane == 0) {
    cycles[blockIdx.x * kWarps + warp] = c1 - c0;
    nanos[blockIdx.x * kWarps + warp] = static_cast<long long>(n1 - n0);
  }
  (void)g;
  (void)t;
}

struct Rate {
  double cycles_per_word;  // per scheduler (4 warps each decode passes x kSteps words)
  double ns_per_word_sm;   // wall time per word of the whole SM (16 warps)
  double ghz;
  double copy_kb_per_us = 0;  // COPY runs: the copier's stream, KB/us a SM (mean over the CTAs)
};

template <int MODE, int NT, int COPY = 0>
Rate run(int sms, int passes, u32 lbo, u32 sbo, std::vector<float>& out, int live_rows = 8) {
  const size_t smem =
      COPY > 0 ? (sizeof(Shared) + 127) / 128 * 128 + sizeof(CopyRing) : sizeof(Shared);
  const int threads = kWarps * 32 + (COPY > 0 ? 32 : 0);
  CK(cudaFuncSetAttribute(rate_kernel<MODE, NT, COPY>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          static_cast<int>(smem)));
  // 2 MB a CTA: 264 MB over 132 SMs, more than L2 holds, so the copies stream from HBM; COPY 4:
  // 64 KB a CTA, 8.4 MB in all, which L2 keeps.
  const size_t slice = COPY == 0 ? 0 : COPY == 4 ? size_t{64} << 10 : size_t{2} << 20;
  unsigned char* src = nullptr;
  long long* copied = nullptr;
  if (COPY) {
    CK(cudaMalloc(&src, slice * sms));
    CK(cudaMemset(src, 0x5A, slice * sms));
    CK(cudaMalloc(&copied, 2 * sms * sizeof(long long)));
  }
  float* sums;
  long long *cyc, *ns;
  const size_t n = static_cast<size_t>(sms) * kWarps * NT * 4 * 32;
  CK(cudaMalloc(&sums, n * sizeof(float)));
  CK(cudaMalloc(&cyc, sms * kWarps * sizeof(long long)));
  CK(cudaMalloc(&ns, sms * kWarps * sizeof(long long)));
  Rate best{1e30, 1e30, 0};
  double copy_kb_per_us = 0;
  for (int rep = 0; rep < 3; ++rep) {
    rate_kernel<MODE, NT, COPY><<<sms, threads, smem>>>(passes, 12345u, lbo, sbo, sums, cyc, ns,
                                                        live_rows, src, slice, copied);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    if (COPY) {
      std::vector<long long> cp(2 * sms);
      CK(cudaMemcpy(cp.data(), copied, cp.size() * sizeof(long long), cudaMemcpyDeviceToHost));
      double kb_per_us = 0;
      for (int b = 0; b < sms; ++b) kb_per_us += cp[2 * b] / 1024.0 / (cp[2 * b + 1] * 1e-3);
      copy_kb_per_us = kb_per_us / sms;
    }
    std::vector<long long> c(sms * kWarps), t(sms * kWarps);
    CK(cudaMemcpy(c.data(), cyc, c.size() * sizeof(long long), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(t.data(), ns, t.size() * sizeof(long long), cudaMemcpyDeviceToHost));
    long long mc = 0, mt = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      mc = c[i] > mc ? c[i] : mc;
      mt = t[i] > mt ? t[i] : mt;
    }
    const double words_sm = static_cast<double>(kWarps) * passes * kSteps;
    const Rate r{static_cast<double>(mc) / (4.0 * passes * kSteps), mt / words_sm,
                 static_cast<double>(mc) / mt, copy_kb_per_us};
    if (r.ns_per_word_sm < best.ns_per_word_sm) best = r;
  }
  const char* soak_env = std::getenv("MMA_PROBE_SOAK_MS");
  const double soak_ms = soak_env != nullptr ? std::atof(soak_env) : 0.0;
  if ((MODE == 4 || MODE == 5) && soak_ms > 0) {
    auto now = [] {
      return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
    // The next launch queued before the host waits for the previous one.
    cudaEvent_t done[2];
    CK(cudaEventCreate(&done[0]));
    CK(cudaEventCreate(&done[1]));
    long long launches = 0;
    const double t0 = now();
    for (;; ++launches) {
      rate_kernel<MODE, NT, COPY><<<sms, threads, smem>>>(passes, 12345u, lbo, sbo, sums, cyc, ns,
                                                          live_rows, src, slice, copied);
      CK(cudaEventRecord(done[launches & 1]));
      if (launches > 0) CK(cudaEventSynchronize(done[(launches - 1) & 1]));
      if ((now() - t0) * 1e3 >= soak_ms) break;
    }
    ++launches;
    CK(cudaDeviceSynchronize());
    const double t1 = now();
    CK(cudaEventDestroy(done[0]));
    CK(cudaEventDestroy(done[1]));
    std::printf("SOAKW mode%d_nt%d %.6f %.6f %lld %.0f word\n", MODE, NT, t0, t1, launches,
                static_cast<double>(sms) * kWarps * passes * kSteps);
    std::fflush(stdout);
  }
  out.resize(n);
  CK(cudaMemcpy(out.data(), sums, n * sizeof(float), cudaMemcpyDeviceToHost));
  if (COPY) {
    CK(cudaFree(src));
    CK(cudaFree(copied));
  }
  CK(cudaFree(sums));
  CK(cudaFree(cyc));
  CK(cudaFree(ns));
  return best;
}

void print(const char* what, int nt, const Rate& r, double rel) {
  // A word is 256 weights = 144 bytes of NVFP4 with scales: KB/us per SM of decode capacity.
  std::printf("NT=%d %-34s %6.2f cyc/word/sched  %7.4f ns/word/SM  %5.1f KB/us/SM  %.2f GHz", nt,
              what, r.cycles_per_word, r.ns_per_word_sm, 144.0 / r.ns_per_word_sm, r.ghz);
  if (rel >= -0.5) std::printf("  rel-L2 vs mma.sync %.3g", rel);
  std::printf("\n");
}

template <int NT>
void compare(int sms, int passes) {
  std::vector<float> a, b;
  const u32 kdir = 128, ndir = (kK / 8) * 128;
  const Rate rs = run<0, NT>(sms, passes, 0, 0, a);
  print("mma.sync (kernel decode)", NT, rs, -1);
  const Rate r3 = run<3, NT>(sms, passes, 0, 0, b);
  print("mma.sync (e4m3 cvt decode, timing)", NT, r3, -1);
  const Rate r1 = run<1, NT>(sms, passes, kdir, ndir, b);
  const double e1 = rel_l2(a, b);
  print("wgmma RS wait0, LBO = K stride", NT, r1, e1);
  const Rate r1s = run<1, NT>(sms, passes, ndir, kdir, b);
  const double e1s = rel_l2(a, b);
  print("wgmma RS wait0, LBO = N stride", NT, r1s, e1s);
  const bool swap = e1s >= 0 && (e1 < 0 || e1s < e1);
  const Rate r2 =
      swap ? run<2, NT>(sms, passes, ndir, kdir, b) : run<2, NT>(sms, passes, kdir, ndir, b);
  print(swap ? "wgmma RS wait1 (LBO = N stride)" : "wgmma RS wait1 (LBO = K stride)", NT, r2,
        rel_l2(a, b));
  const Rate r4 = run<4, NT>(sms, passes, 0, 0, b);
  print("mma.sync, the wide kernel's block body", NT, r4, rel_l2(a, b));
  const Rate r5 =
      swap ? run<5, NT>(sms, passes, ndir, kdir, b) : run<5, NT>(sms, passes, kdir, ndir, b);
  print("wgmma RS, 4 steps a fence, wait1", NT, r5, rel_l2(a, b));
}

// Column 0 (token 0) of every fragment equal bit for bit, every other column of `b` zero or
// anything: the B rows clamped to row 0 change only the columns of dead tokens. Returns the
// mismatches in column 0.
long long column0_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  long long bad = 0;
  // [cta][warp][nt = 0][i][lane]: elements i = 0 and 2 of lanes with t = 0 are column 0.
  for (size_t f = 0; f + 128 <= a.size(); f += 128) {
    for (int i : {0, 2}) {
      for (int lane = 0; lane < 32; lane += 4) {
        const size_t at = f + i * 32 + lane;
        if (std::memcmp(&a[at], &b[at], sizeof(float)) != 0) ++bad;
      }
    }
  }
  return bad;
}

void t1_variants(int sms, int passes) {
  std::vector<float> plain, out;
  print("block body", 1, run<4, 1>(sms, passes, 0, 0, plain), -1);
  // Each variant against the block body's column 0, and the copier's stream where it ran.
  auto report = [&](const char* what, const Rate& r) {
    print(what, 1, r, -1);
    if (r.copy_kb_per_us > 0) std::printf("  copier: %.1f KB/us a SM;", r.copy_kb_per_us);
    std::printf("  column 0 mismatches against the block body: %lld\n",
                column0_mismatches(plain, out));
  };
  report("block body, B rows >= 1 read row 0", run<4, 1>(sms, passes, 0, 0, out, 1));
  report("block body + bulk-copy stream", run<4, 1, 1>(sms, passes, 0, 0, out));
  report("B rows clamped + bulk-copy stream", run<4, 1, 1>(sms, passes, 0, 0, out, 1));
  report("+ 256 B copies (copier's waits)", run<4, 1, 2>(sms, passes, 0, 0, out));
  report("+ copies, copier sleeps 256 ns", run<4, 1, 3>(sms, passes, 0, 0, out));
  report("+ copies from L2 (64 KB a CTA)", run<4, 1, 4>(sms, passes, 0, 0, out));
  report("+ idle 17th warp (sleeps, no copies)", run<4, 1, 5>(sms, passes, 0, 0, out));
  report("+ copies, test_wait + 256 ns sleep", run<4, 1, 6>(sms, passes, 0, 0, out));
  report("+ 17th warp returns at once", run<4, 1, 7>(sms, passes, 0, 0, out));
  report("+ cp.async copies (32 lanes, via L1)", run<4, 1, 8>(sms, passes, 0, 0, out));
  report("+ ld.global.nc stream (no shared)", run<4, 1, 9>(sms, passes, 0, 0, out));
}

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int passes = 400;
  const char* t1 = std::getenv("MMA_PROBE_T1");
  if (t1 != nullptr && std::atoi(t1) != 0) {
    t1_variants(sms, passes);
    return 0;
  }
  const char* body_only = std::getenv("MMA_PROBE_BODY_ONLY");
  if (body_only != nullptr && std::atoi(body_only) != 0) {
    std::vector<float> out;
    print("mma.sync, the wide kernel's block body", 1, run<4, 1>(sms, passes, 0, 0, out), -1);
    print("mma.sync, the wide kernel's block body", 2, run<4, 2>(sms, passes, 0, 0, out), -1);
    print("mma.sync, the wide kernel's block body", 4, run<4, 4>(sms, passes, 0, 0, out), -1);
    return 0;
  }
  compare<1>(sms, passes);
  compare<2>(sms, passes);
  compare<3>(sms, passes);
  compare<4>(sms, passes);
  return 0;
}
