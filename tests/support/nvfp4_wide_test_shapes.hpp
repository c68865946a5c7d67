#pragma once
// The shapes of the GPU test WideKernelSubTilesAndStages (tests/gpu/test_nvfp4_mega_moe.cpp), which
// its CPU mirror (tests/cpu/test_nvfp4_kernel_compile.cpp) builds with NVRTC: one list, so the two
// cannot drift apart. E = 32 experts, top-8, T_max = 512.
#include <cstdint>

namespace megamoe::test {

struct WideTestShape {
  enum class Routing { uniform, masked, zipf };
  std::int64_t hidden, inter;
  int ranks;
  std::int64_t tokens;
  Routing routing;
};

inline constexpr WideTestShape kWideTestShapes[] = {
    {1024, 512, 1, 5, WideTestShape::Routing::masked},
    {1024, 512, 1, 24, WideTestShape::Routing::masked},
    {1024, 512, 2, 12, WideTestShape::Routing::uniform},
    {1024, 512, 2, 40, WideTestShape::Routing::masked},
    {1024, 512, 1, 512, WideTestShape::Routing::zipf},
    {1536, 768, 1, 60, WideTestShape::Routing::masked},
    {1280, 768, 1, 40, WideTestShape::Routing::masked}};

// Every result-buffer count (0, 1, 2) must fit beside the stages in at least this many of the
// cases above, over the default and 256-k stages.
inline constexpr int kWideTestMinCasesPerBufferCount = 8;

}  // namespace megamoe::test
