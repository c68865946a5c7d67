// What the host spends on one eager layer call (no CUDA graph), and where: an engine that does
// not capture graphs pays it on every layer of every step. Each figure is per call, over many
// calls enqueued behind each other, never waiting for the GPU on the way.
//
//   calls   enqueue of mega_moe_pre_dispatch + nvfp4_mega_moe, and of each alone (the GPU keeps
//           running them; the queue never fills);
//   parts   pieces of the MoE call's host path timed on their own, on the host only (validation,
//           the tile choice, the kernel request and its lookup, the SM count, the plan's region
//           lookups);
//   floor   cuLaunchKernelEx of an empty kernel with a 16-byte or a 1-KB parameter block, with and
//           without the PDL attribute: what no launcher can go below.
//
// Every figure is the median over 9 batches, with the batches' range.
//
//   bench_host_launch [out.md]     presets dsv4-flash and h6144-e256-k8, T = 1, 128, 512
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/validate.hpp"
#include "jit/compiler.hpp"
#include "megamoe/buffer.hpp"
#include "megamoe/error.hpp"
#include "megamoe/heuristics.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "megamoe/presets.hpp"
#include "megamoe/reference.hpp"
#include "random_kernel_weights.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_layer_io.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/device_select.hpp"
#include "runtime/module.hpp"
#include "runtime/nvfp4_mega_moe_kernels.hpp"

namespace {

using namespace megamoe;

constexpr int kQueuedCalls = 100;  // enqueued calls per batch (a few hundred launches at most)
constexpr int kBatches = 9;
constexpr int kHostRepeats = 500;  // repeats of a host-only part per batch

// Mean microseconds per call of `body` over `n` calls, after `warm` untimed ones.
template <class Body>
double mean_us(int n, int warm, Body&& body) {
  for (int i = 0; i < warm; ++i) body();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) body();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
}

struct Timing {
  double median = 0, low = 0, high = 0;  // us per call over the batches
};

// Enqueue time per call: in each of kBatches batches the stream is idle at the start, `body`
// enqueues GPU work kQueuedCalls times, and the GPU's backlog is drained after the clock stops.
// The host's timings vary by tens of percent from batch to batch (run 252): the median of the
// batches is the figure, with their range beside it.
template <class Body>
Timing enqueue_us(const runtime::Stream& stream, Body&& body) {
  for (int i = 0; i < 3; ++i) body();
  stream.synchronize();
  std::vector<double> us;
  for (int b = 0; b < kBatches; ++b) {
    us.push_back(mean_us(kQueuedCalls, 0, body));
    stream.synchronize();
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front(), us.back()};
}

// The bytes of nvfp4_mega_moe's parameter block, rounded up (its KernelArgs holds ~0.9 KB).
struct alignas(8) LargeParams {
  std::uint64_t words[128];
};

const char* kEmptySource = R"(
struct LargeParams { unsigned long long words[128]; };
extern "C" __global__ void empty_large(LargeParams) {}
extern "C" __global__ void empty_small(unsigned long long, unsigned long long) {}
)";

CUfunction empty_kernel(const char* entry) {
  jit::KernelRequest r;
  r.name = entry;
  r.source = kEmptySource;
  r.entry = entry;
  return runtime::load(*jit::compile(r));
}

struct Line {
  std::string what;
  Timing t;
};

void print(FILE* f, const std::string& title, const std::vector<Line>& lines) {
  std::fprintf(f, "\n%s\n\n| part | us per call | range over the batches |\n|---|---|---|\n",
               title.c_str());
  for (const Line& l : lines) {
    std::fprintf(f, "| %s | %.2f | %.2f-%.2f |\n", l.what.c_str(), l.t.median, l.t.low, l.t.high);
  }
}

std::vector<Line> launch_floor(const runtime::Stream& stream) {
  const CUfunction large = empty_kernel("empty_large"), small = empty_kernel("empty_small");
  std::vector<Line> lines;
  for (const bool pdl : {false, true}) {
    runtime::LaunchConfig cfg;
    cfg.grid = {132, 1, 1};
    cfg.block = {128, 1, 1};
    cfg.stream = stream.get();
    cfg.pdl = pdl;
    const LargeParams p{};
    const std::uint64_t a = 1, b = 2;
    const std::string tag = pdl ? ", PDL" : "";
    lines.push_back({"empty kernel, 16-B parameters" + tag,
                     enqueue_us(stream, [&] { runtime::launch_kernel(small, cfg, a, b); })});
    lines.push_back({"empty kernel, 1-KB parameters" + tag,
                     enqueue_us(stream, [&] { runtime::launch_kernel(large, cfg, p); })});
  }
  return lines;
}

std::vector<Line> layer_rows(const MoEConfig& c, std::int64_t tokens, const Device gpu,
                             const runtime::Stream& stream, const Nvfp4KernelWeights& kw) {
  const std::int64_t h = c.shape.hidden, k = c.shape.top_k;
  const reference::MoEInputs in = reference::random_inputs(c, tokens, {}, 7 + tokens);
  const runtime::DeviceLayerIo io(in, tokens, h, k, gpu);
  const SymmBuffer buffer = get_symm_buffer_for_mega_moe(c, "local");
  const std::span<const PreDispatchInputs> pds(&io.pre_dispatch, 1);
  const std::span<const Nvfp4KernelWeights> ws(&kw, 1);
  const std::span<const Nvfp4MoEOutputs> outs(&io.outputs, 1);
  auto pre = [&] { mega_moe_pre_dispatch(buffer, pds, stream.get()); };
  auto moe = [&] { nvfp4_mega_moe(buffer, ws, outs, stream.get()); };

  std::vector<Line> lines;
  lines.push_back({"**layer: pre-dispatch + MoE**", enqueue_us(stream, [&] {
                     pre();
                     moe();
                   })});
  lines.push_back({"pre-dispatch alone", enqueue_us(stream, pre)});
  lines.push_back({"MoE alone", enqueue_us(stream, moe)});

  auto host = [&](const std::string& what, auto&& body) {
    std::vector<double> us;
    for (int b = 0; b < kBatches; ++b) us.push_back(mean_us(kHostRepeats, b == 0 ? 10 : 0, body));
    std::sort(us.begin(), us.end());
    lines.push_back({what, {us[us.size() / 2], us.front(), us.back()}});
  };
  const Nvfp4KernelWeightBytes bytes = nvfp4_kernel_weight_bytes(c);
  host("part: cuda::current_gpu()", [&] { (void)cuda::current_gpu(); });
  host("part: buffer_facts + validate_nvfp4_mega_moe", [&] {
    validate::validate_nvfp4_mega_moe(validate::buffer_facts(buffer, gpu), ws, outs, bytes, 0);
  });
  host("part: buffer_facts + validate_pre_dispatch",
       [&] { validate::validate_pre_dispatch(validate::buffer_facts(buffer, gpu), pds); });
  int bm = 0;
  host("part: BLOCK_M table + tile choice", [&] {
    bm = get_block_m_for_mega_moe(c, tokens);
    (void)get_device_choice_block_m_for_mega_moe(c, tokens);
  });
  host("part: kernel request (launch shape, entry string)",
       [&] { (void)runtime::nvfp4_mega_moe_request(c, bm); });
  const jit::KernelRequest request = runtime::nvfp4_mega_moe_request(c, bm);
  host("part: load_cached lookup", [&] { (void)runtime::load_cached(request); });
  host("part: get_num_sms()", [&] { (void)get_num_sms(); });
  host("part: 16 plan.region() lookups", [&] {
    std::uint64_t sum = 0;
    for (int i = 0; i < 16; ++i) sum += buffer.plan.region(i % 2 ? "x" : "combine").offset;
    if (sum == 1) std::puts("");
  });
  stream.synchronize();
  return lines;
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (!cuda::driver_available(&why)) {
    std::fprintf(stderr, "bench_host_launch: no CUDA GPU: %s\n", why.c_str());
    return 2;
  }
  try {
    FILE* md = argc > 1 ? std::fopen(argv[1], "w") : nullptr;
    if (argc > 1 && md == nullptr) throw_invalid("out.md", "must be a file the bench can write");
    const runtime::DeviceProperties props = runtime::device_properties();
    const runtime::Stream stream;
    const Device gpu = cuda::current_gpu();
    std::vector<std::pair<std::string, std::vector<Line>>> tables;
    tables.push_back({"launch floor", launch_floor(stream)});
    for (const char* preset : {"dsv4-flash", "h6144-e256-k8"}) {
      MoEConfig c;
      c.shape = find_preset(preset).shape;
      c.num_ranks = 1;
      c.max_tokens_per_rank = 512;
      const bench::RandomKernelWeights weights(c, gpu, stream.get());
      for (const std::int64_t t : {1, 128, 512}) {
        tables.push_back({std::string(preset) + ", T = " + std::to_string(t),
                          layer_rows(c, t, gpu, stream, weights.view)});
      }
    }
    for (FILE* f : {stdout, md}) {
      if (f == nullptr) continue;
      std::fprintf(f, "GPU: %s (%d SMs), driver %d\n", props.name.c_str(), props.sm_count,
                   props.driver_version);
      for (const auto& [title, lines] : tables) print(f, title, lines);
    }
    if (md != nullptr) std::fclose(md);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_host_launch: %s\n", e.what());
    return 1;
  }
}
