#pragma once
// The gated activation between FC1 and FC2 and its partial derivatives, in float (kernel mode)
// or double. Formulas and clamp rules: docs/reference.md, "Activation".
#include "megamoe/types.hpp"

namespace megamoe::reference::detail {

// The kernels' fp32 e^x, sigmoid and tanh (kernels/megamoe/formats/exact_math.cuh), step for
// step: kernel precision must match the kernels bit for bit, which std::exp / std::tanh and
// CUDA's expf / tanhf do not do with each other.
float exp_kernel(float x);
float sigmoid_kernel(float z);
float tanh_kernel(float u);

template <class S>
S activate(const ActivationSpec& spec, S gate, S up);

// d act / d gate and d act / d up at (gate, up); zero where a clamp is active.
template <class S>
void activate_partials(const ActivationSpec& spec, S gate, S up, S& d_gate, S& d_up);

}  // namespace megamoe::reference::detail
