// Input generators: reproducible from the seed, and the routing / value statistics they claim.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
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

MoEConfig config(Format w) {
  MoEConfig c;
  c.shape = {128, 128, 32, 6};
  c.weight_format = w;
  c.act_format = Format::bf16;
  return c;
}

TEST(ReferenceGenerators, ReproducibleFromTheSeed) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const MoEConfig c = config(Format::nvfp4);
  RoutingOptions ro;
  ro.skew = RoutingSkew::zipf;
  ro.masked_fraction = 0.2;
  const MoEInputs a = random_inputs(c, 50, ro, seed), b = random_inputs(c, 50, ro, seed);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.topk_idx, b.topk_idx);
  EXPECT_EQ(a.topk_weights, b.topk_weights);
  EXPECT_NE(random_inputs(c, 50, ro, seed + 1).x, a.x);
  for (WeightInit init : {WeightInit::gaussian, WeightInit::random_codes}) {
    const QuantizedWeights w1 = random_weights(c, seed, init), w2 = random_weights(c, seed, init);
    EXPECT_EQ(w1.w13.packed, w2.w13.packed);
    EXPECT_EQ(w1.w13.scales, w2.w13.scales);
    EXPECT_EQ(w1.w2.global_scales, w2.w2.global_scales);
  }
  const LoraWeights l1 = random_lora(c, 1.0f, false, seed), l2 = random_lora(c, 1.0f, false, seed);
  EXPECT_EQ(l1.b2, l2.b2);
  EXPECT_EQ(l1.a3.size(), l1.a1.size());
  EXPECT_TRUE(random_lora(c, 1.0f, true, seed).a3.empty());
}

TEST(ReferenceGenerators, RoutingIsDistinctSoftmaxAndMasked) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const MoEConfig c = config(Format::bf16);
  const int K = c.shape.top_k;
  for (RoutingSkew skew : {RoutingSkew::uniform, RoutingSkew::zipf, RoutingSkew::zipf_by_id}) {
    RoutingOptions ro;
    ro.skew = skew;
    ro.masked_fraction = 0.2;
    MoEInputs in;
    const std::int64_t N = 4000;
    random_routing(c, N, ro, seed, in);
    std::int64_t masked = 0;
    std::vector<std::int64_t> load(32, 0);
    for (std::int64_t t = 0; t < N; ++t) {
      std::set<std::int64_t> seen;
      double sum = 0;
      for (int k = 0; k < K; ++k) {
        const std::int64_t e = in.topk_idx[t * K + k];
        const float w = in.topk_weights[t * K + k];
        EXPECT_GT(w, 0.0f);
        sum += w;
        if (e == -1) {
          ++masked;
          continue;
        }
        ASSERT_GE(e, 0);
        ASSERT_LT(e, 32);
        EXPECT_TRUE(seen.insert(e).second) << "expert repeated in token " << t;
        ++load[e];
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);  // softmax over the k routes (before masking)
    }
    EXPECT_NEAR(double(masked) / double(N * K), 0.2, 0.02);
    if (skew == RoutingSkew::zipf_by_id) {
      // In expert order: the first half of the experts takes most of the routes, and expert 0
      // (popularity 1) more than expert 31 (1 / 32^1.2 = 0.016) by far.
      std::int64_t first_half = 0, all = 0;
      for (int e = 0; e < 32; ++e) (e < 16 ? first_half : all) += load[e];
      all += first_half;
      EXPECT_GT(double(first_half) / double(all), 0.7);
      EXPECT_GT(load[0], 5 * std::max<std::int64_t>(load[31], 1));
    }
    std::sort(load.begin(), load.end());
    const double ratio = double(load.back()) / double(std::max<std::int64_t>(load.front(), 1));
    if (skew == RoutingSkew::uniform) {
      EXPECT_LT(ratio, 1.5);
    } else {
      EXPECT_GT(ratio, 5.0);  // Zipf(1.2): the hottest expert gets far more than the coldest
    }
  }
}

TEST(ReferenceGenerators, ValuesAreBf16WithTheRequestedSpread) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<float> v = random_bf16(100, 100, 2.0f, seed);
  double ss = 0;
  for (float x : v) {
    ASSERT_EQ(x, formats::round_to_bf16(x));
    ss += double(x) * x;
  }
  EXPECT_NEAR(std::sqrt(ss / double(v.size())), 2.0, 0.1);
  // Weights of every format and init have an element spread of about 1/sqrt(cols).
  for (Format f : {Format::nvfp4, Format::mxfp4, Format::fp8, Format::bf16}) {
    for (WeightInit init : {WeightInit::gaussian, WeightInit::random_codes}) {
      const QuantizedWeights w = random_weights(config(f), seed, init);
      const std::vector<float> d = dequantize_expert(w.w13, 3);
      double s2 = 0;
      for (float x : d) s2 += double(x) * x;
      const double rms = std::sqrt(s2 / double(d.size())) * std::sqrt(128.0);
      EXPECT_GT(rms, 0.5) << format_name(f) << " init " << int(init);
      EXPECT_LT(rms, 2.0) << format_name(f) << " init " << int(init);
    }
  }
}

TEST(ReferenceGenerators, RejectsBadOptions) {
  MoEConfig c = config(Format::bf16);
  MoEInputs in;
  RoutingOptions ro;
  ro.masked_fraction = 1.5;
  EXPECT_THROW(random_routing(c, 4, ro, 1, in), InvalidArgument);
  c.shape.top_k = 40;
  EXPECT_THROW(random_routing(c, 4, {}, 1, in), InvalidArgument);
}

// Ragged batches: rank r keeps its first counts[r] tokens of the uniform draw, in rank order, and
// the oracle sees every rank's count.
TEST(ReferenceGenerators, FirstTokensOfEachRank) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  MoEConfig c = config(Format::nvfp4);
  c.num_ranks = 4;
  const std::int64_t per = 9, h = c.shape.hidden, k = c.shape.top_k;
  const MoEInputs full = random_inputs(c, per, {}, seed);
  const std::vector<std::int64_t> counts = {0, 9, 1, 4};
  const MoEInputs got = first_tokens_of_each_rank(c, full, per, counts);
  EXPECT_EQ(got.rank_tokens, counts);
  ASSERT_EQ(got.x.size(), static_cast<std::size_t>(14 * h));
  ASSERT_EQ(got.topk_idx.size(), static_cast<std::size_t>(14 * k));
  std::int64_t row = 0;
  for (std::int64_t r = 0; r < c.num_ranks; ++r) {
    for (std::int64_t t = 0; t < counts[static_cast<std::size_t>(r)]; ++t, ++row) {
      const std::int64_t src = r * per + t;
      EXPECT_TRUE(std::equal(got.x.begin() + row * h, got.x.begin() + (row + 1) * h,
                             full.x.begin() + src * h));
      EXPECT_TRUE(std::equal(got.topk_idx.begin() + row * k, got.topk_idx.begin() + (row + 1) * k,
                             full.topk_idx.begin() + src * k));
      EXPECT_EQ(got.topk_weights[static_cast<std::size_t>(row * k)],
                full.topk_weights[static_cast<std::size_t>(src * k)]);
    }
  }
  EXPECT_THROW(first_tokens_of_each_rank(c, full, per, std::vector<std::int64_t>{1, 2}),
               InvalidArgument);
  EXPECT_THROW(first_tokens_of_each_rank(c, full, per, std::vector<std::int64_t>{0, 10, 0, 0}),
               InvalidArgument);
  EXPECT_THROW(first_tokens_of_each_rank(c, full, per + 1, counts), InvalidArgument);
}

// The numbers of a JSON array "key": [ ... ] in `json`, as doubles.
std::vector<double> json_array(const std::string& json, const std::string& key) {
  const std::size_t at = json.find("\"" + key + "\": [");
  EXPECT_NE(at, std::string::npos) << key;
  std::vector<double> out;
  const char* p = json.c_str() + json.find('[', at) + 1;
  while (*p != ']') {
    char* end = nullptr;
    out.push_back(std::strtod(p, &end));
    EXPECT_NE(end, p) << "not a number at " << p;
    p = end;
    while (*p == ',' || *p == ' ') ++p;
  }
  return out;
}

TEST(ReferenceGenerators, RoutingJsonReadsBackExactly) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const MoEConfig c = config(Format::nvfp4);
  RoutingOptions ro;
  ro.masked_fraction = 0.2;
  MoEInputs in;
  random_routing(c, 37, ro, seed, in);
  const std::string json = routing_json(in, c.shape.top_k);
  EXPECT_EQ(json.rfind("{\"tokens\": 37, \"top_k\": 6, \"topk_idx\": [", 0), 0u)
      << json.substr(0, 60);
  const std::vector<double> ids = json_array(json, "topk_idx");
  const std::vector<double> weights = json_array(json, "topk_weights");
  ASSERT_EQ(ids.size(), in.topk_idx.size());
  ASSERT_EQ(weights.size(), in.topk_weights.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(static_cast<std::int64_t>(ids[i]), in.topk_idx[i]) << i;
    EXPECT_EQ(static_cast<float>(weights[i]), in.topk_weights[i]) << i;  // 9 digits: exact
  }
}

TEST(ReferenceGenerators, RoutingJsonRefusesRaggedRoutes) {
  MoEInputs in;
  in.topk_idx = {1, 2, 3, 4, 5};
  in.topk_weights = {0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
  EXPECT_THROW(routing_json(in, 2), InvalidArgument);  // 5 routes are not N x 2
  in.topk_weights.pop_back();
  EXPECT_THROW(routing_json(in, 5), InvalidArgument);  // 5 ids, 4 weights
  EXPECT_THROW(routing_json(in, 0), InvalidArgument);
}

}  // namespace
}  // namespace megamoe::reference
