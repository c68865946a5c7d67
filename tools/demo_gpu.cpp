// The GPU half of `megamoe demo`: the whole user path on one GPU (checkpoint weights -> weight
// transform -> pre-dispatch -> nvfp4_mega_moe), checked against the CPU oracle and timed against
// the weight-byte floor and the PyTorch baseline, all measured in this run.
#include "demo_gpu.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "accuracy.hpp"
#include "megamoe/buffer.hpp"
#include "megamoe/formats.hpp"
#include "megamoe/heuristics.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "megamoe/reference.hpp"
#include "runtime/back_to_back.hpp"
#include "runtime/bandwidth_probe.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_layer_io.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/device_select.hpp"
#include "runtime/module.hpp"
#include "runtime/nvfp4_kernel_weight_storage.hpp"
#include "runtime/nvfp4_weight_transform_kernels.hpp"

namespace megamoe::tool {
namespace {

using runtime::DeviceBuffer;
using runtime::upload;

// The layer's weights on the device in kernel layout, made from checkpoint-layout tensors;
// `transform_ms`: wall time of the transform (allocation of the kernel-layout blobs included).
std::unique_ptr<runtime::Nvfp4KernelWeightStorage> load_weights(
    const MoEConfig& c, const reference::QuantizedWeights& w, const std::vector<float>& fc2_scale,
    double* transform_ms) {
  // Checkpoint tensors live only until the transform has run.
  const runtime::Nvfp4CheckpointStorage ck{
      upload(w.w13.packed), upload(w.w13.scales), upload(w.w13.global_scales),
      upload(w.w2.packed),  upload(w.w2.scales),  upload(w.w2.global_scales),
      upload(fc2_scale)};
  const Nvfp4CheckpointWeights in = ck.view(c);
  // Compiled (or fetched from the JIT cache) first, so that the time is the transform's own.
  runtime::load_cached(runtime::nvfp4_weight_transform_request());
  const auto start = std::chrono::steady_clock::now();
  auto storage = runtime::transform_into_storage(c, in);
  *transform_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return storage;
}

std::vector<double> download_bf16(const DeviceBuffer& b) {
  std::vector<std::uint16_t> bits(b.size() / 2);
  b.copy_to_host(std::as_writable_bytes(std::span<std::uint16_t>(bits)));
  std::vector<double> v(bits.size());
  std::transform(bits.begin(), bits.end(), v.begin(),
                 [](std::uint16_t x) { return formats::bf16_to_float(x); });
  return v;
}

// Calls of `body` per graph: one call per replay would time the graph's launch with it (the host
// submits after the start event: 3-4 us of the dsv4-flash T = 1 numbers, bench/NOTES.md).
constexpr int kCallsPerGraph = 10;

// A graph of kCallsPerGraph calls of `body`.
class CallGraph {
 public:
  template <class Body>
  CallGraph(CUstream stream, Body&& body) : stream_(stream) {
    const cuda::Driver& d = cuda::driver();
    CUgraph g = nullptr;
    MEGAMOE_CU(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int i = 0; i < kCallsPerGraph; ++i) body();
    MEGAMOE_CU(d.cuStreamEndCapture(stream, &g));
    const CUresult r = d.cuGraphInstantiate(&exec_, g, 0);
    d.cuGraphDestroy(g);
    MEGAMOE_CU(r);
  }
  CallGraph(const CallGraph&) = delete;
  CallGraph& operator=(const CallGraph&) = delete;
  ~CallGraph() { cuda::driver().cuGraphExecDestroy(exec_); }
  void launch() const { MEGAMOE_CU(cuda::driver().cuGraphLaunch(exec_, stream_)); }

 private:
  CUstream stream_;
  CUgraphExec exec_ = nullptr;
};

// Median over `reps` replays (after 3 warm-ups), per call.
double graph_median_us(CUstream stream, const CallGraph& graph, int reps) {
  runtime::Event a, b;
  std::vector<double> us;
  for (int i = 0; i < reps + 3; ++i) {
    a.record(stream);
    graph.launch();
    b.record(stream);
    b.synchronize();
    if (i >= 3) us.push_back(1000.0 * b.elapsed_ms_since(a) / kCallsPerGraph);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

template <class Body>
double graph_median_us(CUstream stream, int reps, Body&& body) {
  const CallGraph graph(stream, body);
  return graph_median_us(stream, graph, reps);
}

// What the host spends enqueuing one eager call of `body` (no graph): validation, the tile
// choice, the kernel lookup and the launches. Timed over calls queued behind each other, never
// waiting for the GPU on the way (100 layers stay well inside the launch queue), so an engine
// that does not capture graphs can compare it with the call's GPU time.
template <class Body>
double host_enqueue_us(runtime::Stream& stream, Body&& body) {
  constexpr int kCalls = 100;
  for (int i = 0; i < 3; ++i) body();
  stream.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) body();
  const auto t1 = std::chrono::steady_clock::now();
  stream.synchronize();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / kCalls;
}

// Per call, replays held back to back for `seconds` (after one second to reach the steady state):
// from T = 16 on the layer keeps an H200 at its 700 W board limit, where the SM clock settles
// below its maximum, so a median of a few replays after an idle moment reads faster than a
// stream of layers runs (bench/NOTES.md, twentieth session).
double graph_steady_us(CUstream stream, const CallGraph& graph, double seconds) {
  auto run_for = [&](double s) {
    runtime::Event a, b;
    a.record(stream);
    const long long batches = runtime::run_back_to_back(stream, s, [&] {
      for (int i = 0; i < 8; ++i) graph.launch();
    });
    b.record(stream);
    b.synchronize();
    return 1000.0 * b.elapsed_ms_since(a) / static_cast<double>(batches * 8 * kCallsPerGraph);
  };
  run_for(1.0);
  return run_for(seconds);
}

// Where bench/torch_baseline.py is: the working directory's bench/ (a source checkout), else
// the source tree this tool was built from.
std::string baseline_script() {
  for (std::string dir : {std::string("."),
#ifdef MEGAMOE_SOURCE_DIR
                          std::string(MEGAMOE_SOURCE_DIR)
#endif
       }) {
    const std::string path = dir + "/bench/torch_baseline.py";
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      std::fclose(f);
      return path;
    }
  }
  return {};
}

// The routing as bench/torch_baseline.py --routes reads it; empty when the file cannot be made.
std::string write_routes(const reference::MoEInputs& in, std::int64_t top_k) {
  char path[] = "/tmp/megamoe_demo_routes_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return {};
  FILE* f = fdopen(fd, "w");
  if (f == nullptr) {
    close(fd);
    std::remove(path);
    return {};
  }
  const std::string json = reference::routing_json(in, top_k) + "\n";
  const bool written = std::fputs(json.c_str(), f) >= 0;
  if (std::fclose(f) != 0 || !written) {
    std::remove(path);
    return {};
  }
  return path;
}

// The PyTorch BF16 baseline of the benchmark brief, run in a child process on this GPU with the
// demo's own routing.
std::string torch_baseline(const std::string& preset, std::int64_t tokens,
                           const reference::MoEInputs& in, std::int64_t top_k, double* us) {
  const std::string script = baseline_script();
  if (script.empty()) return "unavailable (bench/torch_baseline.py not found)";
  const std::string routes = write_routes(in, top_k);
  if (routes.empty()) return "unavailable (could not write the routing to /tmp)";
  // The same GPU as the layer: torch numbers the visible devices as the driver does.
  const std::string cmd = "python3 " + script + " --preset " + preset + " --tokens " +
                          std::to_string(tokens) + " --routes " + routes + " --device " +
                          std::to_string(cuda::current_device()) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "unavailable (could not start python3)";
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  pclose(p);
  std::remove(routes.c_str());
  const auto k = out.find("\"baseline_us\": ");
  if (k == std::string::npos) return "unavailable: " + out.substr(0, 200);
  *us = std::stod(out.substr(k + 15));
  return "torch._grouped_mm bf16, same routing";
}

}  // namespace

int run_gpu_demo(const MoEConfig& config, std::int64_t tokens, std::uint64_t seed) {
  const Device gpu = cuda::current_gpu();  // every tensor is tagged with it
  const runtime::DeviceProperties props = runtime::device_properties();
  std::printf("GPU: %s (%s, %d SMs), driver %d; seed %llu\n", props.name.c_str(),
              props.arch.c_str(), props.sm_count, props.driver_version,
              static_cast<unsigned long long>(seed));
  std::printf("layer: %s, %lld tokens\n", describe(config).c_str(), static_cast<long long>(tokens));
  const std::int64_t h = config.shape.hidden, k = config.shape.top_k;

  const auto weights = reference::random_weights(config, seed, reference::WeightInit::random_codes);
  const auto inputs = reference::random_inputs(config, tokens, {}, seed + 1);
  reference::ForwardOptions fo;
  fo.fc2_input_scale = reference::calibrate_fc2_input_scales(config, inputs, weights);
  const std::vector<double> ref = reference::moe_forward(config, inputs, weights, fo).out;
  double transform_ms = 0;
  const auto dw = load_weights(config, weights, fo.fc2_input_scale, &transform_ms);

  runtime::DeviceLayerIo io(inputs, tokens, h, k, gpu);
  DeviceBuffer& out = io.out;
  const PreDispatchInputs& pd = io.pre_dispatch;
  const Nvfp4MoEOutputs& outputs = io.outputs;
  const SymmBuffer buffer = get_symm_buffer_for_mega_moe(config, "local");
  runtime::Stream stream;
  auto layer = [&] {
    mega_moe_pre_dispatch(buffer, std::span<const PreDispatchInputs>(&pd, 1), stream.get());
    nvfp4_mega_moe(buffer, std::span<const Nvfp4KernelWeights>(&dw->view, 1),
                   std::span<const Nvfp4MoEOutputs>(&outputs, 1), stream.get());
  };
  out.fill_bytes(0xFF);  // bf16 NaN: an unwritten element cannot pass
  layer();
  stream.synchronize();
  const std::vector<double> first = download_bf16(out);
  out.fill_bytes(0xFF);
  layer();
  stream.synchronize();
  const bool repeatable = download_bf16(out) == first;
  const int bm = get_block_m_for_mega_moe(config, tokens);
  const Accuracy acc = compare_worst_block(first, ref, h, bm);
  const bool correct = acc.non_finite == 0 && acc.cosine >= 0.99999 && acc.rel_l2 <= 1e-3;

  // Timing: graph replays of the MoE call alone (inputs stay dispatched) and of the whole layer.
  const CallGraph moe_graph(stream.get(), [&] {
    nvfp4_mega_moe(buffer, std::span<const Nvfp4KernelWeights>(&dw->view, 1),
                   std::span<const Nvfp4MoEOutputs>(&outputs, 1), stream.get());
  });
  const double moe_us = graph_median_us(stream.get(), moe_graph, 50);
  const double layer_us = graph_median_us(stream.get(), 50, layer);
  const double pre_us = graph_median_us(stream.get(), 50, [&] {
    mega_moe_pre_dispatch(buffer, std::span<const PreDispatchInputs>(&pd, 1), stream.get());
  });
  const double host_us = host_enqueue_us(stream, layer);
  std::set<std::int64_t> hit;
  for (std::int64_t id : inputs.topk_idx) {
    if (id >= 0) hit.insert(id);
  }
  const Nvfp4KernelWeightBytes wb = nvfp4_kernel_weight_bytes(config);
  const double expert_bytes = static_cast<double>(wb.w13 + wb.w13_sf + wb.w2 + wb.w2_sf) /
                              static_cast<double>(config.experts_per_rank());
  const double bytes = expert_bytes * static_cast<double>(hit.size());
  const double bw =
      runtime::measure_read_bandwidth_tbs(dw->w13.get(), dw->w13.size(), stream.get());
  const double floor_us = bytes / (bw * 1e12) * 1e6;
  double base_us = 0;
  const std::string base = torch_baseline(
      config.shape.hidden == 4096 && config.shape.top_k == 6 ? "dsv4-flash" : "h6144-e256-k8",
      tokens, inputs, k, &base_us);
  // Last, so that no median above (nor the baseline's) follows a hot GPU.
  const double moe_steady_us = graph_steady_us(stream.get(), moe_graph, 2.0);

  std::printf("\n| check | value |\n|---|---|\n");
  std::printf(
      "| vs CPU oracle (worst %d-token block) | cosine %.7f, rel-L2 %.2e, non-finite %lld "
      "-> %s |\n",
      bm, acc.cosine, acc.rel_l2, static_cast<long long>(acc.non_finite),
      correct ? "PASS" : "FAIL");
  std::printf("| repeat run bitwise equal | %s |\n", repeatable ? "yes" : "NO");
  std::printf("| HBM read bandwidth (this run) | %.2f TB/s |\n", bw);
  std::printf("| experts hit, weight bytes | %zu, %.1f MB |\n", hit.size(), bytes / 1e6);
  std::printf("| weight-byte floor | %.1f us |\n", floor_us);
  std::printf(
      "| weight transform on the GPU (all %lld experts, allocation included) | %.1f ms "
      "for %.2f GB |\n",
      static_cast<long long>(config.experts_per_rank()), transform_ms,
      static_cast<double>(wb.w13 + wb.w13_sf + wb.w2 + wb.w2_sf) / 1e9);
  std::printf(
      "| nvfp4_mega_moe (graph of %d calls, median per call) | %.1f us = %.2fx floor, "
      "%.2f TB/s |\n",
      kCallsPerGraph, moe_us, moe_us / floor_us, bytes / (moe_us * 1e-6) / 1e12);
  std::printf(
      "| nvfp4_mega_moe held back to back for 2 s (steady state) | %.1f us = %.2fx floor |\n",
      moe_steady_us, moe_steady_us / floor_us);
  std::printf("| mega_moe_pre_dispatch alone | %.1f us |\n", pre_us);
  std::printf("| pre-dispatch + nvfp4_mega_moe (the layer) | %.1f us |\n", layer_us);
  std::printf("| host time to enqueue one layer, eager (no graph) | %.1f us |\n", host_us);
  if (base_us > 0) {
    std::printf("| PyTorch baseline (%s) | %.1f us -> megamoe %.2fx faster |\n", base.c_str(),
                base_us, base_us / layer_us);
  } else {
    std::printf("| PyTorch baseline | %s |\n", base.c_str());
  }
  // Back-to-back MoE calls start while the previous one combines (programmatic dependent
  // launch); a pre-dispatch in between waits for the previous layer (bench/NOTES.md, run 133).
  std::printf(
      "\nThe MoE figure is a call among back-to-back MoE calls, each starting while the previous "
      "one combines;\nthe layer figure is what a decode step pays per layer (its pre-dispatch "
      "waits for the previous layer).\nThe medians follow an idle moment; held for seconds, the "
      "GPU reaches its board power limit\nand lowers its clock: the steady-state line.\n");
  return correct && repeatable ? 0 : 1;
}

}  // namespace megamoe::tool
