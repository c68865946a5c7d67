#pragma once
// The output record every MegaMoE family's layer call takes, one per driven rank.
#include "megamoe/types.hpp"

namespace megamoe {

struct MoEOutputs {
  int rank = 0;
  TensorView out;  // bf16 [T, H]; T = the rank's last pre-dispatched token count (<= T_max)
};

}  // namespace megamoe
