#pragma once
// Random NVFP4 weights written straight in the kernel layout, for the benchmarks: valid codes and
// valid re-encoded scale bytes drawn on the GPU (the transform is a load-time step that no
// benchmark times), per-expert alphas and FC2 input scales of modest size.
#include <cuda.h>

#include <cstddef>
#include <span>
#include <vector>

#include "jit/compiler.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/module.hpp"

namespace megamoe::bench {

inline constexpr const char* kFillRandomSource = R"(
// Random bytes; scale_mode: valid re-encoded scale bytes (f16 exponent 13..21, any mantissa).
extern "C" __global__ void fill_random(unsigned* p, unsigned long long n, unsigned seed,
                                       int scale_mode) {
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 0x9E3779B1u ^ (unsigned)(i >> 32) ^ seed;
    h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12; h *= 0x297A2D39u; h ^= h >> 15;
    if (scale_mode) {
      unsigned w = 0;
      for (int b = 0; b < 4; ++b) {
        const unsigned byte = (h >> (8 * b)) & 0xFFu;
        w |= ((((13u + byte % 9u) << 3) | (byte & 7u)) & 0xFFu) << (8 * b);
      }
      h = w;
    }
    p[i] = h;
  }
}
)";

// Fills `bytes` (a multiple of 4) at `p` with random words, or with valid scale bytes.
inline void fill_random(CUdeviceptr p, std::size_t bytes, unsigned seed, bool scales,
                        CUstream stream) {
  static const CUfunction function = [] {
    jit::KernelRequest r;
    r.name = "bench_fill_random";
    r.source = kFillRandomSource;
    r.entry = "fill_random";
    return runtime::load(*jit::compile(r));
  }();
  runtime::LaunchConfig cfg;
  cfg.stream = stream;
  cfg.grid = {1024, 1, 1};
  cfg.block = {256, 1, 1};
  const unsigned long long words = bytes / 4;
  const int mode = scales ? 1 : 0;
  runtime::launch_kernel(function, cfg, p, words, seed, mode);
}

// One rank's weights and the view nvfp4_mega_moe takes. Filled on `stream`; synchronizes the
// context before returning, so the view is ready.
struct RandomKernelWeights {
  runtime::DeviceBuffer w13, w13_sf, w2, w2_sf, fc1_alpha, fc2_alpha, fc2_input_scale;
  Nvfp4KernelWeights view;

  RandomKernelWeights(const MoEConfig& c, Device gpu, CUstream stream) {
    const Nvfp4KernelWeightBytes wb = nvfp4_kernel_weight_bytes(c);
    w13 = runtime::DeviceBuffer(wb.w13);
    w13_sf = runtime::DeviceBuffer(wb.w13_sf);
    w2 = runtime::DeviceBuffer(wb.w2);
    w2_sf = runtime::DeviceBuffer(wb.w2_sf);
    fill_random(w13.get(), w13.size(), 1, false, stream);
    fill_random(w13_sf.get(), w13_sf.size(), 2, true, stream);
    fill_random(w2.get(), w2.size(), 3, false, stream);
    fill_random(w2_sf.get(), w2_sf.size(), 4, true, stream);
    const auto el = static_cast<std::size_t>(c.experts_per_rank());
    const std::vector<float> a(el, 1.0f / 512), s(el, 0.05f);
    fc1_alpha = runtime::upload(a);
    fc2_alpha = runtime::upload(a);
    fc2_input_scale = runtime::upload(s);
    MEGAMOE_CU(cuda::driver().cuCtxSynchronize());
    auto blob = [&](const runtime::DeviceBuffer& b) {
      return TensorView::contiguous(b.as<void>(), DType::u8, {static_cast<std::int64_t>(b.size())},
                                    gpu);
    };
    auto per_expert = [&](const runtime::DeviceBuffer& b) {
      return TensorView::contiguous(b.as<void>(), DType::f32, {static_cast<std::int64_t>(el)}, gpu);
    };
    view.w13 = blob(w13);
    view.w13_sf = blob(w13_sf);
    view.w2 = blob(w2);
    view.w2_sf = blob(w2_sf);
    view.fc1_alpha = per_expert(fc1_alpha);
    view.fc2_alpha = per_expert(fc2_alpha);
    view.fc2_input_scale = per_expert(fc2_input_scale);
  }
};

}  // namespace megamoe::bench
