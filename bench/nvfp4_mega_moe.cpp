// EP1 decode timings of the SM90 NVFP4 MegaMoE layer (../shared/BENCHMARKS.md metrics): median
// CUDA-graph replay time of one layer call, the weight-byte floor (bytes of the distinct experts
// hit, weights + scales, over the HBM read bandwidth measured in this run by a read-only
// reduction), achieved TB/s and time / floor. Presets h6144-e256-k8 and dsv4-flash, T in
// {1, 16, 64, 128, 512}, uniform / Zipf(1.2) / 20 % masked routing.
//
// L2: each graph replays kSets layer calls with different routings (so consecutive calls hit
// different experts), each preceded by a device-to-device copy of its pre-dispatched input region
// (built on the host by the pre-dispatch recipe, tests/support/nvfp4_host_dispatch.hpp); a second
// graph of the copies alone is subtracted. Weights are random valid NVFP4 codes written straight in
// the kernel layout (the transform is a load-time step and is timed by nobody).
//
//   bench_nvfp4_mega_moe [out_prefix]      writes out_prefix.md and out_prefix.csv
//
// Subsets for profiling and quick iterations (comma lists; unset = all):
//   MEGAMOE_BENCH_PRESETS=dsv4-flash  MEGAMOE_BENCH_ROUTINGS=uniform  MEGAMOE_BENCH_TOKENS=1,128
// MEGAMOE_BENCH_TOKENS may also name other token counts (1..8192, e.g. the edges of a BLOCK_M
// regime: 384,682); T_max is then the largest count.
// MEGAMOE_BENCH_ZIPF=0.8,1.0 adds Zipf-skewed routings of those exponents (rows "zipf0.8", ...).
// Where a call has a tile choice on the device (get_device_choice_block_m_for_mega_moe), the
// BLOCK_M column reads "8 / 32 (k of 8)": k of the row's routing sets ran the alternative.
// MEGAMOE_BENCH_FP8_COMBINE=1 times the layer with FP8 combine slots (config.fp8_combine).
// MEGAMOE_BENCH_SOAK_MS=N replays each row's graph for N ms more after timing it, then the copies'
// graph alone for N ms, and prints "SOAK preset routing T full t0 t1 pre t2 t3 calls c1 c2" (unix
// seconds; c1 / c2 graph launches), so that a sampler beside the process (nvidia-smi,
// bench/probes/power_soak.py) can read the SM clock and board power in steady state: the layer
// runs into the board's power limit at large T (bench/NOTES.md, twentieth session), where the
// timed replays of a row are too short for the driver's power readings. The table then gains the
// steady time per call and its ratio; the copies-only window, which draws little power, lets the
// clock recover before the next row is timed.
// The steady time includes the power controller's first ~0.1-0.2 s: give 1000 ms or more.
// MEGAMOE_BENCH_ROUTES=FILE writes each row's kSets routings there, one JSON line per row:
// {"preset", "routing", "tokens", "top_k", "sets": [reference::routing_json of each set]}, so that
// bench/torch_baseline.py --route-sets times the PyTorch baseline on the same routings.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../tests/support/nvfp4_host_dispatch.hpp"
#include "jit/compiler.hpp"
#include "megamoe/buffer.hpp"
#include "megamoe/error.hpp"
#include "megamoe/heuristics.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "megamoe/presets.hpp"
#include "megamoe/reference.hpp"
#include "random_kernel_weights.hpp"
#include "runtime/back_to_back.hpp"
#include "runtime/bandwidth_probe.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/device_select.hpp"
#include "runtime/module.hpp"

namespace {

using namespace megamoe;

// True when the comma list in environment variable `var` is unset or names `item`.
bool selected(const char* var, const std::string& item) {
  const char* v = std::getenv(var);
  if (v == nullptr || *v == '\0') return true;
  const std::string list = std::string(",") + v + ",";
  return list.find("," + item + ",") != std::string::npos;
}
using runtime::DeviceBuffer;

constexpr int kSets = 8;
constexpr int kReplays = 21;

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Launches `body` in batches of 8, back to back for `ms` of wall time; sets t0 / t1 (unix seconds:
// before the first launch, after the last completed) and the launch count.
template <class Body>
void soak(CUstream stream, double ms, Body&& body, double& t0, double& t1, long long& calls) {
  t0 = unix_seconds();
  calls = 8 * runtime::run_back_to_back(stream, ms / 1e3, [&] {
            for (int i = 0; i < 8; ++i) body();
          });
  t1 = unix_seconds();
}

template <class Body>
double median_ms(CUstream stream, int reps, Body&& body) {
  runtime::Event a, b;
  std::vector<double> ms;
  body();
  body();
  for (int i = 0; i < reps; ++i) {
    a.record(stream);
    body();
    b.record(stream);
    b.synchronize();
    ms.push_back(b.elapsed_ms_since(a));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct RoutingCase {
  const char* name;
  reference::RoutingOptions options;
};

// The token counts to time: BENCHMARKS.md's, or the comma list MEGAMOE_BENCH_TOKENS names.
std::vector<std::int64_t> token_counts() {
  const char* v = std::getenv("MEGAMOE_BENCH_TOKENS");
  if (v == nullptr || *v == '\0') return {1, 16, 64, 128, 512};
  std::vector<std::int64_t> out;
  const std::string list(v);
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t end = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, end - at);
    char* stop = nullptr;
    const long long t = std::strtoll(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || t < 1 || t > 8192) {
      throw_invalid("MEGAMOE_BENCH_TOKENS", "each item must be a token count in [1, 8192]", item);
    }
    out.push_back(t);
    at = end + 1;
  }
  return out;
}

struct Row {
  std::string preset, routing;
  std::int64_t tokens = 0;
  int block_m = 0;
  int device_block_m = 0;  // the device's alternative tile where the call had a choice, else 0
  int device_sets = 0;     // routing sets (of kSets) whose calls ran it
  double us = 0, floor_us = 0, tbs = 0, experts_hit = 0;
  double steady_us = 0;  // per call over the soak windows (MEGAMOE_BENCH_SOAK_MS), else 0
};

}  // namespace

int main(int argc, char** argv) {
  const std::string prefix = argc > 1 ? argv[1] : "nvfp4_mega_moe";
  std::string why;
  if (!cuda::driver_available(&why)) {
    std::fprintf(stderr, "bench_nvfp4_mega_moe: no CUDA GPU: %s\n", why.c_str());
    return 2;
  }
  try {
    const cuda::Driver& d = cuda::driver();
    const runtime::DeviceProperties props = runtime::device_properties();
    runtime::Stream stream;
    std::vector<Row> rows;
    double bw_tbs = 0;
    const char* soak_env = std::getenv("MEGAMOE_BENCH_SOAK_MS");
    double soak_ms = 0.0;
    char* soak_end = nullptr;
    if (soak_env != nullptr && *soak_env != '\0') soak_ms = std::strtod(soak_env, &soak_end);
    if (soak_end != nullptr && (*soak_end != '\0' || !(soak_ms >= 0.0 && soak_ms <= 60000.0))) {
      throw_invalid("MEGAMOE_BENCH_SOAK_MS", "must be a number of milliseconds in [0, 60000]",
                    soak_env);
    }
    const char* fp8_env = std::getenv("MEGAMOE_BENCH_FP8_COMBINE");
    const bool fp8_combine = fp8_env != nullptr && std::string(fp8_env) == "1";
    const std::vector<std::int64_t> tokens = token_counts();
    std::unique_ptr<FILE, int (*)(FILE*)> routes_file(nullptr, &std::fclose);
    if (const char* v = std::getenv("MEGAMOE_BENCH_ROUTES"); v != nullptr && *v != '\0') {
      routes_file.reset(std::fopen(v, "w"));
      if (routes_file == nullptr) {
        throw_invalid("MEGAMOE_BENCH_ROUTES", "must name a file the bench can write", v);
      }
    }
    std::vector<RoutingCase> routings = {{"uniform", {}},
                                         {"zipf1.2", {reference::RoutingSkew::zipf, 1.2, 0.0}},
                                         {"masked20", {reference::RoutingSkew::uniform, 1.2, 0.2}}};
    // MEGAMOE_BENCH_ZIPF=0.6,0.8,...: further Zipf exponents, as routings "zipf<value>".
    std::vector<std::string> zipf_names;  // outlives `routings`, which points into it
    std::vector<double> zipf_exponents;
    if (const char* v = std::getenv("MEGAMOE_BENCH_ZIPF"); v != nullptr && *v != '\0') {
      const std::string list(v);
      for (std::size_t at = 0; at <= list.size();) {
        const std::size_t end = std::min(list.find(',', at), list.size());
        const std::string item = list.substr(at, end - at);
        char* stop = nullptr;
        const double x = std::strtod(item.c_str(), &stop);
        if (item.empty() || *stop != '\0' || !(x >= 0.0 && x <= 4.0)) {
          throw_invalid("MEGAMOE_BENCH_ZIPF", "each item must be an exponent in [0, 4]", item);
        }
        zipf_names.push_back("zipf" + item);
        zipf_exponents.push_back(x);
        at = end + 1;
      }
    }
    for (std::size_t i = 0; i < zipf_names.size(); ++i) {
      routings.push_back(
          {zipf_names[i].c_str(), {reference::RoutingSkew::zipf, zipf_exponents[i], 0.0}});
    }

    for (const char* preset_name : {"dsv4-flash", "h6144-e256-k8"}) {
      if (!selected("MEGAMOE_BENCH_PRESETS", preset_name)) continue;
      MoEConfig c;
      c.shape = find_preset(preset_name).shape;
      c.num_ranks = 1;
      c.max_tokens_per_rank =
          std::max<std::int64_t>(512, *std::max_element(tokens.begin(), tokens.end()));
      c.fp8_combine = fp8_combine;
      const std::int64_t el = c.experts_per_rank(), H = c.shape.hidden;
      const Nvfp4KernelWeightBytes wb = nvfp4_kernel_weight_bytes(c);
      const Device gpu = cuda::current_gpu();  // every tensor is tagged with it
      const bench::RandomKernelWeights weights(c, gpu, stream.get());
      const Nvfp4KernelWeights& kw = weights.view;
      if (bw_tbs == 0) {
        bw_tbs = runtime::measure_read_bandwidth_tbs(weights.w13.get(), weights.w13.size(),
                                                     stream.get());
      }
      const double expert_bytes =
          static_cast<double>(wb.w13 + wb.w13_sf + wb.w2 + wb.w2_sf) / static_cast<double>(el);
      const SymmBuffer buffer = get_symm_buffer_for_mega_moe(c, "local");

      for (const RoutingCase& rc : routings) {
        if (!selected("MEGAMOE_BENCH_ROUTINGS", rc.name)) continue;
        for (std::int64_t T : tokens) {
          std::vector<DeviceBuffer> images, outs;
          std::vector<Nvfp4MoEOutputs> outputs;
          std::size_t image_offset = 0;
          double hit = 0;
          std::string sets_json;
          for (int s = 0; s < kSets; ++s) {
            reference::MoEInputs in;
            reference::random_routing(
                c, T, rc.options,
                1000 + static_cast<std::uint64_t>(s) * 7919 + static_cast<std::uint64_t>(T), in);
            sets_json += (s > 0 ? ", " : "") + reference::routing_json(in, c.shape.top_k);
            std::set<std::int64_t> distinct;
            for (std::int64_t id : in.topk_idx) {
              if (id >= 0) distinct.insert(id);
            }
            hit += static_cast<double>(distinct.size());
            const std::vector<float> xf =
                reference::random_bf16(T, H, 1.0f, 77 + static_cast<std::uint64_t>(s));
            const test::InputImage img =
                test::nvfp4_input_image(buffer.plan, xf, in.topk_idx, in.topk_weights, T);
            image_offset = img.offset;
            images.emplace_back(img.bytes.size());
            images.back().copy_from_host(std::as_bytes(std::span<const std::uint8_t>(img.bytes)));
            outs.emplace_back(static_cast<std::size_t>(T * H * 2));
            outputs.push_back(
                {0, TensorView::contiguous(outs.back().as<void>(), DType::bf16, {T, H}, gpu)});
          }
          const auto region = reinterpret_cast<CUdeviceptr>(
              static_cast<std::uint8_t*>(buffer.memory->base(0)) + image_offset);
          auto layer = [&](int s, bool moe) {
            const auto us_ = static_cast<std::size_t>(s);
            MEGAMOE_CU(
                d.cuMemcpyDtoDAsync(region, images[us_].get(), images[us_].size(), stream.get()));
            if (moe) {
              nvfp4_mega_moe(buffer, std::span<const Nvfp4KernelWeights>(&kw, 1),
                             std::span<const Nvfp4MoEOutputs>(&outputs[us_], 1), stream.get());
            }
          };
          // Eager once (compiles; and where the call has a tile choice on the device, which tile
          // each routing set ran), then capture both graphs.
          const std::optional<int> device_bm = get_device_choice_block_m_for_mega_moe(c, T);
          int device_sets = 0;
          for (int s = 0; s < kSets; ++s) {
            layer(s, true);
            if (device_bm) {
              stream.synchronize();
              device_sets += nvfp4_tile_choice_of_last_call(buffer, 0) == *device_bm ? 1 : 0;
            }
          }
          stream.synchronize();
          auto capture = [&](bool moe) {
            CUgraph g = nullptr;
            CUgraphExec e = nullptr;
            MEGAMOE_CU(d.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
            for (int s = 0; s < kSets; ++s) layer(s, moe);
            MEGAMOE_CU(d.cuStreamEndCapture(stream.get(), &g));
            MEGAMOE_CU(d.cuGraphInstantiate(&e, g, 0));
            d.cuGraphDestroy(g);
            return e;
          };
          CUgraphExec full = capture(true), pre = capture(false);
          const double full_ms = median_ms(
              stream.get(), kReplays, [&] { MEGAMOE_CU(d.cuGraphLaunch(full, stream.get())); });
          const double pre_ms = median_ms(stream.get(), kReplays,
                                          [&] { MEGAMOE_CU(d.cuGraphLaunch(pre, stream.get())); });
          double t[4] = {0, 0, 0, 0};
          long long calls[2] = {0, 0};
          if (soak_ms > 0) {
            soak(
                stream.get(), soak_ms, [&] { MEGAMOE_CU(d.cuGraphLaunch(full, stream.get())); },
                t[0], t[1], calls[0]);
            soak(
                stream.get(), soak_ms, [&] { MEGAMOE_CU(d.cuGraphLaunch(pre, stream.get())); },
                t[2], t[3], calls[1]);
            std::printf("SOAK %s %s %lld full %.6f %.6f pre %.6f %.6f calls %lld %lld\n",
                        preset_name, rc.name, static_cast<long long>(T), t[0], t[1], t[2], t[3],
                        calls[0], calls[1]);
            std::fflush(stdout);
          }
          d.cuGraphExecDestroy(full);
          d.cuGraphExecDestroy(pre);
          Row r;
          r.preset = preset_name;
          r.routing = rc.name;
          r.tokens = T;
          r.block_m = get_block_m_for_mega_moe(c, T);
          r.device_block_m = device_bm.value_or(0);
          r.device_sets = device_sets;
          r.us = (full_ms - pre_ms) * 1000.0 / kSets;
          if (calls[0] > 0 && calls[1] > 0) {
            r.steady_us = ((t[1] - t[0]) / static_cast<double>(calls[0]) -
                           (t[3] - t[2]) / static_cast<double>(calls[1])) *
                          1e6 / kSets;
          }
          r.experts_hit = hit / kSets;
          const double bytes = r.experts_hit * expert_bytes;
          r.floor_us = bytes / (bw_tbs * 1e12) * 1e6;
          r.tbs = bytes / (r.us * 1e-6) / 1e12;
          rows.push_back(r);
          if (routes_file != nullptr) {
            const std::string line = "{\"preset\": \"" + std::string(preset_name) +
                                     "\", \"routing\": \"" + rc.name +
                                     "\", \"tokens\": " + std::to_string(T) +
                                     ", \"top_k\": " + std::to_string(c.shape.top_k) +
                                     ", \"sets\": [" + sets_json + "]}\n";
            if (std::fputs(line.c_str(), routes_file.get()) < 0) {
              throw_invalid("MEGAMOE_BENCH_ROUTES", "write failed", "");
            }
          }
          std::fprintf(stderr, "%s %s T=%lld: %.1f us (floor %.1f)\n", preset_name, rc.name,
                       static_cast<long long>(T), r.us, r.floor_us);
        }
      }
    }

    std::string md = std::string("# NVFP4 MegaMoE (SM90), EP1") +
                     (fp8_combine ? ", FP8 combine" : "") + ", " + props.name + ", driver " +
                     std::to_string(props.driver_version) + ", SMs " +
                     std::to_string(get_num_sms()) +
                     "\n\nHBM read bandwidth (this run): " + std::to_string(bw_tbs) + " TB/s\n\n" +
                     (soak_ms > 0 ? "Steady: per call over MEGAMOE_BENCH_SOAK_MS of replays after "
                                    "the timed ones (the board at its power limit from T = 16 on; "
                                    "bench/NOTES.md, twentieth session).\n\n"
                                  : "") +
                     "| preset | routing | T | BLOCK_M | experts hit | time (us) | floor (us) | "
                     "TB/s | time/floor |" +
                     (soak_ms > 0 ? " steady (us) | steady/floor |\n" : "\n") +
                     "|---|---|---|---|---|---|---|---|---|" + (soak_ms > 0 ? "---|---|\n" : "\n");
    std::string csv =
        std::string(
            "preset,routing,tokens,block_m,device_block_m,device_sets,experts_hit,time_us,"
            "floor_us,tbs,") +
        (soak_ms > 0 ? "ratio,steady_us,steady_ratio\n" : "ratio\n");
    char line[512];
    for (const Row& r : rows) {
      // BLOCK_M as run: the table's, or "8 / 32 (k of 8)" where k routing sets ran the
      // device's alternative.
      char bm[48];
      if (r.device_block_m != 0) {
        std::snprintf(bm, sizeof bm, "%d / %d (%d of %d)", r.block_m, r.device_block_m,
                      r.device_sets, kSets);
      } else {
        std::snprintf(bm, sizeof bm, "%d", r.block_m);
      }
      std::snprintf(line, sizeof line, "| %s | %s | %lld | %s | %.1f | %.1f | %.1f | %.2f | %.2f |",
                    r.preset.c_str(), r.routing.c_str(), static_cast<long long>(r.tokens), bm,
                    r.experts_hit, r.us, r.floor_us, r.tbs, r.us / r.floor_us);
      md += line;
      std::snprintf(line, sizeof line, "%s,%s,%lld,%d,%d,%d,%.2f,%.2f,%.2f,%.3f,%.3f",
                    r.preset.c_str(), r.routing.c_str(), static_cast<long long>(r.tokens),
                    r.block_m, r.device_block_m, r.device_sets, r.experts_hit, r.us, r.floor_us,
                    r.tbs, r.us / r.floor_us);
      csv += line;
      if (soak_ms > 0) {
        std::snprintf(line, sizeof line, " %.1f | %.2f |", r.steady_us, r.steady_us / r.floor_us);
        md += line;
        std::snprintf(line, sizeof line, ",%.2f,%.3f", r.steady_us, r.steady_us / r.floor_us);
        csv += line;
      }
      md += "\n";
      csv += "\n";
    }
    if (routes_file != nullptr && std::fclose(routes_file.release()) != 0) {
      throw_invalid("MEGAMOE_BENCH_ROUTES", "the file could not be completed", "");
    }
    std::printf("%s", md.c_str());
    if (FILE* f = std::fopen((prefix + ".md").c_str(), "w")) {
      std::fputs(md.c_str(), f);
      std::fclose(f);
    }
    if (FILE* f = std::fopen((prefix + ".csv").c_str(), "w")) {
      std::fputs(csv.c_str(), f);
      std::fclose(f);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_nvfp4_mega_moe: %s\n", e.what());
    return 1;
  }
}
