// The oracle must check production-sized layers on a small CI machine: a dsv4-flash NVFP4
// layer (H=4096, I=2048, E=256, K=6) with 256 tokens in well under 30 s.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

#include "megamoe/presets.hpp"
#include "megamoe/reference.hpp"

namespace megamoe::reference {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ReferencePerf, Dsv4FlashNvfp4With256Tokens) {
  std::random_device rd;
  const std::uint64_t seed = rd();
  SCOPED_TRACE("seed " + std::to_string(seed));
  MoEConfig c;
  c.shape = find_preset("dsv4-flash").shape;
  ASSERT_EQ(c.shape.hidden, 4096);
  c.weight_format = Format::nvfp4;
  c.act_format = Format::nvfp4;
  c.num_ranks = 4;
  RoutingOptions ro;
  ro.masked_fraction = 0.2;
  auto t0 = std::chrono::steady_clock::now();
  const QuantizedWeights w = random_weights(c, seed, WeightInit::random_codes);
  const MoEInputs in = random_inputs(c, 64, ro, seed);
  std::printf("[ perf ] generated %.1f GB of weights in %.2f s\n",
              double(w.w13.packed.size() + w.w2.packed.size()) * 1.125 / 1e9, seconds_since(t0));
  ForwardOptions opt;
  // |a| is O(0.1..1) for these weights; a fixed scale keeps the timing to one forward pass.
  opt.fc2_input_scale.assign(static_cast<std::size_t>(c.shape.num_experts), 1.0f / 2688.0f);
  t0 = std::chrono::steady_clock::now();
  const MoEOutputs o = moe_forward(c, in, w, opt);
  const double t = seconds_since(t0);
  std::printf("[ perf ] dsv4-flash nvfp4, 256 tokens, R = 4: moe_forward %.2f s on %u threads\n", t,
              std::thread::hardware_concurrency());
  double energy = 0;
  for (double v : o.out) {
    ASSERT_TRUE(std::isfinite(v));
    energy += v * v;
  }
  EXPECT_GT(energy, 0.0);
  EXPECT_LT(t, 30.0);
}

}  // namespace
}  // namespace megamoe::reference
