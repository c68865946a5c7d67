#include "reference/activation.hpp"

#include <cmath>

namespace megamoe::reference::detail {
namespace {

template <class S>
S sigmoid(S z) {
  return S(1) / (S(1) + std::exp(-z));
}

// sqrt(2 / pi) and the cubic coefficient of the tanh approximation of GELU.
template <class S>
constexpr S kGeluScale = S(0.7978845608028654);
template <class S>
constexpr S kGeluCubic = S(0.044715);

template <class S>
S gelu_tanh(S g) {
  return S(0.5) * g * (S(1) + std::tanh(kGeluScale<S> * (g + kGeluCubic<S> * g * g * g)));
}

template <class S>
S gelu_tanh_derivative(S g) {
  const S t = std::tanh(kGeluScale<S> * (g + kGeluCubic<S> * g * g * g));
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
