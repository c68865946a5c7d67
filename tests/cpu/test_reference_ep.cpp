// Expert parallelism in the oracle: the same tokens split over R = 1, 2, 4, 8 simulated ranks
// (evenly or not) give bitwise the same output.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "megamoe/reference.hpp"

namespace megamoe::reference {
namespace {

std::uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) | rd();
}

struct EpCase {
  Format w, a;
  Fp8ScaleKind fp8;
  bool fp8_combine;
  RoutingSkew skew;
};

class ReferenceEp : public ::testing::TestWithParam<EpCase> {};

TEST_P(ReferenceEp, BitwiseIdenticalForAnyRankCount) {
  const EpCase p = GetParam();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  MoEConfig c;
  c.shape = {256, 128, 16, 4};
  c.weight_format = p.w;
  c.act_format = p.a;
  c.fp8_scale = p.fp8;
  c.fp8_combine = p.fp8_combine;
  RoutingOptions ro;
  ro.skew = p.skew;
  ro.masked_fraction = 0.2;
  MoEInputs in = random_inputs(c, 24, ro, seed);  // 24 tokens (R = 1)
  in.topk_idx[3] = 99;                            // one invalid id
  const QuantizedWeights w = random_weights(c, seed + 7);
  ForwardOptions kernel, fp64;
  fp64.precision = Precision::fp64;
  if (p.a == Format::nvfp4) {
    kernel.fc2_input_scale = calibrate_fc2_input_scales(c, in, w);
    fp64.fc2_input_scale = kernel.fc2_input_scale;
  }
  const MoEOutputs k1 = moe_forward(c, in, w, kernel);
  const MoEOutputs d1 = moe_forward(c, in, w, fp64);
  EXPECT_EQ(k1.invalid_routes, 1);
  for (int R : {2, 4, 8}) {
    MoEConfig cr = c;
    cr.num_ranks = R;
    const MoEOutputs kr = moe_forward(cr, in, w, kernel);
    EXPECT_EQ(kr.out_bf16, k1.out_bf16) << "R = " << R;
    EXPECT_EQ(kr.invalid_routes, 1);
    EXPECT_EQ(moe_forward(cr, in, w, fp64).out, d1.out) << "R = " << R;
  }
  // Uneven split, including an empty rank.
  MoEConfig c4 = c;
  c4.num_ranks = 4;
  MoEInputs uneven = in;
  uneven.rank_tokens = {5, 0, 12, 7};
  EXPECT_EQ(moe_forward(c4, uneven, w, kernel).out_bf16, k1.out_bf16);
}

INSTANTIATE_TEST_SUITE_P(
    All, ReferenceEp,
    ::testing::Values(
        EpCase{Format::nvfp4, Format::nvfp4, Fp8ScaleKind::f32, false, RoutingSkew::uniform},
        EpCase{Format::nvfp4, Format::nvfp4, Fp8ScaleKind::f32, true, RoutingSkew::zipf},
        EpCase{Format::mxfp4, Format::mxfp4, Fp8ScaleKind::f32, false, RoutingSkew::zipf},
        EpCase{Format::mxfp4, Format::bf16, Fp8ScaleKind::f32, false, RoutingSkew::uniform},
        EpCase{Format::fp8, Format::fp8, Fp8ScaleKind::ue8m0, false, RoutingSkew::zipf},
        EpCase{Format::bf16, Format::bf16, Fp8ScaleKind::f32, true, RoutingSkew::uniform}));

}  // namespace
}  // namespace megamoe::reference
