#include "reference/engine.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "megamoe/formats.hpp"
#include "reference/act_quant.hpp"
#include "reference/activation.hpp"
#include "reference/dot.hpp"
#include "reference/parallel.hpp"
#include "reference/weight_decode.hpp"

namespace megamoe::reference::detail {
namespace {

// Weight rows decoded at a time: small enough to stay in L2 while every pooled token streams
// over them, large enough to amortize the loop overhead.
constexpr std::int64_t kDecodeRows = 16;

// Decodes rows of a matrix into S; float decodes in place, double converts.
template <class S>
const S* decode_chunk(const QuantizedMatrix& m, std::int64_t expert, std::int64_t row0,
                      std::int64_t nrows, std::vector<float>& fbuf, std::vector<S>& sbuf) {
  fbuf.resize(static_cast<std::size_t>(nrows * m.cols));
  decode_rows(m, expert, row0, nrows, fbuf.data());
  if constexpr (std::is_same_v<S, float>) {
    return fbuf.data();
  } else {
    sbuf.assign(fbuf.begin(), fbuf.end());
    return sbuf.data();
  }
}

// fn(row, decoded row) for every row of expert e, decoded kDecodeRows at a time.
template <class S, class Fn>
void for_each_decoded_row(const QuantizedMatrix& m, std::int64_t expert, Fn&& fn) {
  std::vector<float> fbuf;
  std::vector<S> sbuf;
  for (std::int64_t r0 = 0; r0 < m.rows; r0 += kDecodeRows) {
    const std::int64_t nr = std::min(kDecodeRows, m.rows - r0);
    const S* w = decode_chunk(m, expert, r0, nr, fbuf, sbuf);
    for (std::int64_t row = 0; row < nr; ++row) fn(r0 + row, w + row * m.cols);
  }
}

template <class S>
std::vector<S> transpose(const std::vector<float>& src, std::int64_t batches, std::int64_t rows,
                         std::int64_t cols, bool round) {
  std::vector<S> out(src.size());
  for (std::int64_t b = 0; b < batches; ++b) {
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < cols; ++j) {
        const float v = src[static_cast<std::size_t>((b * rows + i) * cols + j)];
        out[static_cast<std::size_t>((b * cols + j) * rows + i)] =
            static_cast<S>(round ? formats::round_to_bf16(v) : v);
      }
    }
  }
  return out;
}

template <class S>
std::vector<S> convert(const std::vector<float>& src, bool round) {
  std::vector<S> out(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    out[i] = static_cast<S>(round ? formats::round_to_bf16(src[i]) : src[i]);
  }
  return out;
}

}  // namespace

RoundingPoints rounding_points(Precision p) {
  switch (p) {
    case Precision::kernel:
      return {true, true, true, true};
    case Precision::fp64:
      return {true, true, false, false};
    case Precision::exact:
      return {false, false, false, false};
  }
  return {true, true, true, true};
}

template <class S>
Engine<S>::Engine(const MoEConfig& c, const MoEInputs& in, const QuantizedWeights& w, Precision p,
                  const std::vector<float>* fc2_input_scale, const LoraWeights* l)
    : config(c),
      inputs(in),
      weights(w),
      precision(p),
      points(rounding_points(p)),
      plan(plan_dispatch(c, in)),
      H(c.shape.hidden),
      I(c.shape.intermediate),
      E(c.shape.num_experts),
      N(plan.num_tokens),
      K(c.shape.top_k),
      fc2_scale(fc2_input_scale),
      has_lora(l != nullptr) {
  predispatch();
  if (l) prepare_lora(*l);
}

// Pre-dispatch on every source rank: round to bf16, quantize by the activation format. What
// travels to the expert ranks is the quantized row plus its global scale.
template <class S>
void Engine<S>::predispatch() {
  x.resize(static_cast<std::size_t>(N * H));
  x_in.resize(x.size());
  x_scale.assign(static_cast<std::size_t>(N), S(1));
  parallel_for(N, [&](std::int64_t n) {
    std::vector<float> row(static_cast<std::size_t>(H)), q(row.size());
    for (std::int64_t h = 0; h < H; ++h) {
      const float v = inputs.x[static_cast<std::size_t>(n * H + h)];
      row[h] = points.bf16_inputs ? formats::round_to_bf16(v) : v;
      x_in[static_cast<std::size_t>(n * H + h)] = static_cast<S>(row[h]);
    }
    if (points.quantize_acts) {
      x_scale[n] = static_cast<S>(
          quantize_row(config.act_format, config.fp8_scale, row.data(), H, 0.0f, q.data()));
      for (std::int64_t h = 0; h < H; ++h) x[static_cast<std::size_t>(n * H + h)] = q[h];
    } else {
      for (std::int64_t h = 0; h < H; ++h) x[static_cast<std::size_t>(n * H + h)] = row[h];
    }
  });
}

template <class S>
void Engine<S>::prepare_lora(const LoraWeights& l) {
  const bool round = points.bf16_inputs;
  const std::int64_t r = config.lora_rank;
  lora.scale = static_cast<S>(l.scale);
  lora.tied = l.tied;
  lora.rank = r;
  lora.a1t = transpose<S>(l.a1, 1, H, r, round);
  lora.a1 = convert<S>(l.a1, round);
  if (!l.tied) {
    lora.a3t = transpose<S>(l.a3, 1, H, r, round);
    lora.a3 = convert<S>(l.a3, round);
  }
  lora.b1 = convert<S>(l.b1, round);
  lora.b3 = convert<S>(l.b3, round);
  lora.b1t = transpose<S>(l.b1, E, r, I, round);
  lora.b3t = transpose<S>(l.b3, E, r, I, round);
  lora.a2 = convert<S>(l.a2, round);
  lora.a2t = transpose<S>(l.a2, E, I, r, round);
  lora.b2 = convert<S>(l.b2, round);
  lora.b2t = transpose<S>(l.b2, 1, r, H, round);
  // x·A1 and x·A3 once per token on the source rank; they travel with the token, in fp32.
  u1.assign(static_cast<std::size_t>(N * r), S(0));
  if (!l.tied) u3.assign(u1.size(), S(0));
  parallel_for(N, [&](std::int64_t n) {
    const S* xr = x_in.data() + n * H;
    for (std::int64_t q = 0; q < r; ++q) {
      u1[static_cast<std::size_t>(n * r + q)] = dot(xr, lora.a1t.data() + q * H, H);
      if (!l.tied) u3[static_cast<std::size_t>(n * r + q)] = dot(xr, lora.a3t.data() + q * H, H);
    }
  });
}

template <class S>
ExpertFront<S> Engine<S>::expert_front(std::int64_t e) const {
  return expert_front_impl(e, true);
}

template <class S>
ExpertFront<S> Engine<S>::expert_front_impl(std::int64_t e, bool quantize_fc2_in) const {
  const auto& pool = plan.pools[static_cast<std::size_t>(e)];
  const auto P = static_cast<std::int64_t>(pool.size());
  const std::int64_t I2 = 2 * I;
  ExpertFront<S> f;
  f.fc1.resize(static_cast<std::size_t>(P * I2));
  f.act.resize(static_cast<std::size_t>(P * I));
  f.weighted.resize(f.act.size());
  f.fc2_in.resize(f.act.size());
  f.fc2_factor.resize(static_cast<std::size_t>(P));
  if (P == 0) return f;

  // Gather the pool (what the dispatch delivered) and each row's post-accumulation factor.
  const S g13 = static_cast<S>(matrix_global_scale(weights.w13, e));
  std::vector<S> xp(static_cast<std::size_t>(P * H)), alpha(static_cast<std::size_t>(P));
  for (std::int64_t p = 0; p < P; ++p) {
    const std::int64_t n = pool[p].token;
    std::copy_n(x.begin() + n * H, H, xp.begin() + p * H);
    alpha[p] = x_scale[n] * g13;
  }

  for_each_decoded_row<S>(weights.w13, e, [&](std::int64_t row, const S* w) {
    for (std::int64_t p = 0; p < P; ++p) {
      f.fc1[p * I2 + row] = dot(xp.data() + p * H, w, H) * alpha[p];
    }
  });

  if (has_lora) {
    const std::int64_t r = lora.rank;
    const std::vector<S>& u_up = lora.tied ? u1 : u3;
    for (std::int64_t p = 0; p < P; ++p) {
      const std::int64_t n = pool[p].token;
      for (std::int64_t i = 0; i < I; ++i) {
        const S lg = dot(u1.data() + n * r, lora.b1t.data() + (e * I + i) * r, r);
        const S lu = dot(u_up.data() + n * r, lora.b3t.data() + (e * I + i) * r, r);
        f.fc1[p * I2 + i] += lora.scale * lg;
        f.fc1[p * I2 + I + i] += lora.scale * lu;
      }
    }
  }

  const S g2 = static_cast<S>(matrix_global_scale(weights.w2, e));
  std::vector<float> row(static_cast<std::size_t>(I)), q(row.size());
  for (std::int64_t p = 0; p < P; ++p) {
    const S w = static_cast<S>(inputs.topk_weights[pool[p].token * K + pool[p].k]);
    for (std::int64_t i = 0; i < I; ++i) {
      const S c = activate(config.activation, f.fc1[p * I2 + i], f.fc1[p * I2 + I + i]);
      f.act[p * I + i] = c;
      f.weighted[p * I + i] = w * c;
    }
    if (points.quantize_acts && quantize_fc2_in) {
      for (std::int64_t i = 0; i < I; ++i) row[i] = static_cast<float>(f.weighted[p * I + i]);
      const float global =
          config.act_format == Format::nvfp4 ? (*fc2_scale)[static_cast<std::size_t>(e)] : 0.0f;
      const float s =
          quantize_row(config.act_format, config.fp8_scale, row.data(), I, global, q.data());
      for (std::int64_t i = 0; i < I; ++i) f.fc2_in[p * I + i] = q[i];
      f.fc2_factor[p] = static_cast<S>(s) * g2;
    } else {
      std::copy_n(f.weighted.begin() + p * I, I, f.fc2_in.begin() + p * I);
      f.fc2_factor[p] = g2;
    }
  }
  return f;
}

template <class S>
void Engine<S>::run_expert(std::int64_t e, std::vector<S>& slots,
                           std::vector<S>& lora_slots) const {
  const auto& pool = plan.pools[static_cast<std::size_t>(e)];
  const auto P = static_cast<std::int64_t>(pool.size());
  if (P == 0) return;
  const ExpertFront<S> f = expert_front(e);

  std::vector<S> y(static_cast<std::size_t>(P * H));
  for_each_decoded_row<S>(weights.w2, e, [&](std::int64_t row, const S* w) {
    for (std::int64_t p = 0; p < P; ++p) {
      y[p * H + row] = dot(f.fc2_in.data() + p * I, w, I) * f.fc2_factor[p];
    }
  });

  // Send each weighted row back to its source rank's combine slot [k][token].
  std::vector<float> row(static_cast<std::size_t>(H)), q(row.size());
  for (std::int64_t p = 0; p < P; ++p) {
    const std::int64_t slot = plan.slot(pool[p].token, pool[p].k, K);
    S* dst = slots.data() + slot * H;
    if (points.round_slots) {
      for (std::int64_t h = 0; h < H; ++h) row[h] = static_cast<float>(y[p * H + h]);
      if (config.fp8_combine) {
        quantize_row(Format::fp8, Fp8ScaleKind::f32, row.data(), H, 0.0f, q.data());
      } else {
        quantize_row(Format::bf16, Fp8ScaleKind::f32, row.data(), H, 0.0f, q.data());
      }
      for (std::int64_t h = 0; h < H; ++h) dst[h] = q[h];
    } else {
      std::copy_n(y.begin() + p * H, H, dst);
    }
    if (has_lora) {
      const std::int64_t r = lora.rank;
      for (std::int64_t qq = 0; qq < r; ++qq) {
        lora_slots[slot * r + qq] =
            dot(f.fc2_in.data() + p * I, lora.a2t.data() + (e * r + qq) * I, I);
      }
    }
  }
}

template <class S>
MoEOutputs Engine<S>::forward() {
  const std::int64_t r = has_lora ? lora.rank : 0;
  std::vector<S> slots(static_cast<std::size_t>(N * K * H), S(0));
  std::vector<S> lora_slots(static_cast<std::size_t>(N * K * r), S(0));
  parallel_for(E, [&](std::int64_t e) { run_expert(e, slots, lora_slots); });

  MoEOutputs o;
  o.invalid_routes = plan.invalid_routes;
  o.out.resize(static_cast<std::size_t>(N * H));
  if (points.round_output) o.out_bf16.resize(o.out.size());
  parallel_for(N, [&](std::int64_t n) {
    std::vector<S> acc(static_cast<std::size_t>(H), S(0)), z(static_cast<std::size_t>(r), S(0));
    for (int k = 0; k < K; ++k) {
      if (!plan.route_valid[static_cast<std::size_t>(n * K + k)]) continue;
      const std::int64_t slot = plan.slot(n, k, K);
      for (std::int64_t h = 0; h < H; ++h) acc[h] += slots[slot * H + h];
      for (std::int64_t q = 0; q < r; ++q) z[q] += lora_slots[slot * r + q];
    }
    if (has_lora) {
      // B2 once per token on the combined rank-space vector.
      for (std::int64_t h = 0; h < H; ++h) {
        acc[h] += lora.scale * dot(z.data(), lora.b2t.data() + h * r, r);
      }
    }
    for (std::int64_t h = 0; h < H; ++h) {
      const std::size_t i = static_cast<std::size_t>(n * H + h);
      if (points.round_output) {
        o.out_bf16[i] = formats::bf16_from_float(static_cast<float>(acc[h]));
        o.out[i] = formats::bf16_to_float(o.out_bf16[i]);
      } else {
        o.out[i] = static_cast<double>(acc[h]);
      }
    }
  });
  return o;
}

template <class S>
std::vector<float> Engine<S>::calibrate() {
  std::vector<float> scales(static_cast<std::size_t>(E));
  parallel_for(E, [&](std::int64_t e) {
    const ExpertFront<S> f = expert_front_impl(e, false);
    float amax = 0.0f;
    for (S v : f.weighted) {
      const float a = std::fabs(static_cast<float>(v));
      if (std::isfinite(a)) amax = std::max(amax, a);
    }
    scales[e] = formats::nvfp4_global_scale(amax);
  });
  return scales;
}

template class Engine<float>;
template class Engine<double>;

}  // namespace megamoe::reference::detail
