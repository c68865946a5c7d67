#pragma once
// The gated activation between FC1 and FC2 and its partial derivatives, in float (kernel mode)
// or double. Formulas and clamp rules: docs/reference.md, "Activation".
#include "megamoe/types.hpp"

namespace megamoe::reference::detail {

template <class S>
S activate(const ActivationSpec& spec, S gate, S up);

// d act / d gate and d act / d up at (gate, up); zero where a clamp is active.
template <class S>
void activate_partials(const ActivationSpec& spec, S gate, S up, S& d_gate, S& d_up);

}  // namespace megamoe::reference::detail
