// Streaming probe (bench/NOTES.md, "NVFP4 v4"): how fast can one persistent CTA per SM stream
// weight bytes with (a) a per-warp register ring of ld.global.nc (the pipelined kernel's scheme)
// and (b) bulk copies (cp.async.bulk) into a shared-memory ring drained by consumer warps, with
// and without integer work per word (a stand-in for the NVFP4 decode). Standalone; build with
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o stream_probe stream_probe.cu
// and run with no arguments: one line per variant, GB/s of bytes read, best of 5 launches.
// STREAM_PROBE_SOAK_MS=N also relaunches each variant for N ms and prints
// "SOAKW <variant> t0 t1 launches bytes_per_launch" (unix seconds) for bench/probes/power_soak.py:
// the board power and SM clock of the stream alone (bench/NOTES.md, twentieth session).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "probe_check.cuh"

using u32 = uint32_t;

__device__ __forceinline__ uint4 ldnc(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// WORK dependent integer ops per word (8 independent words per block and lane).
template <int WORK>
__device__ __forceinline__ u32 work(u32 x) {
#pragma unroll
  for (int i = 0; i < WORK; ++i) x = (x * 0x9E3779B1u) ^ (x >> 7);
  return x;
}

// (a) register ring: each warp streams its own contiguous run of 1152-byte blocks
// (1024 B of nibbles + 128 B of scales, three 16-byte loads per lane), RING blocks in flight.
template <int RING, int WORK>
__global__ void __launch_bounds__(512, 1)
    ldg_ring(const uint8_t* q, const uint8_t* sf, int nblk_warp, u32* sink) {
  extern __shared__ uint4 dyn[];
  const int lane = threadIdx.x & 31;
  const long long w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const uint8_t* qw = q + w * nblk_warp * 1024ll + lane * 16;
  const uint8_t* sw = sf + w * nblk_warp * 128ll + (lane >> 2) * 16;
  uint4 a[RING], b[RING], c[RING];
#pragma unroll
  for (int p = 0; p < RING; ++p) {
    a[p] = ldnc(qw + p * 1024);
    b[p] = ldnc(qw + p * 1024 + 512);
    c[p] = ldnc(sw + p * 128);
  }
  u32 acc = 0;
  for (int j0 = 0; j0 < nblk_warp; j0 += RING) {
#pragma unroll
    for (int p = 0; p < RING; ++p) {
      acc += work<WORK>(a[p].x) ^ work<WORK>(a[p].y) ^ work<WORK>(a[p].z) ^ work<WORK>(a[p].w) ^
             work<WORK>(b[p].x) ^ work<WORK>(b[p].y) ^ work<WORK>(b[p].z) ^ work<WORK>(b[p].w) ^
             c[p].x ^ c[p].y ^ c[p].z ^ c[p].w;
      const int jn = j0 + p + RING;
      if (jn < nblk_warp) {
        a[p] = ldnc(qw + jn * 1024);
        b[p] = ldnc(qw + jn * 1024 + 512);
        c[p] = ldnc(sw + jn * 128);
      }
    }
  }
  if (acc == 0x12345678u) sink[0] = acc + dyn[0].x;
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* b, int n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(n));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, u32 parity) {
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra W;\n}" ::"r"(smem_addr(b)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, u32 bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// (b) bulk-copy ring: warp 0 lane 0 streams the CTA's contiguous run in STAGE-byte stages into
// STAGES slots; CW consumer warps read each stage (16 B per lane per step) and release it.
template <int STAGES, int STAGE, int CW, int WORK>
__global__ void __launch_bounds__(32 * (CW + 1), 1)
    bulk_ring(const uint8_t* q, long long bytes_cta, u32* sink) {
  extern __shared__ __align__(128) uint8_t sm[];
  uint8_t* ring = sm;
  uint64_t* full = reinterpret_cast<uint64_t*>(sm + STAGES * STAGE);
  uint64_t* empty = full + STAGES;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);    // the producer's expect_tx arrival; bytes complete it
      mbar_init(&empty[s], CW);  // one arrival per consumer warp per use
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const uint8_t* src = q + blockIdx.x * bytes_cta;
  const long long nst = bytes_cta / STAGE;
  if (warp == CW) {
    if (lane == 0) {
      for (long long i = 0; i < nst; ++i) {
        const int s = static_cast<int>(i % STAGES);
        if (i >= STAGES) mbar_wait(&empty[s], static_cast<u32>(((i / STAGES) - 1) & 1));
        mbar_expect_tx(&full[s], STAGE);
        bulk_g2s(ring + s * STAGE, src + i * STAGE, STAGE, &full[s]);
      }
    }
    return;
  }
  u32 acc = 0;
  for (long long i = 0; i < nst; ++i) {
    const int s = static_cast<int>(i % STAGES);
    mbar_wait(&full[s], static_cast<u32>((i / STAGES) & 1));
    const uint4* st = reinterpret_cast<const uint4*>(ring + s * STAGE);
    for (int k = warp * 32 + lane; k < STAGE / 16; k += CW * 32) {
      const uint4 v = st[k];
      acc += work<WORK>(v.x) ^ work<WORK>(v.y) ^ work<WORK>(v.z) ^ work<WORK>(v.w);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]);
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

__global__ void fill(uint4* p, long long n) {
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < n; i += gridDim.x * 256ll)
    p[i] = make_uint4(static_cast<u32>(i * 2654435761u), static_cast<u32>(i) ^ 0xA5A5A5A5u,
                      static_cast<u32>(i >> 3) * 40503u, 0x3C3C3C3Cu ^ static_cast<u32>(i));
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Relaunches `launch` for STREAM_PROBE_SOAK_MS ms (if set) and prints its SOAKW line.
template <class F>
void soak(F launch, const char* label, double bytes) {
  const char* env = std::getenv("STREAM_PROBE_SOAK_MS");
  const double ms = env != nullptr ? std::atof(env) : 0.0;
  if (ms <= 0) return;
  // Batches of 4 launches, the next queued before the host waits for the previous one.
  cudaEvent_t done[2];
  CK(cudaEventCreate(&done[0]));
  CK(cudaEventCreate(&done[1]));
  long long n = 0;
  const double t0 = unix_seconds();
  for (int batch = 0;; ++batch) {
    for (int i = 0; i < 4; ++i) launch();
    n += 4;
    CK(cudaEventRecord(done[batch & 1]));
    if (batch > 0) CK(cudaEventSynchronize(done[(batch - 1) & 1]));
    if ((unix_seconds() - t0) * 1e3 >= ms) break;
  }
  CK(cudaDeviceSynchronize());
  const double t1 = unix_seconds();
  CK(cudaEventDestroy(done[0]));
  CK(cudaEventDestroy(done[1]));
  std::printf("SOAKW %s %.6f %.6f %lld %.0f\n", label, t0, t1, n, bytes);
  std::fflush(stdout);
}

template <class F>
float best_ms(F launch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  launch();
  CK(cudaDeviceSynchronize());
  float best = 1e30f;
  for (int r = 0; r < 5; ++r) {
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (ms < best) best = ms;
  }
  CK(cudaGetLastError());
  return best;
}

int sms = 0;
uint8_t* buf = nullptr;
u32* sink = nullptr;
constexpr long long kBytes = 1ll << 31;  // 2 GiB of weights per launch

template <int RING, int WORK>
void run_ldg(int warps, int smem_kb) {
  auto k = ldg_ring<RING, WORK>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_kb * 1024));
  const long long total_warps = static_cast<long long>(sms) * warps;
  const int nblk = static_cast<int>(kBytes / 1152 / total_warps);
  const uint8_t* q = buf;
  const uint8_t* sf = buf + total_warps * nblk * 1024ll;
  const float ms = best_ms([&] { k<<<sms, warps * 32, smem_kb * 1024>>>(q, sf, nblk, sink); });
  const double bytes = total_warps * nblk * 1152.0;
  std::printf("ldg   ring %d warps %2d smem %3d KB work %2d : %7.1f GB/s\n", RING, warps, smem_kb,
              WORK, bytes / ms / 1e6);
  char label[64];
  std::snprintf(label, sizeof label, "ldg_r%d_w%d_s%d_work%d", RING, warps, smem_kb, WORK);
  soak([&] { k<<<sms, warps * 32, smem_kb * 1024>>>(q, sf, nblk, sink); }, label, bytes);
}

template <int STAGES, int STAGE, int CW, int WORK>
void run_bulk() {
  auto k = bulk_ring<STAGES, STAGE, CW, WORK>;
  const int smem = STAGES * STAGE + 2 * STAGES * 8;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const long long per_cta = kBytes / sms / STAGE * STAGE;
  const float ms = best_ms([&] { k<<<sms, 32 * (CW + 1), smem>>>(buf, per_cta, sink); });
  std::printf("bulk  %2d x %5d B consumers %2d work %2d      : %7.1f GB/s\n", STAGES, STAGE, CW,
              WORK, per_cta * static_cast<double>(sms) / ms / 1e6);
  char label[64];
  std::snprintf(label, sizeof label, "bulk_%dx%d_c%d_work%d", STAGES, STAGE, CW, WORK);
  soak([&] { k<<<sms, 32 * (CW + 1), smem>>>(buf, per_cta, sink); }, label,
       per_cta * static_cast<double>(sms));
}

int main() {
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaMalloc(&buf, kBytes + (64 << 20)));
  CK(cudaMalloc(&sink, 64));
  fill<<<1024, 256>>>(reinterpret_cast<uint4*>(buf), (kBytes + (64 << 20)) / 16);
  CK(cudaDeviceSynchronize());
  // Plain copy-engine-free read ceiling: many CTAs, ring 4, no smem.
  run_ldg<4, 0>(16, 0);
  run_ldg<4, 0>(8, 0);
  run_ldg<8, 0>(8, 0);
  run_ldg<8, 0>(8, 116);
  run_ldg<8, 0>(8, 200);
  run_ldg<4, 0>(8, 200);
  run_ldg<8, 20>(8, 116);
  run_ldg<4, 20>(16, 116);
  run_bulk<4, 16384, 8, 0>();
  run_bulk<8, 16384, 8, 0>();
  run_bulk<12, 16384, 8, 0>();
  run_bulk<6, 32768, 8, 0>();
  run_bulk<8, 8192, 8, 0>();
  run_bulk<16, 8192, 8, 0>();
  run_bulk<8, 16384, 8, 20>();
  run_bulk<12, 16384, 8, 20>();
  run_bulk<12, 16384, 16, 20>();
  return 0;
}
