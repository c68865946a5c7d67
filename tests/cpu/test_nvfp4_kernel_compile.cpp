// NVRTC compiles the SM90 NVFP4 MegaMoE kernel for sm_90a (no GPU needed) across the shapes the
// tests and benchmarks launch, and fails on local memory or register spills.
#include <gtest/gtest.h>

#include <string>

#include "jit/compiler.hpp"
#include "jit_test_support.hpp"
#include "megamoe/error.hpp"
#include "megamoe/heuristics.hpp"
#include "megamoe/presets.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/nvfp4_mega_moe_kernels.hpp"

namespace megamoe {
namespace {

MoEConfig config(std::int64_t h, std::int64_t inter, std::int64_t e, int k, int ranks,
                 std::int64_t t_max) {
  MoEConfig c;
  c.shape = {h, inter, e, k};
  c.num_ranks = ranks;
  c.max_tokens_per_rank = t_max;
  return c;
}

void compile_and_check(const MoEConfig& c, int block_m) {
  for (auto version :
       {runtime::Nvfp4KernelVersion::simple, runtime::Nvfp4KernelVersion::pipelined}) {
    const jit::KernelRequest r = runtime::nvfp4_mega_moe_request(c, block_m, version);
    SCOPED_TRACE(describe(c) + " BLOCK_M=" + std::to_string(block_m) + " " + r.name);
    const auto k = jit::compile(r);
    ASSERT_FALSE(k->cubin.empty());
    test::expect_no_spills(*k);
  }
  EXPECT_LE(runtime::nvfp4_smem_bytes(c, block_m), std::size_t{227 * 1024});
}

TEST(Nvfp4KernelCompile, SmallShapesEveryRankCountAndTile) {
  for (int ranks : {1, 8}) {
    const MoEConfig c = config(1024, 512, 32, 8, ranks, 512);
    for (int bm : {8, 128}) compile_and_check(c, bm);
  }
}

TEST(Nvfp4KernelCompile, DecodePresets) {
  for (const char* name : {"dsv4-flash", "h6144-e256-k8"}) {
    MoEConfig c;
    c.shape = find_preset(name).shape;
    c.num_ranks = 1;
    c.max_tokens_per_rank = 512;
    for (int bm : {8, 16}) compile_and_check(c, bm);
  }
}

TEST(Nvfp4KernelCompile, RegistryListsOneRequestPerReachableBlockM) {
  const MoEConfig c = config(1024, 512, 32, 8, 2, 512);
  const auto requests = runtime::kernels_for(c, {"nvfp4_mega_moe"});
  EXPECT_EQ(requests.size(), reachable_block_ms(c).size());
  MoEConfig fp8 = c;
  fp8.weight_format = fp8.act_format = Format::fp8;
  EXPECT_TRUE(runtime::nvfp4_mega_moe_kernels(fp8).empty());
}

TEST(Nvfp4KernelCompile, TooWideShapesAreUnsupported) {
  const MoEConfig c = config(16384, 16384, 32, 8, 1, 64);
  EXPECT_THROW(runtime::nvfp4_token_subtile(c, 8), Unsupported);
}

}  // namespace
}  // namespace megamoe
