// What the T = 1 bytes alone cost (bench/NOTES.md, twenty-eighth session): one CTA per SM streams
// the weights and scales of K distinct random experts (the bytes of a T = 1 layer call: the
// bench's floor) into a ring of shared-memory stages with bulk copies, and does nothing else --
// no routes, no token, no decode, no MMA, no barrier, no combine. Timed as the bench times the
// layer, the floor from the bench's read-bandwidth loop in the same process (both in
// layer_call_timing.cuh).
// Standalone; build and run on the GPU machine:
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I kernels \
//        -o t1_stream_floor bench/probes/t1_stream_floor.cu && ./t1_stream_floor
// One line per preset and ring: "T1STREAM preset stages x bytes: time us, floor us, ratio".
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "layer_call_timing.cuh"
#include "megamoe/common.cuh"
#include "megamoe/ptx/bulk_copy.cuh"
#include "probe_check.cuh"

namespace ptx = megamoe::device::ptx;
using megamoe::device::u32;
using megamoe::device::u64;
using megamoe::device::u8;

using layer_timing::Experts;

// CTA c streams chunks [c n / grid, (c + 1) n / grid) of the k experts' bytes, STAGE bytes a
// chunk, STAGES chunks in flight: the producer re-arms a stage once its previous copy has landed.
template <int STAGE, int STAGES>
__global__ void __launch_bounds__(32, 1)
    stream_experts(const u8* weights, unsigned long long expert_bytes, Experts ex, u32* sink) {
  extern __shared__ __align__(128) u8 ring[];
  __shared__ u64 full[STAGES];
  layer_timing::init_stages_then_wait(full, STAGES);
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

using layer_timing::Context;
using layer_timing::Preset;

template <int STAGE, int STAGES>
void run(const Context& cx, const Preset& p, const u8* weights, unsigned long long expert_bytes,
         double bw_tbs) {
  const double us = layer_timing::us_per_call(
      cx, stream_experts<STAGE, STAGES>, cx.sms, STAGE * STAGES, p.k,
      [&](const Experts& e) { return std::tuple(weights, expert_bytes, e, cx.sink); });
  const double bytes = static_cast<double>(expert_bytes) * p.k;
  const double floor_us = bytes / (bw_tbs * 1e12) * 1e6;
  std::printf("T1STREAM %s %d x %d B: %.1f us, floor %.1f us (%.0f MB at %.3f TB/s), ratio %.2f\n",
              p.name, STAGES, STAGE, us, floor_us, bytes / 1e6, bw_tbs, us / floor_us);
  std::fflush(stdout);
}

int main() {
  const Context cx = Context::create();
  for (const Preset& p : layer_timing::kPresets) {
    // Nibbles and UE4M3 scales of gate, up and down: 3 H I x (1/2 + 1/16) bytes.
    const unsigned long long expert_bytes = 3ull * p.h * p.i * 9 / 16;
    const unsigned long long total = expert_bytes * 256;
    u8* weights;
    CK(cudaMalloc(&weights, total));
    layer_timing::fill_varying<<<cx.sms * 8, 256, 0, cx.st>>>(reinterpret_cast<u32*>(weights),
                                                              total / 4);
    CK(cudaGetLastError());
    const double bw = layer_timing::read_bandwidth_tbs(cx.st, weights, total, cx.sink, cx.sms);
    // The pipelined kernel's ring at the decode presets (2 stages of 4 blocks a consumer warp,
    // 16 warps: 73 728 B) and two finer rings of the same or more bytes in flight.
    run<73728, 2>(cx, p, weights, expert_bytes, bw);
    run<36864, 5>(cx, p, weights, expert_bytes, bw);
    run<18432, 8>(cx, p, weights, expert_bytes, bw);
    CK(cudaFree(weights));
  }
  return 0;
}
