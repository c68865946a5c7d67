#include "reference/activation.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace megamoe::reference::detail {

// The steps of kernels/megamoe/formats/exact_math.cuh, one IEEE operation each (the library is
// built without FMA contraction).
float exp_kernel(float x) {
  if (std::isnan(x)) return x;
  if (x > 89.0f) return std::numeric_limits<float>::infinity();
  if (x < -104.0f) return 0.0f;
  constexpr float kLog2e = 1.44269504f, kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860682e-6f;
  const float n = std::rint(x * kLog2e);
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = 1.98412698e-4f;
  p = std::fma(p, r, 1.38888889e-3f);
  p = std::fma(p, r, 8.33333333e-3f);
  p = std::fma(p, r, 4.16666667e-2f);
  p = std::fma(p, r, 1.66666667e-1f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const int k = static_cast<int>(n), k1 = k / 2, k2 = k - k1;
  const float f1 = std::bit_cast<float>(static_cast<std::uint32_t>(k1 + 127) << 23);
  const float f2 = std::bit_cast<float>(static_cast<std::uint32_t>(k2 + 127) << 23);
  const float a = p * f1;
  return a * f2;
}

float sigmoid_kernel(float z) {
  return 1.0f / (1.0f + exp_kernel(-z));
}

float tanh_kernel(float u) {
  return 1.0f + -(2.0f / (exp_kernel(2.0f * u) + 1.0f));
}

namespace {

// Kernel precision (float) uses the kernels' own functions, fp64 the library's.
template <class S>
S sigmoid(S z) {
  if constexpr (std::is_same_v<S, float>) {
    return sigmoid_kernel(z);
  } else {
    return S(1) / (S(1) + std::exp(-z));
  }
}

template <class S>
S tanh_of(S u) {
  if constexpr (std::is_same_v<S, float>) {
    return tanh_kernel(u);
  } else {
    return std::tanh(u);
  }
}

// sqrt(2 / pi) and the cubic coefficient of the tanh approximation of GELU.
template <class S>
constexpr S kGeluScale = S(0.7978845608028654);
template <class S>
constexpr S kGeluCubic = S(0.044715);

template <class S>
S gelu_tanh(S g) {
  return S(0.5) * g * (S(1) + tanh_of(kGeluScale<S> * (g + kGeluCubic<S> * g * g * g)));
}

template <class S>
S gelu_tanh_derivative(S g) {
  const S t = tanh_of(kGeluScale<S> * (g + kGeluCubic<S> * g * g * g));
  return S(0.5) * (S(1) + t) +
         S(0.5) * g * (S(1) - t * t) * kGeluScale<S> * (S(1) + S(3) * kGeluCubic<S> * g * g);
}

template <class S>
S silu_derivative(S g) {
  const S sg = sigmoid(g);
  return sg * (S(1) + g * (S(1) - sg));
}

// The clamp of swiglu/geglu (c > 0) and of swiglu_oai (limit): gate from above, up both sides.
struct Clamp {
  bool on;
  double c;
};

Clamp clamp_of(const ActivationSpec& spec) {
  if (spec.kind == ActivationKind::swiglu_oai) return {true, spec.oai_limit};
  return {spec.clamp > 0.0f, spec.clamp};
}

}  // namespace

template <class S>
S activate(const ActivationSpec& spec, S gate, S up) {
  const Clamp cl = clamp_of(spec);
  if (cl.on) {
    const S c = static_cast<S>(cl.c);
    gate = gate > c ? c : gate;
    up = up > c ? c : (up < -c ? -c : up);
  }
  switch (spec.kind) {
    case ActivationKind::swiglu:
      return gate * sigmoid(gate) * up;
    case ActivationKind::geglu:
      return gelu_tanh(gate) * up;
    case ActivationKind::swiglu_oai:
      return (up + S(1)) * (gate * sigmoid(static_cast<S>(spec.oai_alpha) * gate));
  }
  return S(0);
}

template <class S>
void activate_partials(const ActivationSpec& spec, S gate, S up, S& d_gate, S& d_up) {
  const Clamp cl = clamp_of(spec);
  bool gate_live = true, up_live = true;
  if (cl.on) {
    const S c = static_cast<S>(cl.c);
    if (gate > c) gate = c, gate_live = false;
    if (up > c) up = c, up_live = false;
    if (up < -c) up = -c, up_live = false;
  }
  S dg = 0, du = 0;
  switch (spec.kind) {
    case ActivationKind::swiglu:
      dg = silu_derivative(gate) * up;
      du = gate * sigmoid(gate);
      break;
    case ActivationKind::geglu:
      dg = gelu_tanh_derivative(gate) * up;
      du = gelu_tanh(gate);
      break;
    case ActivationKind::swiglu_oai: {
      const S alpha = static_cast<S>(spec.oai_alpha);
      const S sg = sigmoid(alpha * gate);
      dg = (up + S(1)) * (sg + gate * alpha * sg * (S(1) - sg));
      du = gate * sg;
      break;
    }
  }
  d_gate = gate_live ? dg : S(0);
  d_up = up_live ? du : S(0);
}

template float activate<float>(const ActivationSpec&, float, float);
template double activate<double>(const ActivationSpec&, double, double);
template void activate_partials<float>(const ActivationSpec&, float, float, float&, float&);
template void activate_partials<double>(const ActivationSpec&, double, double, double&, double&);

}  // namespace megamoe::reference::detail
