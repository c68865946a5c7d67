// Side-LoRA oracle: every gradient against central finite differences of the exact-mode
// forward, zero scale = base layer bitwise, tied A1 = A3, and rank-count independence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "megamoe/error.hpp"
#include "megamoe/reference.hpp"

namespace megamoe::reference {
namespace {

std::uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) | rd();
}

struct Problem {
  MoEConfig c;
  MoEInputs in;
  QuantizedWeights w;
  LoraWeights l;
  std::vector<float> g;  // dL/dout; L = sum(out * g)
};

Problem make_problem(Format base, ActivationSpec act, bool tied, int ranks, std::uint64_t seed,
                     std::int64_t H = 16, std::int64_t I = 8, std::int64_t E = 4, int rank = 4,
                     std::int64_t tokens_per_rank = 3) {
  Problem p;
  p.c.shape = {H, I, E, 2};
  p.c.weight_format = base;
  p.c.act_format = Format::bf16;
  p.c.activation = act;
  p.c.side_lora = true;
  p.c.lora_rank = rank;
  p.c.num_ranks = ranks;
  RoutingOptions ro;
  ro.masked_fraction = 0.2;
  p.in = random_inputs(p.c, tokens_per_rank, ro, seed);
  p.w = random_weights(p.c, seed + 1);
  p.l = random_lora(p.c, 0.75f, tied, seed + 2);
  const auto N = static_cast<std::int64_t>(p.in.topk_weights.size()) / 2;
  p.g = random_bf16(N, H, 1.0f, seed + 3);
  return p;
}

double loss(const Problem& p) {
  const MoEOutputs o = side_lora_forward(p.c, p.in, p.w, p.l, Precision::exact);
  double s = 0;
  for (std::size_t i = 0; i < o.out.size(); ++i) s += o.out[i] * p.g[i];
  return s;
}

// Central differences with a step of 2^-shift relative to the value; a step that straddles a
// clamp kink is retried with a 16x smaller one before the element is called wrong.
void check_gradient(Problem& p, std::vector<float>& param, const std::vector<double>& grad,
                    const char* name) {
  ASSERT_EQ(param.size(), grad.size()) << name;
  int bad = 0;
  for (std::size_t i = 0; i < param.size(); ++i) {
    const float orig = param[i];
    auto fd = [&](int shift) {
      const float h = std::ldexp(1.0f, std::ilogb(std::max(std::fabs(orig), 0.0625f)) - shift);
      const float hi = orig + h, lo = orig - h;
      param[i] = hi;
      const double lp = loss(p);
      param[i] = lo;
      const double lm = loss(p);
      param[i] = orig;
      return (lp - lm) / (double(hi) - double(lo));
    };
    const double tol = 1e-6 * (1.0 + std::fabs(grad[i]));
    const double d1 = fd(18);
    if (std::fabs(d1 - grad[i]) <= tol) continue;
    const double d2 = fd(22);
    if (std::fabs(d2 - grad[i]) <= tol) continue;
    if (++bad <= 5) {
      ADD_FAILURE() << name << "[" << i << "]: analytic " << grad[i] << ", finite differences "
                    << d1 << " / " << d2;
    }
  }
  EXPECT_EQ(bad, 0) << name;
}

void check_all_gradients(Problem& p) {
  const LoraGradients g = side_lora_backward(p.c, p.in, p.w, p.l, p.g, Precision::exact);
  check_gradient(p, p.in.x, g.dx, "dx");
  check_gradient(p, p.in.topk_weights, g.dtopk_weights, "dtopk_weights");
  check_gradient(p, p.l.a1, g.da1, "dA1");
  if (!p.l.tied) check_gradient(p, p.l.a3, g.da3, "dA3");
  check_gradient(p, p.l.b1, g.db1, "dB1");
  check_gradient(p, p.l.b3, g.db3, "dB3");
  check_gradient(p, p.l.a2, g.da2, "dA2");
  check_gradient(p, p.l.b2, g.db2, "dB2");
  // The router gradient of a masked route is exactly zero.
  for (std::size_t i = 0; i < p.in.topk_idx.size(); ++i) {
    if (p.in.topk_idx[i] < 0) {
      EXPECT_EQ(g.dtopk_weights[i], 0.0);
    }
  }
}

struct FdCase {
  const char* name;
  Format base;
  ActivationSpec act;
  bool tied;
};

class SideLoraGradients : public ::testing::TestWithParam<FdCase> {};

TEST_P(SideLoraGradients, MatchFiniteDifferences) {
  const FdCase fc = GetParam();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Problem p = fc.base == Format::mxfp4
                  ? make_problem(fc.base, fc.act, fc.tied, 2, seed, 32, 32, 2, 3, 2)
                  : make_problem(fc.base, fc.act, fc.tied, 2, seed);
  check_all_gradients(p);
}

INSTANTIATE_TEST_SUITE_P(
    All, SideLoraGradients,
    ::testing::Values(
        FdCase{"swiglu", Format::bf16, {ActivationKind::swiglu, 0.0f, 1.702f, 7.0f}, false},
        FdCase{"swiglu_clamp", Format::bf16, {ActivationKind::swiglu, 0.6f, 1.702f, 7.0f}, false},
        FdCase{"geglu", Format::bf16, {ActivationKind::geglu, 0.0f, 1.702f, 7.0f}, false},
        FdCase{"geglu_clamp", Format::bf16, {ActivationKind::geglu, 0.6f, 1.702f, 7.0f}, false},
        FdCase{"swiglu_oai", Format::bf16, {ActivationKind::swiglu_oai, 0.0f, 1.702f, 0.8f}, false},
        FdCase{"tied", Format::bf16, {ActivationKind::swiglu, 0.0f, 1.702f, 7.0f}, true},
        FdCase{"mxfp4_swiglu_clamp",
               Format::mxfp4,
               {ActivationKind::swiglu, 0.6f, 1.702f, 7.0f},
               false}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(SideLora, ZeroScaleIsBitwiseTheBaseLayer) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (Format base : {Format::bf16, Format::mxfp4}) {
    Problem p = make_problem(base, {}, false, 2, seed, 64, 64, 4, 8, 9);
    p.l.scale = 0.0f;
    MoEConfig plain = p.c;
    plain.side_lora = false;
    for (Precision prec : {Precision::kernel, Precision::fp64}) {
      ForwardOptions opt;
      opt.precision = prec;
      const MoEOutputs lora = side_lora_forward(p.c, p.in, p.w, p.l, prec);
      const MoEOutputs ref = moe_forward(plain, p.in, p.w, opt);
      EXPECT_EQ(lora.out, ref.out) << format_name(base);
      EXPECT_EQ(lora.out_bf16, ref.out_bf16);
    }
    p.l.scale = 1.0f;  // the adapters do reach the output
    EXPECT_NE(side_lora_forward(p.c, p.in, p.w, p.l).out_bf16,
              moe_forward(plain, p.in, p.w).out_bf16);
  }
}

void expect_same(const LoraGradients& a, const LoraGradients& b, int R) {
  EXPECT_EQ(a.dx, b.dx) << "R = " << R;
  EXPECT_EQ(a.dtopk_weights, b.dtopk_weights) << "R = " << R;
  EXPECT_EQ(a.da1, b.da1) << "R = " << R;
  EXPECT_EQ(a.da3, b.da3) << "R = " << R;
  EXPECT_EQ(a.db1, b.db1) << "R = " << R;
  EXPECT_EQ(a.db3, b.db3) << "R = " << R;
  EXPECT_EQ(a.da2, b.da2) << "R = " << R;
  EXPECT_EQ(a.db2, b.db2) << "R = " << R;
}

TEST(SideLora, IdenticalForAnyRankCount) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (Format base : {Format::bf16, Format::mxfp4}) {
    Problem p = make_problem(base, {ActivationKind::geglu, 1.0f, 1.702f, 7.0f}, false, 1, seed, 64,
                             64, 8, 8, 16);
    const MoEOutputs f1 = side_lora_forward(p.c, p.in, p.w, p.l);
    const LoraGradients g1 = side_lora_backward(p.c, p.in, p.w, p.l, p.g);
    const LoraGradients e1 = side_lora_backward(p.c, p.in, p.w, p.l, p.g, Precision::fp64);
    for (int R : {2, 4}) {
      MoEConfig c = p.c;
      c.num_ranks = R;
      EXPECT_EQ(side_lora_forward(c, p.in, p.w, p.l).out_bf16, f1.out_bf16) << "R = " << R;
      expect_same(side_lora_backward(c, p.in, p.w, p.l, p.g), g1, R);
      expect_same(side_lora_backward(c, p.in, p.w, p.l, p.g, Precision::fp64), e1, R);
    }
  }
}

double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  return ab / std::sqrt(aa * bb);
}

TEST(SideLora, KernelModeTracksExactMode) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Problem p = make_problem(Format::mxfp4, {}, false, 2, seed, 128, 64, 4, 16, 16);
  const MoEOutputs fk = side_lora_forward(p.c, p.in, p.w, p.l);
  const MoEOutputs fe = side_lora_forward(p.c, p.in, p.w, p.l, Precision::exact);
  EXPECT_GT(cosine(fk.out, fe.out), 0.9999);
  const LoraGradients k = side_lora_backward(p.c, p.in, p.w, p.l, p.g);
  const LoraGradients e = side_lora_backward(p.c, p.in, p.w, p.l, p.g, Precision::exact);
  EXPECT_GT(cosine(k.dx, e.dx), 0.9999);
  EXPECT_GT(cosine(k.dtopk_weights, e.dtopk_weights), 0.9999);
  EXPECT_GT(cosine(k.da1, e.da1), 0.9999);
  EXPECT_GT(cosine(k.da3, e.da3), 0.9999);
  EXPECT_GT(cosine(k.db1, e.db1), 0.9999);
  EXPECT_GT(cosine(k.db3, e.db3), 0.9999);
  EXPECT_GT(cosine(k.da2, e.da2), 0.9999);
  EXPECT_GT(cosine(k.db2, e.db2), 0.9999);
}

TEST(SideLora, TiedEqualsUntiedWithEqualFactors) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Problem p = make_problem(Format::bf16, {}, true, 2, seed, 64, 32, 4, 8, 5);
  Problem u = p;
  u.l.tied = false;
  u.l.a3 = u.l.a1;
  EXPECT_EQ(side_lora_forward(p.c, p.in, p.w, p.l).out_bf16,
            side_lora_forward(u.c, u.in, u.w, u.l).out_bf16);
  const LoraGradients gt = side_lora_backward(p.c, p.in, p.w, p.l, p.g, Precision::fp64);
  const LoraGradients gu = side_lora_backward(u.c, u.in, u.w, u.l, u.g, Precision::fp64);
  EXPECT_TRUE(gt.da3.empty());
  ASSERT_EQ(gt.da1.size(), gu.da1.size());
  for (std::size_t i = 0; i < gt.da1.size(); ++i) {
    EXPECT_NEAR(gt.da1[i], gu.da1[i] + gu.da3[i], 1e-12 * (1 + std::fabs(gt.da1[i])));
  }
  EXPECT_EQ(gt.db1, gu.db1);
  EXPECT_EQ(gt.db2, gu.db2);
}

template <class F>
void expect_invalid(const char* argument, F&& f) {
  try {
    f();
    ADD_FAILURE() << "no error for " << argument;
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
  }
}

TEST(SideLora, RejectsBadArguments) {
  const std::uint64_t seed = fresh_seed();
  Problem p = make_problem(Format::bf16, {}, false, 1, seed, 32, 32, 2, 4, 2);
  MoEConfig c = p.c;
  c.act_format = Format::fp8;
  expect_invalid("config.act_format", [&] { side_lora_forward(c, p.in, p.w, p.l); });
  c = p.c;
  c.side_lora = false;
  expect_invalid("config.side_lora", [&] { side_lora_forward(c, p.in, p.w, p.l); });
  c = p.c;
  c.weight_format = Format::nvfp4;
  expect_invalid("config.weight_format", [&] { side_lora_forward(c, p.in, p.w, p.l); });
  LoraWeights l = p.l;
  l.b2.pop_back();
  expect_invalid("lora.b2", [&] { side_lora_forward(p.c, p.in, p.w, l); });
  l = p.l;
  l.tied = true;
  expect_invalid("lora.a3", [&] { side_lora_forward(p.c, p.in, p.w, l); });
  std::vector<float> short_dout(p.g.begin(), p.g.end() - 1);
  expect_invalid("dout", [&] { side_lora_backward(p.c, p.in, p.w, p.l, short_dout); });
}

}  // namespace
}  // namespace megamoe::reference
