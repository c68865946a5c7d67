#pragma once
// Resource usage read from the ptxas verbose report (-Xptxas=-v) that NVRTC appends to its log.
// NVRTC 13.0 prints, per function:
//   ptxas info    : Function properties for <name>
//   ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
//   ptxas info    : Used 40 registers, used 1 barriers, 8 bytes cumulative stack size
// Older ptxas versions put local memory on the "Used" line ("..., 16 bytes lmem, ...").
#include <cstddef>
#include <string_view>

namespace megamoe::jit {

struct PtxasInfo {
  bool found = false;           // at least one "Used N registers" line was seen
  int registers = 0;            // max over the functions of the module
  std::size_t local_bytes = 0;  // max stack frame / lmem over the functions
  std::size_t spill_bytes = 0;  // spill stores + spill loads, summed over the functions
};

PtxasInfo parse_ptxas_info(std::string_view log);

}  // namespace megamoe::jit
