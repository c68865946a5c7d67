// Pre-dispatch bandwidth: bytes read + written / time, against a device-to-device copy measured
// in the same run (docs/pre_dispatch.md). Prints a Markdown table; `bench_pre_dispatch FILE`
// also writes it to FILE.
//
//   bench_pre_dispatch [out.md] [--tokens N] [--hidden H] [--topk K]
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "megamoe/buffer.hpp"
#include "megamoe/formats.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/device_select.hpp"
#include "runtime/pre_dispatch_kernel.hpp"

namespace {

using namespace megamoe;
using runtime::DeviceBuffer;

constexpr int kWarmup = 5;
constexpr int kBatches = 31;           // median over these
constexpr int kLaunchesPerBatch = 10;  // launch gaps amortized inside one event pair

// Median microseconds of one call of `body`, each batch timed between two events.
template <typename Body>
double median_us(CUstream stream, Body&& body) {
  runtime::Event start, stop;
  for (int i = 0; i < kWarmup; ++i) body();
  std::vector<double> us;
  for (int b = 0; b < kBatches; ++b) {
    start.record(stream);
    for (int i = 0; i < kLaunchesPerBatch; ++i) body();
    stop.record(stream);
    stop.synchronize();
    us.push_back(1000.0 * stop.elapsed_ms_since(start) / kLaunchesPerBatch);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

struct Row {
  std::string name;
  double us = 0, bytes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  std::int64_t tokens = 8192, hidden = 7168;
  int topk = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokens" && i + 1 < argc) {
      tokens = std::stoll(argv[++i]);
    } else if (a == "--hidden" && i + 1 < argc) {
      hidden = std::stoll(argv[++i]);
    } else if (a == "--topk" && i + 1 < argc) {
      topk = std::stoi(argv[++i]);
    } else {
      out_path = a;
    }
  }
  std::string why;
  if (!cuda::driver_available(&why)) {
    std::fprintf(stderr, "bench_pre_dispatch: no CUDA GPU: %s\n", why.c_str());
    return 2;
  }
  try {
    const cuda::Driver& drv = cuda::driver();
    const runtime::DeviceProperties props = runtime::device_properties();
    runtime::Stream stream;
    const Device gpu = cuda::current_gpu();
    const std::int64_t experts = 256;

    // Inputs: random bf16 tokens (never zeros), random routes with some masked ids.
    std::mt19937_64 rng(std::random_device{}());
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<std::uint16_t> x(static_cast<std::size_t>(tokens * hidden));
    for (auto& v : x) v = formats::bf16_from_float(normal(rng));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * topk));
    std::vector<float> weights(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ids[i] = rng() % 10 == 0 ? -1 : static_cast<std::int32_t>(rng() % experts);
      weights[i] = static_cast<float>(rng() % 1000) / 1000.0f;
    }
    DeviceBuffer dx(x.size() * 2), dids(ids.size() * 4), dw(weights.size() * 4);
    dx.copy_from_host(std::as_bytes(std::span<const std::uint16_t>(x)));
    dids.copy_from_host(std::as_bytes(std::span<const std::int32_t>(ids)));
    dw.copy_from_host(std::as_bytes(std::span<const float>(weights)));
    PreDispatchInputs in;
    in.x = TensorView::contiguous(dx.as<void>(), DType::bf16, {tokens, hidden}, gpu);
    in.topk_idx = TensorView::contiguous(dids.as<void>(), DType::i32, {tokens, topk}, gpu);
    in.topk_weights = TensorView::contiguous(dw.as<void>(), DType::f32, {tokens, topk}, gpu);

    // The ceiling: a device-to-device copy of 2 GiB, read + write counted.
    std::vector<Row> rows;
    const std::size_t copy_bytes = std::size_t{1} << 31;
    DeviceBuffer a(copy_bytes), b(copy_bytes);
    a.fill_bytes(0x3C);
    const double copy_us = median_us(stream.get(), [&] {
      MEGAMOE_CU(drv.cuMemcpyDtoDAsync(b.get(), a.get(), copy_bytes, stream.get()));
    });
    const double copy_tbs = 2.0 * static_cast<double>(copy_bytes) / (copy_us * 1e6);

    struct Variant {
      const char* name;
      Format format;
      Fp8ScaleKind scale;
      bool hw;
      bool cta_per_row;   // FP4: the one-CTA-per-row kernel
      int warps_per_row;  // FP4: warps per row of the row kernel (0: the default layout)
    };
    const Variant variants[] = {
        {"nvfp4 (library default)", Format::nvfp4, Fp8ScaleKind::f32, true, false, 0},
        {"nvfp4 (2 warps per row)", Format::nvfp4, Fp8ScaleKind::f32, true, false, 2},
        {"nvfp4 (4 warps per row)", Format::nvfp4, Fp8ScaleKind::f32, true, false, 4},
        {"nvfp4 (CTA per row)", Format::nvfp4, Fp8ScaleKind::f32, true, true, 0},
        {"mxfp4 (library default)", Format::mxfp4, Fp8ScaleKind::f32, true, false, 0},
        {"mxfp4 (1 warp per row)", Format::mxfp4, Fp8ScaleKind::f32, true, false, 1},
        {"mxfp4 (2 warps per row)", Format::mxfp4, Fp8ScaleKind::f32, true, false, 2},
        {"mxfp4 (4 warps per row)", Format::mxfp4, Fp8ScaleKind::f32, true, false, 4},
        {"fp8 f32 scales (hw e4m3)", Format::fp8, Fp8ScaleKind::f32, true, false, 0},
        {"fp8 f32 scales (int e4m3)", Format::fp8, Fp8ScaleKind::f32, false, false, 0},
        {"fp8 ue8m0 scales (hw e4m3)", Format::fp8, Fp8ScaleKind::ue8m0, true, false, 0},
        {"fp8 ue8m0 scales (int e4m3)", Format::fp8, Fp8ScaleKind::ue8m0, false, false, 0}};
    for (const Variant& v : variants) {
      MoEConfig c;
      c.shape.hidden = hidden;
      c.shape.intermediate = 2048;
      c.shape.num_experts = experts;
      c.shape.top_k = topk;
      c.weight_format = c.act_format = v.format;
      c.fp8_scale = v.scale;
      c.max_tokens_per_rank = tokens;
      const SymmBuffer buf = get_symm_buffer_for_mega_moe(c);
      const PreDispatchInputs inputs[] = {in};
      const double us = median_us(stream.get(), [&] {
        runtime::launch_pre_dispatch(buf, inputs, stream.get(), v.hw, v.cta_per_row,
                                     v.warps_per_row);
      });
      // Bytes the kernel must move: x read, routes read, every output written once.
      const double t = static_cast<double>(tokens), h = static_cast<double>(hidden),
                   k = static_cast<double>(topk);
      double bytes = 2 * t * h + 8 * t * k;
      bytes += v.format == Format::fp8 ? t * h : t * h / 2;
      if (v.format == Format::nvfp4) bytes += t * h / 16 + 4 * t;
      if (v.format == Format::mxfp4) bytes += t * h / 32;
      if (v.format == Format::fp8) bytes += (v.scale == Fp8ScaleKind::f32 ? 4 : 1) * t * h / 128;
      bytes += 8 * t * k;
      rows.push_back({v.name, us, bytes});
    }

    std::string md;
    char line[512];
    std::snprintf(line, sizeof(line),
                  "GPU: %s (%d SMs, driver %d). T = %lld, H = %lld, K = %d, i32 ids. Median of "
                  "%d batches of %d launches, event-timed.\n\n",
                  props.name.c_str(), props.sm_count, props.driver_version,
                  static_cast<long long>(tokens), static_cast<long long>(hidden), topk, kBatches,
                  kLaunchesPerBatch);
    md += line;
    std::snprintf(line, sizeof(line),
                  "Device-to-device copy (2 GiB, read + write): %.1f us, **%.3f TB/s**\n\n",
                  copy_us, copy_tbs);
    md += line;
    md += "| format | time (us) | bytes read + written (MB) | TB/s | % of copy bandwidth |\n";
    md += "|---|---|---|---|---|\n";
    for (const Row& r : rows) {
      const double tbs = r.bytes / (r.us * 1e6);
      std::snprintf(line, sizeof(line), "| %s | %.1f | %.1f | %.3f | %.1f %% |\n", r.name.c_str(),
                    r.us, r.bytes / 1e6, tbs, 100.0 * tbs / copy_tbs);
      md += line;
    }
    std::fputs(md.c_str(), stdout);
    if (!out_path.empty()) {
      if (FILE* f = std::fopen(out_path.c_str(), "w")) {
        std::fputs(md.c_str(), f);
        std::fclose(f);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_pre_dispatch: %s\n", e.what());
    return 1;
  }
  return 0;
}
