// Backward of the side-LoRA layer (docs/reference.md, "Side-LoRA backward"): the forward's front
// half is recomputed with the same engine, so the saved boundary is bitwise the forward's.
#include <algorithm>
#include <string>

#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"
#include "megamoe/reference.hpp"
#include "reference/activation.hpp"
#include "reference/dot.hpp"
#include "reference/engine.hpp"
#include "reference/parallel.hpp"
#include "reference/weight_decode.hpp"

namespace megamoe::reference {
namespace {

using detail::dot;
using detail::parallel_for;

// Expert e's whole matrix [rows, cols] in S and its transpose [cols, rows].
template <class S>
void decode_expert(const QuantizedMatrix& m, std::int64_t e, std::vector<S>& w,
                   std::vector<S>& wt) {
  std::vector<float> f(static_cast<std::size_t>(m.rows * m.cols));
  detail::decode_rows(m, e, 0, m.rows, f.data());
  w.assign(f.begin(), f.end());
  wt.resize(w.size());
  for (std::int64_t i = 0; i < m.rows; ++i) {
    for (std::int64_t j = 0; j < m.cols; ++j) wt[j * m.rows + i] = w[i * m.cols + j];
  }
}

template <class S>
std::vector<double> to_double(const std::vector<S>& v) {
  return std::vector<double>(v.begin(), v.end());
}

template <class S>
LoraGradients backward(const MoEConfig& c, const MoEInputs& in, const QuantizedWeights& wts,
                       const LoraWeights& l, std::span<const float> dout, Precision precision) {
  const detail::Engine<S> eng(c, in, wts, precision, nullptr, &l);
  const detail::DispatchPlan& plan = eng.plan;
  const detail::LoraMatrices<S>& lo = eng.lora;
  const std::int64_t H = eng.H, I = eng.I, E = eng.E, N = eng.N, r = lo.rank;
  const int K = eng.K;
  const S s = lo.scale;

  // Source ranks: dy as the kernel receives it, and dz = s·B2·dy once per token.
  std::vector<S> dy(static_cast<std::size_t>(N * H)), dz(static_cast<std::size_t>(N * r));
  parallel_for(N, [&](std::int64_t n) {
    for (std::int64_t h = 0; h < H; ++h) {
      const float g = dout[static_cast<std::size_t>(n * H + h)];
      dy[n * H + h] = eng.points.bf16_inputs ? formats::round_to_bf16(g) : g;
    }
    for (std::int64_t q = 0; q < r; ++q) {
      dz[n * r + q] = s * dot(lo.b2.data() + q * H, dy.data() + n * H, H);
    }
  });

  // Expert ranks: per-route gradients go back to the source rank's slots [k][token].
  const auto NK = static_cast<std::size_t>(N * K);
  std::vector<S> dx_slots(NK * static_cast<std::size_t>(H), S(0));
  std::vector<S> du1_slots(NK * static_cast<std::size_t>(r), S(0)), du3_slots(du1_slots.size());
  std::vector<S> v_slots(du1_slots.size(), S(0));
  std::vector<S> dw_slots(NK, S(0));
  std::vector<S> db1(static_cast<std::size_t>(E * r * I), S(0)), db3(db1.size(), S(0));
  std::vector<S> da2(db1.size(), S(0));
  const std::vector<S>& u_up = lo.tied ? eng.u1 : eng.u3;
  parallel_for(E, [&](std::int64_t e) {
    const auto& pool = plan.pools[static_cast<std::size_t>(e)];
    if (pool.empty()) return;
    const detail::ExpertFront<S> f = eng.expert_front(e);
    std::vector<S> w13, w13t, w2, w2t;
    decode_expert(wts.w13, e, w13, w13t);
    decode_expert(wts.w2, e, w2, w2t);
    const S* a2 = lo.a2.data() + e * I * r;
    const S* a2t = lo.a2t.data() + e * r * I;
    const S* b1 = lo.b1.data() + e * r * I;
    const S* b3 = lo.b3.data() + e * r * I;
    S* db1e = db1.data() + e * r * I;
    S* db3e = db3.data() + e * r * I;
    S* da2e = da2.data() + e * I * r;
    std::vector<S> da(static_cast<std::size_t>(I)), dgu(static_cast<std::size_t>(2 * I));
    std::vector<S> su1(static_cast<std::size_t>(r)), su3(su1.size());
    for (std::size_t p = 0; p < pool.size(); ++p) {
      const std::int64_t n = pool[p].token;
      const int k = pool[p].k;
      const std::int64_t slot = plan.slot(n, k, K);
      const S w = static_cast<S>(in.topk_weights[static_cast<std::size_t>(n * K + k)]);
      const S* dyn = dy.data() + n * H;
      const S* dzn = dz.data() + n * r;
      const S* fc1 = f.fc1.data() + p * 2 * I;
      const S* act = f.act.data() + p * I;
      const S* a = f.fc2_in.data() + p * I;
      // dA' = dy·W2_e + (s·dy·B2ᵀ)·A2_eᵀ
      for (std::int64_t i = 0; i < I; ++i) {
        da[i] = dot(w2t.data() + i * H, dyn, H) + dot(a2 + i * r, dzn, r);
      }
      dw_slots[slot] = dot(da.data(), act, I);
      for (std::int64_t i = 0; i < I; ++i) {
        S pg, pu;
        detail::activate_partials(c.activation, fc1[i], fc1[I + i], pg, pu);
        const S dc = w * da[i];
        dgu[i] = dc * pg;
        dgu[I + i] = dc * pu;
      }
      // Expert-local adapter gradients, accumulated over the pool in dispatch order.
      for (std::int64_t q = 0; q < r; ++q) {
        su1[q] = s * eng.u1[n * r + q];
        su3[q] = s * u_up[n * r + q];
      }
      for (std::int64_t i = 0; i < I; ++i) {
        for (std::int64_t q = 0; q < r; ++q) da2e[i * r + q] += a[i] * dzn[q];
      }
      for (std::int64_t q = 0; q < r; ++q) {
        for (std::int64_t i = 0; i < I; ++i) {
          db1e[q * I + i] += su1[q] * dgu[i];
          db3e[q * I + i] += su3[q] * dgu[I + i];
        }
      }
      // Back to the source rank: the base dx of this route, and the rank-space pieces.
      for (std::int64_t h = 0; h < H; ++h) {
        dx_slots[slot * H + h] = dot(w13t.data() + h * 2 * I, dgu.data(), 2 * I);
      }
      for (std::int64_t q = 0; q < r; ++q) {
        du1_slots[slot * r + q] = s * dot(b1 + q * I, dgu.data(), I);
        du3_slots[slot * r + q] = s * dot(b3 + q * I, dgu.data() + I, I);
        v_slots[slot * r + q] = dot(a, a2t + q * I, I);
      }
    }
  });

  // Source ranks: combine the route pieces in k order, then the shared A1 / A3 term.
  LoraGradients g;
  g.invalid_routes = plan.invalid_routes;
  g.dx.resize(static_cast<std::size_t>(N * H));
  g.dtopk_weights.assign(NK, 0.0);
  std::vector<S> du1(static_cast<std::size_t>(N * r), S(0)), du3(du1.size(), S(0));
  std::vector<S> sz(du1.size(), S(0));  // s·z_t
  parallel_for(N, [&](std::int64_t n) {
    std::vector<S> acc(static_cast<std::size_t>(H), S(0)), z(static_cast<std::size_t>(r), S(0));
    S* d1 = du1.data() + n * r;
    S* d3 = du3.data() + n * r;
    for (int k = 0; k < K; ++k) {
      if (!plan.route_valid[static_cast<std::size_t>(n * K + k)]) continue;
      const std::int64_t slot = plan.slot(n, k, K);
      g.dtopk_weights[static_cast<std::size_t>(n * K + k)] = static_cast<double>(dw_slots[slot]);
      for (std::int64_t h = 0; h < H; ++h) acc[h] += dx_slots[slot * H + h];
      for (std::int64_t q = 0; q < r; ++q) {
        d1[q] += du1_slots[slot * r + q];
        d3[q] += du3_slots[slot * r + q];
        z[q] += v_slots[slot * r + q];
      }
    }
    for (std::int64_t q = 0; q < r; ++q) sz[n * r + q] = s * z[q];
    if (lo.tied) {
      for (std::int64_t q = 0; q < r; ++q) d1[q] += d3[q];  // A3 = A1: one rank-space vector
    }
    for (std::int64_t h = 0; h < H; ++h) {
      S v = acc[h] + dot(lo.a1.data() + h * r, d1, r);
      if (!lo.tied) v += dot(lo.a3.data() + h * r, d3, r);
      g.dx[static_cast<std::size_t>(n * H + h)] = static_cast<double>(v);
    }
  });

  // Shared factors: reductions over every token of every rank, in global (rank, token) order
  // so the result does not depend on how tokens are split over ranks.
  std::vector<S> da1(static_cast<std::size_t>(H * r), S(0)), da3(lo.tied ? 0 : da1.size(), S(0));
  std::vector<S> db2(static_cast<std::size_t>(r * H), S(0));
  parallel_for(H, [&](std::int64_t h) {
    for (std::int64_t n = 0; n < N; ++n) {
      const S xh = eng.x_in[static_cast<std::size_t>(n * H + h)];
      const S dyh = dy[n * H + h];
      for (std::int64_t q = 0; q < r; ++q) {
        da1[h * r + q] += xh * du1[n * r + q];
        if (!lo.tied) da3[h * r + q] += xh * du3[n * r + q];
        db2[q * H + h] += sz[n * r + q] * dyh;
      }
    }
  });
  g.da1 = to_double(da1);
  g.da3 = to_double(da3);
  g.db1 = to_double(db1);
  g.db3 = to_double(db3);
  g.da2 = to_double(da2);
  g.db2 = to_double(db2);
  return g;
}

}  // namespace

LoraGradients side_lora_backward(const MoEConfig& config, const MoEInputs& inputs,
                                 const QuantizedWeights& weights, const LoraWeights& lora,
                                 std::span<const float> dout, Precision precision) {
  if (!config.side_lora) throw_invalid("config.side_lora", "must be true for side_lora_backward");
  detail::validate_config(config);
  const std::int64_t N = detail::validate_inputs(config, inputs);
  detail::validate_weights(config, weights);
  detail::validate_lora(config, lora);
  if (static_cast<std::int64_t>(dout.size()) != N * config.shape.hidden) {
    throw_invalid("dout",
                  "must hold [N, H] = " + std::to_string(N * config.shape.hidden) + " elements",
                  std::to_string(dout.size()));
  }
  if (precision == Precision::kernel) {
    return backward<float>(config, inputs, weights, lora, dout, precision);
  }
  return backward<double>(config, inputs, weights, lora, dout, precision);
}

}  // namespace megamoe::reference
