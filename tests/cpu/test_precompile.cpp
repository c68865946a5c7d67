// megamoe::precompile, the public function behind `megamoe precompile`: every kernel a config can
// launch lands in the disk cache, a later process finds them there, and a bad config is refused
// before anything compiles. NVRTC, no GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "jit/compiler.hpp"
#include "jit_test_support.hpp"
#include "megamoe/error.hpp"
#include "megamoe/precompile.hpp"
#include "runtime/kernel_registry.hpp"

namespace megamoe {
namespace {

// Small enough to compile in seconds: one reachable BLOCK_M (8), so one MoE kernel; FP8 combine
// and GEGLU so that both template arguments the CLI lacked until 03b8ef1 are exercised.
MoEConfig small_config() {
  MoEConfig c;
  c.shape = {512, 512, 8, 6};
  c.num_ranks = 1;
  c.max_tokens_per_rank = 8;
  c.fp8_combine = true;
  c.activation.kind = ActivationKind::geglu;
  return c;
}

std::size_t cache_entries(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    n += e.path().extension() == ".jit";
  return n;
}

TEST(Precompile, CompilesEveryKernelOfTheConfigThenALaterProcessFindsThem) {
  test::ScratchDir cache;
  test::ScopedEnv env("MEGAMOE_CACHE_DIR", cache.path().string());
  jit::clear_memory_cache();
  const MoEConfig c = small_config();
  const std::vector<jit::KernelRequest> expected = runtime::kernels_for(c);
  const std::vector<PrecompiledKernel> first = precompile(c);
  ASSERT_EQ(first.size(), expected.size());
  bool moe_kernel = false;
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].name, expected[i].name);
    EXPECT_EQ(first[i].arguments, expected[i].arguments);
    EXPECT_FALSE(first[i].from_disk_cache) << first[i].name << ": the cache directory was empty";
    EXPECT_GT(first[i].registers, 0) << first[i].name;
    EXPECT_EQ(first[i].spill_bytes, 0u) << first[i].name;
    EXPECT_EQ(first[i].local_bytes, 0u) << first[i].name;
    if (first[i].name == "sm90_nvfp4_mega_moe_pipelined") {
      moe_kernel = true;
      // act = 1 (geglu) and fp8_combine = 1, the last template argument.
      EXPECT_NE(first[i].arguments.find(", 8, 1, "), std::string::npos) << first[i].arguments;
      EXPECT_EQ(first[i].arguments.substr(first[i].arguments.size() - 3), ", 1");
    }
  }
  EXPECT_TRUE(moe_kernel) << "no NVFP4 MoE kernel among the precompiled ones";
  EXPECT_EQ(cache_entries(cache.path()), first.size());

  // As a serving process started later sees it: nothing in memory, everything on disk.
  jit::clear_memory_cache();
  const std::vector<PrecompiledKernel> second = precompile(c);
  ASSERT_EQ(second.size(), first.size());
  for (const PrecompiledKernel& k : second) EXPECT_TRUE(k.from_disk_cache) << k.name;
  EXPECT_EQ(cache_entries(cache.path()), first.size());
}

TEST(Precompile, RefusesABadConfigBeforeCompilingAnything) {
  test::ScratchDir cache;
  test::ScopedEnv env("MEGAMOE_CACHE_DIR", cache.path().string());
  MoEConfig c = small_config();
  c.shape.top_k = 0;
  EXPECT_THROW(precompile(c), InvalidArgument);
  c = small_config();
  c.max_tokens_per_rank = 0;
  EXPECT_THROW(precompile(c), InvalidArgument);
  EXPECT_EQ(cache_entries(cache.path()), 0u);
}

}  // namespace
}  // namespace megamoe
