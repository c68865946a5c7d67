#pragma once
// The GPU half of `megamoe demo` (tools/demo_gpu.cpp).
#include <cstdint>

#include "megamoe/config.hpp"

namespace megamoe::tool {

// Runs the fused NVFP4 layer on `config` with `tokens` tokens per rank: checks it against the
// CPU oracle and prints time, floor and baseline. Returns the process exit code.
int run_gpu_demo(const MoEConfig& config, std::int64_t tokens, std::uint64_t seed);

}  // namespace megamoe::tool
