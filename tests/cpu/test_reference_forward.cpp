// The forward oracle against hand-worked values and an independent naive implementation of
// docs/reference.md written straight from the formats API.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"
#include "megamoe/reference.hpp"

namespace megamoe::reference {
namespace {

std::uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) | rd();
}

MoEConfig small_config(Format w, Format a, std::int64_t H, std::int64_t I, std::int64_t E, int K) {
  MoEConfig c;
  c.shape = {H, I, E, K};
  c.weight_format = w;
  c.act_format = a;
  return c;
}

// ---- an independent, deliberately naive implementation (double, fp64 semantics) -------------

double act_naive(const ActivationSpec& s, double g, double u) {
  if (s.kind == ActivationKind::swiglu_oai) {
    g = std::min(g, static_cast<double>(s.oai_limit));
    u = std::max(std::min(u, static_cast<double>(s.oai_limit)), -static_cast<double>(s.oai_limit));
    return (u + 1.0) * g / (1.0 + std::exp(-static_cast<double>(s.oai_alpha) * g));
  }
  if (s.clamp > 0) {
    g = std::min(g, static_cast<double>(s.clamp));
    u = std::max(std::min(u, static_cast<double>(s.clamp)), -static_cast<double>(s.clamp));
  }
  if (s.kind == ActivationKind::swiglu) return g / (1.0 + std::exp(-g)) * u;
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g))) * u;
}

// Dequantized row of an activation, without the nvfp4 global scale, which is returned.
float quant_row_naive(const MoEConfig& c, std::vector<float> row, float nvfp4_global,
                      std::vector<float>& out) {
  const auto n = static_cast<std::int64_t>(row.size());
  out.assign(row.size(), 0.0f);
  const float one = 1.0f;
  switch (c.act_format) {
    case Format::bf16:
      for (std::size_t i = 0; i < row.size(); ++i) out[i] = formats::round_to_bf16(row[i]);
      return 1.0f;
    case Format::nvfp4: {
      std::vector<std::uint8_t> q(row.size() / 2), s(row.size() / 16);
      float g = nvfp4_global;
      if (g > 0) {
        formats::quantize_nvfp4(row, 1, n, g, q, s);
      } else {
        formats::quantize_nvfp4_per_row(row, 1, n, q, s, std::span<float>(&g, 1));
      }
      formats::dequantize_nvfp4(q, s, std::span<const float>(&one, 1), 1, n, out);
      return g;
    }
    case Format::mxfp4: {
      std::vector<std::uint8_t> q(row.size() / 2), s(row.size() / 32);
      formats::quantize_mxfp4(row, 1, n, q, s);
      formats::dequantize_mxfp4(q, s, 1, n, out);
      return 1.0f;
    }
    case Format::fp8: {
      std::vector<std::uint8_t> q(row.size()), su(row.size() / 128);
      std::vector<float> sf(row.size() / 128);
      formats::quantize_fp8_1x128(row, 1, n, c.fp8_scale, q, sf, su);
      formats::dequantize_fp8(q, 1, n, 1, c.fp8_scale, sf, su, out);
      return 1.0f;
    }
  }
  return 1.0f;
}

// Expert e of m through the formats API (nvfp4 without its global scale).
std::vector<float> dequant_naive(const QuantizedMatrix& m, std::int64_t e) {
  const std::size_t n = static_cast<std::size_t>(m.rows * m.cols);
  std::vector<float> out(n);
  const float one = 1.0f;
  switch (m.format) {
    case Format::nvfp4:
      formats::dequantize_nvfp4(std::span(m.packed).subspan(e * n / 2, n / 2),
                                std::span(m.scales).subspan(e * n / 16, n / 16),
                                std::span<const float>(&one, 1), m.rows, m.cols, out);
      break;
    case Format::mxfp4:
      formats::dequantize_mxfp4(std::span(m.packed).subspan(e * n / 2, n / 2),
                                std::span(m.scales).subspan(e * n / 32, n / 32), m.rows, m.cols,
                                out);
      break;
    case Format::fp8: {
      const std::size_t ns = static_cast<std::size_t>((m.rows + 127) / 128 * (m.cols / 128));
      const std::span<const float> sf = m.fp8_scale == Fp8ScaleKind::f32
                                            ? std::span(m.scales_f32).subspan(e * ns, ns)
                                            : std::span<const float>();
      const std::span<const std::uint8_t> su = m.fp8_scale == Fp8ScaleKind::ue8m0
                                                   ? std::span(m.scales).subspan(e * ns, ns)
                                                   : std::span<const std::uint8_t>();
      formats::dequantize_fp8(std::span(m.packed).subspan(e * n, n), m.rows, m.cols, 128,
                              m.fp8_scale, sf, su, out);
      break;
    }
    case Format::bf16:
      for (std::size_t i = 0; i < n; ++i) out[i] = formats::bf16_to_float(m.bf16[e * n + i]);
      break;
  }
  return out;
}

std::vector<double> naive_forward(const MoEConfig& c, const MoEInputs& in,
                                  const QuantizedWeights& w, const std::vector<float>& fc2,
                                  std::vector<float>* amax = nullptr) {
  const std::int64_t H = c.shape.hidden, I = c.shape.intermediate, E = c.shape.num_experts;
  const int K = c.shape.top_k;
  const auto N = static_cast<std::int64_t>(in.topk_idx.size()) / K;
  std::vector<double> out(static_cast<std::size_t>(N * H), 0.0);
  std::vector<std::vector<float>> w13(E), w2(E);
  for (std::int64_t e = 0; e < E; ++e)
    w13[e] = dequant_naive(w.w13, e), w2[e] = dequant_naive(w.w2, e);
  for (std::int64_t n = 0; n < N; ++n) {
    std::vector<float> row(in.x.begin() + n * H, in.x.begin() + (n + 1) * H), xq;
    for (float& v : row) v = formats::round_to_bf16(v);
    const double gx = quant_row_naive(c, row, 0.0f, xq);
    for (int k = 0; k < K; ++k) {
      const std::int64_t e = in.topk_idx[n * K + k];
      if (e < 0 || e >= E) continue;
      const double g13 = w.w13.format == Format::nvfp4 ? w.w13.global_scales[e] : 1.0;
      const double g2 = w.w2.format == Format::nvfp4 ? w.w2.global_scales[e] : 1.0;
      std::vector<float> a(static_cast<std::size_t>(I));
      for (std::int64_t i = 0; i < I; ++i) {
        double gate = 0, up = 0;
        for (std::int64_t h = 0; h < H; ++h) {
          gate += double(xq[h]) * w13[e][i * H + h];
          up += double(xq[h]) * w13[e][(I + i) * H + h];
        }
        gate *= gx * g13;
        up *= gx * g13;
        a[i] = static_cast<float>(in.topk_weights[n * K + k] * act_naive(c.activation, gate, up));
        if (amax) (*amax)[e] = std::max((*amax)[e], std::fabs(a[i]));
      }
      std::vector<float> aq;
      const double ga = quant_row_naive(c, a, c.act_format == Format::nvfp4 ? fc2[e] : 0.0f, aq);
      for (std::int64_t h = 0; h < H; ++h) {
        double y = 0;
        for (std::int64_t i = 0; i < I; ++i) y += double(aq[i]) * w2[e][h * I + i];
        out[n * H + h] += y * ga * g2;
      }
    }
  }
  return out;
}

double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
  return std::sqrt(num / std::max(den, 1e-300));
}

// ---- tests ------------------------------------------------------------------------------------

// Worked by hand (docs/reference.md has the steps): x = [1, 2], two bf16 experts, swiglu.
TEST(ReferenceForward, HandWorkedBf16) {
  MoEConfig c = small_config(Format::bf16, Format::bf16, 2, 1, 2, 2);
  MoEInputs in;
  in.x = {1.0f, 2.0f};
  in.topk_idx = {0, 1};
  in.topk_weights = {0.5f, 0.25f};
  std::vector<float> w13 = {1, 0, 0, 1,   // expert 0: gate = 1, up = 2
                            0, 1, 1, 1};  // expert 1: gate = 2, up = 3
  std::vector<float> w2 = {1, -2, 2, 1};  // expert 0: [1; -2], expert 1: [2; 1]
  QuantizedWeights w{quantize_matrix(Format::bf16, Fp8ScaleKind::f32, 2, 2, 2, w13),
                     quantize_matrix(Format::bf16, Fp8ScaleKind::f32, 2, 2, 1, w2)};
  // a0 = 0.5 * silu(1) * 2 = 0.73106 -> bf16 0.73046875; a1 = 0.25 * silu(2) * 3 = 1.32120
  // -> bf16 1.3203125. y0 = [0.73046875, -1.4609375], y1 = [2.640625, 1.3203125].
  // out = [3.37109375 -> bf16 3.375, -0.140625].
  const MoEOutputs o = moe_forward(c, in, w);
  ASSERT_EQ(o.out.size(), 2u);
  EXPECT_EQ(o.out[0], 3.375);
  EXPECT_EQ(o.out[1], -0.140625);
  EXPECT_EQ(o.out_bf16[0], formats::bf16_from_float(3.375f));
  EXPECT_EQ(o.invalid_routes, 0);
  // Exact mode keeps everything: 0.5*silu(1)*2*[1,-2] + 0.25*silu(2)*3*[2,1].
  ForwardOptions ex;
  ex.precision = Precision::exact;
  const MoEOutputs e = moe_forward(c, in, w, ex);
  const double s1 = 1.0 / (1.0 + std::exp(-1.0)), s2 = 2.0 / (1.0 + std::exp(-2.0));
  EXPECT_NEAR(e.out[0], s1 * 1.0 + 0.75 * s2 * 2.0, 1e-12);
  EXPECT_NEAR(e.out[1], -2.0 * s1 + 0.75 * s2, 1e-12);
  EXPECT_TRUE(e.out_bf16.empty());
}

struct FormatCase {
  Format w, a;
  Fp8ScaleKind fp8;
  ActivationSpec act;
};

class ReferenceFormats : public ::testing::TestWithParam<FormatCase> {};

TEST_P(ReferenceFormats, MatchesNaiveImplementation) {
  const FormatCase fc = GetParam();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  MoEConfig c = small_config(fc.w, fc.a, 256, 128, 6, 3);
  c.fp8_scale = fc.fp8;
  c.activation = fc.act;
  c.num_ranks = 2;
  RoutingOptions ro;
  ro.masked_fraction = 0.2;
  MoEInputs in = random_inputs(c, 7, ro, seed);
  in.x[5] *= 40.0f;  // an outlier: per-token global scales and block scales must follow it
  const QuantizedWeights w = random_weights(c, seed + 1);
  ForwardOptions opt;
  if (fc.a == Format::nvfp4) opt.fc2_input_scale = calibrate_fc2_input_scales(c, in, w);
  const std::vector<double> ref = naive_forward(c, in, w, opt.fc2_input_scale);

  opt.precision = Precision::fp64;
  const MoEOutputs f64 = moe_forward(c, in, w, opt);
  EXPECT_LT(rel_l2(f64.out, ref), 1e-9);

  opt.precision = Precision::kernel;
  const MoEOutputs k = moe_forward(c, in, w, opt);
  EXPECT_LT(rel_l2(k.out, ref), 2e-2);
  for (std::size_t i = 0; i < k.out.size(); ++i) {
    ASSERT_EQ(k.out[i], double(formats::bf16_to_float(k.out_bf16[i])));
  }
  // Deterministic across calls (thread scheduling must not matter).
  const MoEOutputs k2 = moe_forward(c, in, w, opt);
  EXPECT_EQ(k.out_bf16, k2.out_bf16);
}

INSTANTIATE_TEST_SUITE_P(
    All, ReferenceFormats,
    ::testing::Values(FormatCase{Format::nvfp4, Format::nvfp4, Fp8ScaleKind::f32, {}},
                      FormatCase{Format::mxfp4, Format::mxfp4, Fp8ScaleKind::f32, {}},
                      FormatCase{Format::mxfp4, Format::fp8, Fp8ScaleKind::ue8m0, {}},
                      FormatCase{Format::mxfp4, Format::bf16, Fp8ScaleKind::f32, {}},
                      FormatCase{Format::fp8, Format::fp8, Fp8ScaleKind::f32, {}},
                      FormatCase{Format::fp8, Format::fp8, Fp8ScaleKind::ue8m0, {}},
                      FormatCase{Format::bf16, Format::bf16, Fp8ScaleKind::f32, {}},
                      FormatCase{Format::bf16,
                                 Format::bf16,
                                 Fp8ScaleKind::f32,
                                 {ActivationKind::swiglu, 0.5f, 1.702f, 7.0f}},
                      FormatCase{Format::nvfp4,
                                 Format::nvfp4,
                                 Fp8ScaleKind::f32,
                                 {ActivationKind::geglu, 0.0f, 1.702f, 7.0f}},
                      FormatCase{Format::mxfp4,
                                 Format::mxfp4,
                                 Fp8ScaleKind::f32,
                                 {ActivationKind::swiglu_oai, 0.0f, 1.702f, 0.6f}}));

TEST(ReferenceForward, DecodeMatchesFormats) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // 200 rows: the last fp8 128x128 row block is partial.
  const std::vector<float> values = random_bf16(3 * 200, 256, 0.3f, seed);
  for (Format f : {Format::nvfp4, Format::mxfp4, Format::fp8, Format::bf16}) {
    for (Fp8ScaleKind kind : {Fp8ScaleKind::f32, Fp8ScaleKind::ue8m0}) {
      const QuantizedMatrix m = quantize_matrix(f, kind, 3, 200, 256, values);
      for (std::int64_t e = 0; e < 3; ++e) {
        const std::vector<float> mine = dequantize_expert(m, e);
        std::vector<float> theirs = dequant_naive(m, e);
        if (f == Format::nvfp4) {
          for (float& v : theirs) v *= m.global_scales[e];
        }
        ASSERT_EQ(mine, theirs) << format_name(f);
        if (f == Format::bf16) {
          ASSERT_TRUE(std::equal(mine.begin(), mine.end(), values.begin() + e * 200 * 256));
        }
      }
    }
  }
}

TEST(ReferenceForward, MaskedAndInvalidRoutes) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  MoEConfig c = small_config(Format::mxfp4, Format::mxfp4, 64, 64, 4, 2);
  MoEInputs in = random_inputs(c, 4, {}, seed);
  const QuantizedWeights w = random_weights(c, seed);
  MoEInputs bad = in, masked = in;
  bad.topk_idx[1] = 4;   // == E: out of range
  bad.topk_idx[2] = -7;  // negative, not -1
  bad.topk_idx[5] = -1;  // masked, not counted
  masked.topk_idx[1] = masked.topk_idx[2] = masked.topk_idx[5] = -1;
  const MoEOutputs ob = moe_forward(c, bad, w), om = moe_forward(c, masked, w);
  EXPECT_EQ(ob.invalid_routes, 2);
  EXPECT_EQ(om.invalid_routes, 0);
  EXPECT_EQ(ob.out_bf16, om.out_bf16);
  // Token 0 lost one route, so it must differ from the unmasked run; token 3 (all masked) is 0.
  masked.topk_idx[6] = masked.topk_idx[7] = -1;
  const MoEOutputs full = moe_forward(c, in, w), m2 = moe_forward(c, masked, w);
  bool differs = false;
  for (int h = 0; h < 64; ++h) differs |= full.out[h] != m2.out[h];
  EXPECT_TRUE(differs);
  for (int h = 0; h < 64; ++h) EXPECT_EQ(m2.out[3 * 64 + h], 0.0);
}

// With gate = 8, up = 1, w = 1 the FC2 input is bf16(silu(8)) = 8 exactly, so y = 8 * W2 is known
// exactly and the fp8 combine slot can be worked out with the formats API alone.
TEST(ReferenceForward, Fp8CombineQuantizesSlotsPerRow) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  MoEConfig c = small_config(Format::bf16, Format::bf16, 256, 1, 1, 1);
  c.fp8_combine = true;
  MoEInputs in;
  in.x.assign(256, 0.0f);
  in.x[0] = 1.0f;
  in.topk_idx = {0};
  in.topk_weights = {1.0f};
  std::vector<float> w13(2 * 256, 0.0f);
  w13[0] = 8.0f;    // gate = 8
  w13[256] = 1.0f;  // up = 1
  const std::vector<float> w2 = random_bf16(256, 1, 0.5f, seed);
  QuantizedWeights w{quantize_matrix(Format::bf16, Fp8ScaleKind::f32, 1, 2, 256, w13),
                     quantize_matrix(Format::bf16, Fp8ScaleKind::f32, 1, 256, 1, w2)};
  std::vector<float> y(256), deq(256);
  for (int h = 0; h < 256; ++h) y[h] = 8.0f * w2[h];
  std::vector<std::uint8_t> q(256), su(2);
  std::vector<float> sf(2);
  formats::quantize_fp8_1x128(y, 1, 256, Fp8ScaleKind::f32, q, sf, su);
  formats::dequantize_fp8(q, 1, 256, 1, Fp8ScaleKind::f32, sf, su, deq);
  const MoEOutputs o = moe_forward(c, in, w);
  for (int h = 0; h < 256; ++h) EXPECT_EQ(o.out[h], double(formats::round_to_bf16(deq[h]))) << h;
  c.fp8_combine = false;
  const MoEOutputs bf = moe_forward(c, in, w);
  for (int h = 0; h < 256; ++h) EXPECT_EQ(bf.out[h], double(formats::round_to_bf16(y[h])));
}

TEST(ReferenceForward, CalibratedScalesFollowAmax) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  MoEConfig c = small_config(Format::nvfp4, Format::nvfp4, 64, 64, 8, 2);
  MoEInputs in = random_inputs(c, 3, {}, seed);
  const QuantizedWeights w = random_weights(c, seed);
  const std::vector<float> s = calibrate_fc2_input_scales(c, in, w);
  std::vector<float> amax(8, 0.0f);
  naive_forward(c, in, w, std::vector<float>(8, 1.0f), &amax);
  ASSERT_EQ(s.size(), 8u);
  for (int e = 0; e < 8; ++e) {
    const bool routed = std::find(in.topk_idx.begin(), in.topk_idx.end(), e) != in.topk_idx.end();
    if (!routed) {
      EXPECT_EQ(s[e], 1.0f) << e;
    } else {
      EXPECT_NEAR(s[e], amax[e] / 2688.0f, 1e-4 * amax[e] / 2688.0f) << e;
    }
  }
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

TEST(ReferenceForward, RejectsBadArguments) {
  MoEConfig c = small_config(Format::nvfp4, Format::nvfp4, 64, 64, 4, 2);
  const std::uint64_t seed = fresh_seed();
  const MoEInputs in = random_inputs(c, 2, {}, seed);
  const QuantizedWeights w = random_weights(c, seed);
  ForwardOptions opt;
  expect_invalid("options.fc2_input_scale", [&] { moe_forward(c, in, w, opt); });
  opt.fc2_input_scale.assign(4, 0.01f);
  EXPECT_NO_THROW(moe_forward(c, in, w, opt));
  opt.fc2_input_scale[2] = -1.0f;
  expect_invalid("options.fc2_input_scale", [&] { moe_forward(c, in, w, opt); });
  opt.fc2_input_scale[2] = 0.01f;

  MoEInputs short_x = in;
  short_x.x.pop_back();
  expect_invalid("inputs.x", [&] { moe_forward(c, short_x, w, opt); });
  MoEInputs bad_split = in;
  bad_split.rank_tokens = {1, 1};
  expect_invalid("inputs.rank_tokens", [&] { moe_forward(c, bad_split, w, opt); });
  MoEConfig odd = c;
  odd.shape.hidden = 40;
  expect_invalid("config.shape.hidden", [&] { moe_forward(odd, in, w, opt); });
  MoEConfig ranks = c;
  ranks.num_ranks = 3;
  expect_invalid("config.num_ranks", [&] { moe_forward(ranks, in, w, opt); });
  MoEConfig topk = c;
  topk.shape.top_k = 5;
  expect_invalid("config.shape.top_k", [&] { moe_forward(topk, in, w, opt); });
  MoEConfig mx = c;
  mx.weight_format = Format::mxfp4;
  expect_invalid("weights.w13", [&] { moe_forward(mx, in, w, opt); });
  MoEConfig cap = c;
  cap.max_tokens_per_rank = 1;
  expect_invalid("inputs.rank_tokens", [&] { moe_forward(cap, in, w, opt); });
  MoEConfig clamp = c;
  clamp.activation.clamp = -1.0f;
  expect_invalid("config.activation.clamp", [&] { moe_forward(clamp, in, w, opt); });
  QuantizedWeights short_w = w;
  short_w.w2.scales.pop_back();
  expect_invalid("weights.w2.scales", [&] { moe_forward(c, in, short_w, opt); });
  MoEConfig lora = c;
  lora.side_lora = true;
  expect_invalid("config.side_lora", [&] { moe_forward(lora, in, w, opt); });
}

}  // namespace
}  // namespace megamoe::reference
