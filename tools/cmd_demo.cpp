// `megamoe demo`: the flagship NVFP4 layer on a default preset. On a GPU: the fused kernel
// against the CPU oracle, its time against the weight-byte floor and the PyTorch baseline, all
// measured in this run. Without a GPU: the CPU oracle alone, and it says so.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "accuracy.hpp"
#include "commands.hpp"
#include "demo_gpu.hpp"
#include "megamoe/presets.hpp"
#include "megamoe/reference.hpp"
#include "options.hpp"
#include "runtime/cuda_driver.hpp"

namespace megamoe::tool {
namespace {

MoEConfig nvfp4_config(const Preset& preset, std::int64_t tokens) {
  MoEConfig c;
  c.shape = preset.shape;
  c.weight_format = Format::nvfp4;
  c.act_format = Format::nvfp4;
  c.num_ranks = 1;
  c.max_tokens_per_rank = tokens;
  return c;
}

// The oracle in kernel precision against itself in fp64: shows what the CPU path computes and
// how far fp32 accumulation with the kernels' roundings sits from double accumulation.
int run_cpu_oracle(const MoEConfig& config, std::int64_t tokens, std::uint64_t seed) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto weights = reference::random_weights(config, seed, reference::WeightInit::random_codes);
  const auto inputs = reference::random_inputs(config, tokens, {}, seed + 1);
  reference::ForwardOptions opts;
  opts.fc2_input_scale = reference::calibrate_fc2_input_scales(config, inputs, weights);
  const auto t1 = Clock::now();
  const auto out = reference::moe_forward(config, inputs, weights, opts);
  const auto t2 = Clock::now();
  opts.precision = reference::Precision::fp64;
  const auto ref64 = reference::moe_forward(config, inputs, weights, opts);
  const Accuracy acc = compare(out.out, ref64.out);
  const auto ms = [](auto a, auto b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  std::printf("CPU oracle: %s, %lld tokens, seed %llu\n", describe(config).c_str(),
              static_cast<long long>(tokens), static_cast<unsigned long long>(seed));
  std::printf("  inputs + weights: %.0f ms, forward (kernel numerics): %.0f ms\n", ms(t0, t1),
              ms(t1, t2));
  std::printf("  kernel numerics vs fp64 accumulation: cosine %.9f, rel-L2 %.3e, non-finite %lld\n",
              acc.cosine, acc.rel_l2, static_cast<long long>(acc.non_finite));
  return acc.non_finite == 0 && acc.cosine > 0.9999 ? 0 : 1;
}

}  // namespace

int cmd_demo(Args args) {
  const Options opts(args, {"preset", "tokens", "seed"}, {"cpu"});
  std::string why;
  const bool gpu = !opts.has("cpu") && cuda::driver_available(&why);
  const std::uint64_t seed = static_cast<std::uint64_t>(
      opts.get_int("seed", static_cast<std::int64_t>(std::random_device{}())));
  if (gpu) {
    const Preset& preset = find_preset(opts.get_or("preset", "dsv4-flash"), "--preset");
    const std::int64_t tokens = opts.get_int("tokens", 128);
    return run_gpu_demo(nvfp4_config(preset, tokens), tokens, seed);
  }
  std::printf("no GPU (%s): running the CPU oracle only; the fused kernels need an SM90 GPU.\n",
              opts.has("cpu") ? "--cpu given" : why.c_str());
  const Preset& preset = find_preset(opts.get_or("preset", "dsv4-flash"), "--preset");
  const std::int64_t tokens = opts.get_int("tokens", 16);
  return run_cpu_oracle(nvfp4_config(preset, tokens), tokens, seed);
}

}  // namespace megamoe::tool
