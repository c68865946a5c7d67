// Seeded input generators for tests, demo and bench (reference.hpp, "generators").
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <span>
#include <string>

#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"
#include "megamoe/reference.hpp"
#include "reference/dispatch_plan.hpp"
#include "reference/parallel.hpp"
#include "reference/random.hpp"

namespace megamoe::reference {
namespace {

using detail::mix_seed;
using detail::Rng;

float finite_amax(std::span<const float> v) {
  float m = 0.0f;
  for (float x : v) {
    const float a = std::fabs(x);
    if (a <= 3.4e38f) m = std::max(m, a);
  }
  return m;
}

std::size_t scale_count(const QuantizedMatrix& m) {
  switch (m.format) {
    case Format::nvfp4:
      return static_cast<std::size_t>(m.rows * m.cols / formats::kNvfp4Block);
    case Format::mxfp4:
      return static_cast<std::size_t>(m.rows * m.cols / formats::kMxfp4Block);
    case Format::fp8:
      return static_cast<std::size_t>(((m.rows + formats::kFp8Block - 1) / formats::kFp8Block) *
                                      (m.cols / formats::kFp8Block));
    case Format::bf16:
      return 0;
  }
  return 0;
}

// Sizes every buffer of m for its format and shape.
void allocate(QuantizedMatrix& m) {
  const auto n = static_cast<std::size_t>(m.experts * m.rows * m.cols);
  const std::size_t ns = scale_count(m) * static_cast<std::size_t>(m.experts);
  switch (m.format) {
    case Format::nvfp4:
      m.global_scales.assign(static_cast<std::size_t>(m.experts), 1.0f);
      [[fallthrough]];
    case Format::mxfp4:
      m.packed.assign(n / 2, 0);
      m.scales.assign(ns, 0);
      return;
    case Format::fp8:
      m.packed.assign(n, 0);
      if (m.fp8_scale == Fp8ScaleKind::f32) {
        m.scales_f32.assign(ns, 0.0f);
      } else {
        m.scales.assign(ns, 0);
      }
      return;
    case Format::bf16:
      m.bf16.assign(n, 0);
      return;
  }
}

// An empty matrix of this format and shape with every buffer sized.
QuantizedMatrix allocated_matrix(Format format, Fp8ScaleKind fp8_scale, std::int64_t experts,
                                 std::int64_t rows, std::int64_t cols) {
  QuantizedMatrix m;
  m.format = format;
  m.fp8_scale = fp8_scale;
  m.experts = experts;
  m.rows = rows;
  m.cols = cols;
  allocate(m);
  return m;
}

// Quantizes expert e's fp32 matrix into its slice of m by the recipe of m.format.
void quantize_expert(QuantizedMatrix& m, std::int64_t e, std::span<const float> w) {
  const std::int64_t rows = m.rows, cols = m.cols;
  const auto n = static_cast<std::size_t>(rows * cols);
  const std::size_t ns = scale_count(m);
  const auto ue = static_cast<std::size_t>(e);
  switch (m.format) {
    case Format::nvfp4: {
      const float g = formats::nvfp4_global_scale(finite_amax(w));
      m.global_scales[ue] = g;
      formats::quantize_nvfp4(w, rows, cols, g, std::span(m.packed).subspan(ue * n / 2, n / 2),
                              std::span(m.scales).subspan(ue * ns, ns));
      return;
    }
    case Format::mxfp4:
      formats::quantize_mxfp4(w, rows, cols, std::span(m.packed).subspan(ue * n / 2, n / 2),
                              std::span(m.scales).subspan(ue * ns, ns));
      return;
    case Format::fp8: {
      std::vector<float> sf(ns);
      std::vector<std::uint8_t> su(ns);
      formats::quantize_fp8_128x128(w, rows, cols, m.fp8_scale,
                                    std::span(m.packed).subspan(ue * n, n), sf, su);
      if (m.fp8_scale == Fp8ScaleKind::f32) {
        std::copy(sf.begin(), sf.end(),
                  m.scales_f32.begin() + static_cast<std::ptrdiff_t>(ue * ns));
      } else {
        std::copy(su.begin(), su.end(), m.scales.begin() + static_cast<std::ptrdiff_t>(ue * ns));
      }
      return;
    }
    case Format::bf16:
      for (std::size_t i = 0; i < n; ++i) m.bf16[ue * n + i] = formats::bf16_from_float(w[i]);
      return;
  }
}

// Random codes with an element spread of about `stddev`, without an fp32 detour: the fast path
// for production-sized layers. RMS of a uniformly random e2m1 code is sqrt(8.5625) ~ 2.93.
void random_codes_expert(QuantizedMatrix& m, std::int64_t e, float stddev, Rng& rng) {
  const auto n = static_cast<std::size_t>(m.rows * m.cols);
  const std::size_t ns = scale_count(m);
  const auto ue = static_cast<std::size_t>(e);
  auto fill_bytes = [&](std::uint8_t* p, std::size_t count) {
    std::size_t i = 0;
    for (; i + 8 <= count; i += 8) {
      const std::uint64_t v = rng.next();
      std::memcpy(p + i, &v, 8);
    }
    for (; i < count; ++i) p[i] = static_cast<std::uint8_t>(rng.next());
  };
  constexpr float kE2m1Rms = 2.93f;
  switch (m.format) {
    case Format::nvfp4: {
      // Block scales drawn from the ue4m3 codes in [0.75, 1.25], eight draws per random word.
      static const std::vector<std::uint8_t> codes = [] {
        std::vector<std::uint8_t> v;
        for (int b = 0; b < 128; ++b) {
          const float f = formats::ue4m3_to_float(static_cast<std::uint8_t>(b));
          if (f >= 0.75f && f <= 1.25f) v.push_back(static_cast<std::uint8_t>(b));
        }
        return v;
      }();
      m.global_scales[ue] = stddev / kE2m1Rms;
      fill_bytes(m.packed.data() + ue * n / 2, n / 2);
      std::uint8_t* sc = m.scales.data() + ue * ns;
      fill_bytes(sc, ns);
      for (std::size_t i = 0; i < ns; ++i) sc[i] = codes[sc[i] % codes.size()];
      return;
    }
    case Format::mxfp4: {
      // The power of two at or below the target, or the one above it.
      const std::uint8_t hi = formats::ue8m0_from_float_ceil(stddev / kE2m1Rms);
      fill_bytes(m.packed.data() + ue * n / 2, n / 2);
      std::uint8_t* sc = m.scales.data() + ue * ns;
      fill_bytes(sc, ns);
      for (std::size_t i = 0; i < ns; ++i) sc[i] = static_cast<std::uint8_t>(hi - (sc[i] & 1));
      return;
    }
    case Format::fp8: {
      constexpr float kSpread = 32.0f;  // codes of N(0, 32): well inside e4m3's range
      for (std::size_t i = 0; i < n; ++i) {
        m.packed[ue * n + i] = formats::e4m3_from_float(static_cast<float>(rng.normal()) * kSpread);
      }
      for (std::size_t i = 0; i < ns; ++i) {
        const float s = stddev / kSpread;
        if (m.fp8_scale == Fp8ScaleKind::f32) {
          m.scales_f32[ue * ns + i] = s;
        } else {
          m.scales[ue * ns + i] = formats::ue8m0_from_float_ceil(s);
        }
      }
      return;
    }
    case Format::bf16:
      for (std::size_t i = 0; i < n; ++i) {
        m.bf16[ue * n + i] = formats::bf16_from_float(static_cast<float>(rng.normal()) * stddev);
      }
      return;
  }
}

QuantizedMatrix random_matrix(Format format, Fp8ScaleKind fp8_scale, std::int64_t experts,
                              std::int64_t rows, std::int64_t cols, std::uint64_t seed,
                              WeightInit init) {
  QuantizedMatrix m = allocated_matrix(format, fp8_scale, experts, rows, cols);
  const float stddev = 1.0f / std::sqrt(static_cast<float>(cols));
  detail::parallel_for(experts, [&](std::int64_t e) {
    Rng rng(mix_seed(seed, static_cast<std::uint64_t>(e)));
    if (init == WeightInit::random_codes) {
      random_codes_expert(m, e, stddev, rng);
      return;
    }
    std::vector<float> w(static_cast<std::size_t>(rows * cols));
    for (float& v : w) v = static_cast<float>(rng.normal()) * stddev;
    quantize_expert(m, e, w);
  });
  return m;
}

std::vector<float> random_bf16_values(std::size_t n, double stddev, Rng& rng) {
  std::vector<float> v(n);
  for (float& x : v) x = formats::round_to_bf16(static_cast<float>(rng.normal() * stddev));
  return v;
}

}  // namespace

void random_routing(const MoEConfig& config, std::int64_t num_tokens, const RoutingOptions& options,
                    std::uint64_t seed, MoEInputs& inputs) {
  const std::int64_t E = config.shape.num_experts;
  const int K = config.shape.top_k;
  if (E <= 0 || K < 1 || K > E) {
    throw_invalid("config.shape.top_k", "must be in [1, num_experts]", std::to_string(K));
  }
  if (num_tokens < 0) throw_invalid("num_tokens", "must be >= 0", std::to_string(num_tokens));
  if (!(options.masked_fraction >= 0.0 && options.masked_fraction <= 1.0)) {
    throw_invalid("options.masked_fraction", "must be in [0, 1]",
                  std::to_string(options.masked_fraction));
  }
  const bool zipf = options.skew == RoutingSkew::zipf || options.skew == RoutingSkew::zipf_by_id;
  if (zipf && !(options.zipf_exponent >= 0.0)) {
    throw_invalid("options.zipf_exponent", "must be >= 0", std::to_string(options.zipf_exponent));
  }
  Rng rng(mix_seed(seed, 0x726F757465ull));
  // Popularity: expert perm[i] gets weight 1 / (i + 1)^s (uniform: all equal).
  std::vector<std::int64_t> perm(static_cast<std::size_t>(E));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::int64_t i = E - 1; i > 0; --i) {
    std::swap(perm[i],
              perm[static_cast<std::size_t>(rng.next() % static_cast<std::uint64_t>(i + 1))]);
  }
  if (options.skew == RoutingSkew::zipf_by_id) std::iota(perm.begin(), perm.end(), 0);
  std::vector<double> popularity(static_cast<std::size_t>(E), 1.0);
  if (zipf) {
    for (std::int64_t i = 0; i < E; ++i) {
      popularity[perm[i]] = 1.0 / std::pow(static_cast<double>(i + 1), options.zipf_exponent);
    }
  }
  inputs.topk_idx.assign(static_cast<std::size_t>(num_tokens * K), -1);
  inputs.topk_weights.assign(inputs.topk_idx.size(), 0.0f);
  std::vector<double> remaining(popularity.size());
  std::vector<double> logits(static_cast<std::size_t>(K));
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    remaining = popularity;
    double total = std::accumulate(remaining.begin(), remaining.end(), 0.0);
    for (int k = 0; k < K; ++k) {  // K distinct experts, sampled without replacement
      double u = rng.uniform() * total;
      std::int64_t pick = -1;
      for (std::int64_t e = 0; e < E; ++e) {
        if (remaining[e] <= 0.0) continue;
        pick = e;
        if (u < remaining[e]) break;
        u -= remaining[e];
      }
      total -= remaining[pick];
      remaining[pick] = 0.0;
      inputs.topk_idx[t * K + k] = pick;
    }
    double mx = -1e300, sum = 0.0;
    for (int k = 0; k < K; ++k) mx = std::max(mx, logits[k] = rng.normal());
    for (int k = 0; k < K; ++k) sum += (logits[k] = std::exp(logits[k] - mx));
    for (int k = 0; k < K; ++k) {
      inputs.topk_weights[t * K + k] = static_cast<float>(logits[k] / sum);
      if (rng.uniform() < options.masked_fraction) inputs.topk_idx[t * K + k] = -1;
    }
  }
}

std::vector<float> random_bf16(std::int64_t rows, std::int64_t cols, float stddev,
                               std::uint64_t seed) {
  if (rows < 0 || cols < 0) throw_invalid("rows, cols", "must be >= 0");
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  detail::parallel_for(rows, [&](std::int64_t r) {
    Rng rng(mix_seed(seed, static_cast<std::uint64_t>(r)));
    const auto row = random_bf16_values(static_cast<std::size_t>(cols), stddev, rng);
    std::copy(row.begin(), row.end(), out.begin() + r * cols);
  });
  return out;
}

MoEInputs random_inputs(const MoEConfig& config, std::int64_t tokens_per_rank,
                        const RoutingOptions& routing, std::uint64_t seed) {
  if (tokens_per_rank < 0) {
    throw_invalid("tokens_per_rank", "must be >= 0", std::to_string(tokens_per_rank));
  }
  MoEInputs in;
  const std::int64_t n = tokens_per_rank * config.num_ranks;
  in.x = random_bf16(n, config.shape.hidden, 1.0f, mix_seed(seed, 1));
  random_routing(config, n, routing, mix_seed(seed, 2), in);
  return in;
}

MoEInputs first_tokens_of_each_rank(const MoEConfig& config, const MoEInputs& inputs,
                                    std::int64_t tokens_per_rank,
                                    std::span<const std::int64_t> counts) {
  const std::int64_t h = config.shape.hidden, k = config.shape.top_k, per = tokens_per_rank;
  if (static_cast<std::int64_t>(counts.size()) != config.num_ranks) {
    throw_invalid("counts",
                  "must have one entry per rank (" + std::to_string(config.num_ranks) + ")",
                  std::to_string(counts.size()) + " entries");
  }
  if (static_cast<std::int64_t>(inputs.x.size()) != config.num_ranks * per * h ||
      static_cast<std::int64_t>(inputs.topk_idx.size()) != config.num_ranks * per * k ||
      inputs.topk_weights.size() != inputs.topk_idx.size()) {
    throw_invalid("inputs",
                  "must hold tokens_per_rank = " + std::to_string(per) + " tokens of every rank");
  }
  MoEInputs out;
  for (std::int64_t r = 0; r < config.num_ranks; ++r) {
    const std::int64_t t = counts[static_cast<std::size_t>(r)], from = r * per;
    if (t < 0 || t > per) {
      throw_invalid("counts",
                    "entries must be in [0, tokens_per_rank = " + std::to_string(per) + "]",
                    std::to_string(t));
    }
    auto keep = [&](const auto& src, auto& dst, std::int64_t width) {
      dst.insert(dst.end(), src.begin() + from * width, src.begin() + (from + t) * width);
    };
    keep(inputs.x, out.x, h);
    keep(inputs.topk_idx, out.topk_idx, k);
    keep(inputs.topk_weights, out.topk_weights, k);
    out.rank_tokens.push_back(t);
  }
  return out;
}

QuantizedMatrix quantize_matrix(Format format, Fp8ScaleKind fp8_scale, std::int64_t experts,
                                std::int64_t rows, std::int64_t cols, std::span<const float> w) {
  if (experts < 1 || rows < 1 || cols < 1) {
    throw_invalid("experts, rows, cols", "must be >= 1");
  }
  if (static_cast<std::int64_t>(w.size()) != experts * rows * cols) {
    throw_invalid("w", "must hold experts * rows * cols elements", std::to_string(w.size()));
  }
  QuantizedMatrix m = allocated_matrix(format, fp8_scale, experts, rows, cols);
  const auto n = static_cast<std::size_t>(rows * cols);
  detail::parallel_for(experts, [&](std::int64_t e) {
    quantize_expert(m, e, w.subspan(static_cast<std::size_t>(e) * n, n));
  });
  return m;
}

QuantizedWeights random_weights(const MoEConfig& config, std::uint64_t seed, WeightInit init) {
  detail::validate_config(config);
  const MoEShape& s = config.shape;
  QuantizedWeights w;
  w.w13 = random_matrix(config.weight_format, config.fp8_scale, s.num_experts, 2 * s.intermediate,
                        s.hidden, mix_seed(seed, 13), init);
  w.w2 = random_matrix(config.weight_format, config.fp8_scale, s.num_experts, s.hidden,
                       s.intermediate, mix_seed(seed, 2), init);
  return w;
}

LoraWeights random_lora(const MoEConfig& config, float scale, bool tied, std::uint64_t seed) {
  const std::int64_t H = config.shape.hidden, I = config.shape.intermediate;
  const std::int64_t E = config.shape.num_experts, r = config.lora_rank;
  if (r < 1) throw_invalid("config.lora_rank", "must be >= 1", std::to_string(r));
  LoraWeights l;
  l.scale = scale;
  l.tied = tied;
  auto gen = [&](std::int64_t rows, std::int64_t cols, std::int64_t fan_in, std::uint64_t tag) {
    return random_bf16(rows, cols, 1.0f / std::sqrt(static_cast<float>(fan_in)),
                       mix_seed(seed, tag));
  };
  l.a1 = gen(H, r, H, 1);
  if (!tied) l.a3 = gen(H, r, H, 3);
  l.b1 = gen(E * r, I, r, 11);
  l.b3 = gen(E * r, I, r, 13);
  l.a2 = gen(E * I, r, I, 2);
  l.b2 = gen(r, H, r, 22);
  return l;
}

}  // namespace megamoe::reference
