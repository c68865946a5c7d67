// NVRTC compiles the SM90 NVFP4 MegaMoE kernel for sm_90a (no GPU needed) across the shapes the
// tests and benchmarks launch, and fails on local memory or register spills.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "jit/compiler.hpp"
#include "jit_test_support.hpp"
#include "megamoe/error.hpp"
#include "megamoe/heuristics.hpp"
#include "megamoe/presets.hpp"
#include "nvfp4_wide_test_shapes.hpp"
#include "preset_config.hpp"
#include "runtime/kernel_registry.hpp"
#include "runtime/nvfp4_mega_moe_kernels.hpp"
#include "runtime/nvfp4_weight_transform_kernels.hpp"

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

void compile_one(const MoEConfig& c, int block_m, runtime::Nvfp4KernelVersion version) {
  const jit::KernelRequest r = runtime::nvfp4_mega_moe_request(c, block_m, version);
  SCOPED_TRACE(describe(c) + " BLOCK_M=" + std::to_string(block_m) + " " + r.entry);
  const auto k = jit::compile(r);
  ASSERT_FALSE(k->cubin.empty());
  test::expect_no_spills(*k);
  const runtime::Nvfp4LaunchShape l = runtime::nvfp4_launch_shape(c, block_m, version);
  EXPECT_LE(l.smem, std::size_t{227 * 1024});
  if (version == runtime::Nvfp4KernelVersion::wide) {
    EXPECT_EQ(l.threads, 16 * 32 + 32);
    EXPECT_EQ(l.token_subtile, std::min(block_m, 32));
  } else {
    EXPECT_EQ(l.threads, 128 * l.ksplit + (l.stages > 0 ? 32 : 0));
  }
}

// `simple`, and `pipelined` with both K splits, with the default weight stages and with the
// register ring.
void compile_and_check(const MoEConfig& c, int block_m) {
  compile_one(c, block_m, runtime::Nvfp4KernelVersion::simple);
  for (const char* ksplit : {"2", "4"}) {
    test::ScopedEnv env("MEGAMOE_NVFP4_KSPLIT", ksplit);
    compile_one(c, block_m, runtime::Nvfp4KernelVersion::pipelined);
    test::ScopedEnv ring("MEGAMOE_NVFP4_STAGES", "0");
    compile_one(c, block_m, runtime::Nvfp4KernelVersion::pipelined);
  }
}

TEST(Nvfp4KernelCompile, SmallShapesEveryRankCountAndTile) {
  for (int ranks : {1, 8}) {
    const MoEConfig c = config(1024, 512, 32, 8, ranks, 512);
    for (int bm : {8, 128}) compile_and_check(c, bm);
  }
}

// The GPU sanitizer cases (tests/gpu/test_nvfp4_mega_moe.cpp, SanitizerSizedCase), two ranks:
// H / 128 = I / 128 = 4 blocks (shared-memory stages) and I / 128 = 1 (register ring).
TEST(Nvfp4KernelCompile, SanitizerShapes) {
  for (const MoEConfig& c : {config(2048, 2048, 8, 6, 2, 16), config(512, 512, 8, 6, 2, 16),
                             config(256, 128, 8, 6, 2, 16)}) {
    for (int bm : {8, 16}) compile_and_check(c, bm);
  }
}

// The GPU test StageBlocksAndExchangeBuffers: I = 1024, every choice of blocks per stage and
// exchange buffers, bf16 and FP8 combine, the BLOCK_M of its token counts.
TEST(Nvfp4KernelCompile, StageBlocksAndExchangeBufferShapes) {
  for (const char* blocks : {"2", "1"}) {
    for (const char* buffers : {"2", "1"}) {
      test::ScopedEnv stage_blocks("MEGAMOE_NVFP4_STAGE_BLOCKS", blocks);
      test::ScopedEnv reduce_buffers("MEGAMOE_NVFP4_REDUCE_BUFFERS", buffers);
      for (bool fp8 : {false, true}) {
        MoEConfig two = config(1024, 1024, 32, 8, 2, 512);
        two.fp8_combine = fp8;
        const bool spills_with_two = fp8 && get_block_m_for_mega_moe(two, 33) >= 16;
        if (std::string(buffers) == "2" && spills_with_two) {
          EXPECT_THROW(runtime::nvfp4_launch_shape(two, get_block_m_for_mega_moe(two, 33),
                                                   runtime::Nvfp4KernelVersion::pipelined),
                       InvalidArgument);
        } else {
          compile_one(two, get_block_m_for_mega_moe(two, 33),
                      runtime::Nvfp4KernelVersion::pipelined);
        }
      }
      const MoEConfig one = config(1024, 1024, 32, 8, 1, 512);
      compile_one(one, get_block_m_for_mega_moe(one, 512), runtime::Nvfp4KernelVersion::pipelined);
    }
  }
  // H = I = 2048 (16 blocks: four per warp of the K split): two stages of four blocks by
  // default, bf16 and FP8 combine, one and two ranks (6 tokens: 8-token tiles).
  for (int ranks : {1, 2}) {
    for (bool fp8 : {false, true}) {
      MoEConfig c = config(2048, 2048, 32, 8, ranks, 512);
      c.fp8_combine = fp8;
      const int bm = get_block_m_for_mega_moe(c, 6);
      EXPECT_EQ(bm, 8) << describe(c);
      const runtime::Nvfp4LaunchShape l = runtime::nvfp4_launch_shape(c, bm);
      EXPECT_EQ(l.stage_blocks, 4) << describe(c) << " BLOCK_M " << bm;
      EXPECT_EQ(l.stages, 2) << describe(c);
      compile_one(c, bm, runtime::Nvfp4KernelVersion::pipelined);
    }
  }
}

TEST(Nvfp4KernelCompile, DecodePresets) {
  for (const char* name : {"dsv4-flash", "h6144-e256-k8"}) {
    MoEConfig c = test::preset_config(name, 1, 512);
    for (int bm : {8, 16}) compile_and_check(c, bm);
  }
}

// The wide kernel at the decode presets and the GPU test's small shape: every BLOCK_M (sub-tiles
// of 8, 16 or 32 tokens), one, two and eight ranks; the default picks it from BLOCK_M 16 on, and it
// is Unsupported where the plan has no token chunks (H or I not a multiple of 256).
TEST(Nvfp4KernelCompile, WideShapes) {
  const auto wide = runtime::Nvfp4KernelVersion::wide;
  for (const char* name : {"dsv4-flash", "h6144-e256-k8"}) {
    MoEConfig c = test::preset_config(name, 1, 512);
    for (int bm : {8, 16, 32, 64, 128}) compile_one(c, bm, wide);
    EXPECT_EQ(runtime::nvfp4_kernel_version(c, 8), runtime::Nvfp4KernelVersion::pipelined);
    EXPECT_EQ(runtime::nvfp4_kernel_version(c, 16), wide);
  }
  for (int ranks : {1, 2, 8}) {
    const MoEConfig small = config(1024, 512, 32, 8, ranks, 512);
    for (int bm : reachable_block_ms(small)) compile_one(small, bm, wide);
  }
  // The GPU test WideKernelSubTilesAndStages: its shapes and token counts with the default and
  // 256-k stages and 2, 1 or 0 result buffers where they fit (each kernel once).
  {
    std::set<std::string> built;
    int fitting[3] = {0, 0, 0};
    for (const char* blocks : {"", "2"}) {
      test::ScopedEnv stage_blocks("MEGAMOE_NVFP4_STAGE_BLOCKS", blocks);
      for (int buffers : {2, 1, 0}) {
        test::ScopedEnv result_buffers("MEGAMOE_NVFP4_REDUCE_BUFFERS", std::to_string(buffers));
        for (const test::WideTestShape& g : test::kWideTestShapes) {
          const MoEConfig c = config(g.hidden, g.inter, 32, 8, g.ranks, 512);
          const int bm = get_block_m_for_mega_moe(c, g.tokens);
          try {
            runtime::nvfp4_launch_shape(c, bm, wide);
          } catch (const InvalidArgument&) {
            continue;
          }
          ++fitting[buffers];
          if (built.insert(runtime::nvfp4_mega_moe_request(c, bm, wide).entry).second) {
            compile_one(c, bm, wide);
          }
        }
      }
    }
    for (int b = 0; b < 3; ++b) {
      EXPECT_GE(fitting[b], test::kWideTestMinCasesPerBufferCount) << b << " result buffers";
    }
  }
  const MoEConfig odd_width = config(1536, 768, 32, 8, 1, 512);
  EXPECT_EQ(get_block_m_for_mega_moe(odd_width, 60), 32);
  EXPECT_EQ(runtime::nvfp4_launch_shape(odd_width, 32, wide).stage_blocks, 3);
  for (int bm : reachable_block_ms(odd_width)) compile_one(odd_width, bm, wide);
  // The other presets the wide kernel takes (H, I multiples of 256): no GPU test runs them.
  for (const char* name : {"dsv3", "qwen3-235b"}) {
    MoEConfig c = test::preset_config(name, 8, 4096);
    for (int bm : {16, 32}) compile_one(c, bm, wide);
  }
  for (const char* name : {"dsv4-flash", "h6144-e256-k8"}) {
    MoEConfig c = test::preset_config(name, 1, 512);
    // 512-k stages: two beside 16-token sub-tiles with two FC1 exchange buffers, two beside 32
    // with the small exchange region.
    const runtime::Nvfp4LaunchShape sixteen = runtime::nvfp4_launch_shape(c, 16, wide);
    EXPECT_EQ(sixteen.stage_blocks, 4) << name;
    EXPECT_EQ(sixteen.stages, 2) << name;
    EXPECT_EQ(sixteen.reduce_buffers, 2) << name;
    const runtime::Nvfp4LaunchShape thirty_two = runtime::nvfp4_launch_shape(c, 32, wide);
    EXPECT_EQ(thirty_two.stage_blocks, 4) << name;
    EXPECT_EQ(thirty_two.stages, 2) << name;
    EXPECT_EQ(thirty_two.reduce_buffers, 0) << name;
    {
      test::ScopedEnv one("MEGAMOE_NVFP4_REDUCE_BUFFERS", "1");
      EXPECT_THROW(runtime::nvfp4_launch_shape(c, 32, wide), InvalidArgument) << name;
    }
    {
      // 384-k stages: one result buffer beside two.
      test::ScopedEnv three("MEGAMOE_NVFP4_STAGE_BLOCKS", "3");
      if (std::string(name) == "h6144-e256-k8") {
        const runtime::Nvfp4LaunchShape l = runtime::nvfp4_launch_shape(c, 32, wide);
        EXPECT_EQ(l.stages, 2);
        EXPECT_GE(l.reduce_buffers, 1);
        compile_one(c, 32, wide);
      } else {
        EXPECT_THROW(runtime::nvfp4_launch_shape(c, 32, wide), InvalidArgument) << name;
      }
    }
  }
  // H = 1280, I = 768: 256-k stages only.
  const MoEConfig narrow = config(1280, 768, 32, 8, 1, 512);
  EXPECT_EQ(get_block_m_for_mega_moe(narrow, 40), 16);
  EXPECT_EQ(runtime::nvfp4_launch_shape(narrow, 16, wide).stage_blocks, 2);
  for (int bm : reachable_block_ms(narrow)) compile_one(narrow, bm, wide);
  const MoEConfig odd = config(1152, 512, 32, 8, 1, 512);
  EXPECT_THROW(runtime::nvfp4_launch_shape(odd, 16, wide), Unsupported);
  EXPECT_EQ(runtime::nvfp4_kernel_version(odd, 16), runtime::Nvfp4KernelVersion::pipelined);
}

// FP8 combine slots: the pipelined kernel (both streaming modes) and the wide one, which the
// default picks for them from BLOCK_M 16 on as for bf16 slots; `simple` has none.
TEST(Nvfp4KernelCompile, Fp8CombineBuildsWithPipelinedAndWide) {
  const auto pipelined = runtime::Nvfp4KernelVersion::pipelined;
  const auto wide = runtime::Nvfp4KernelVersion::wide;
  for (const char* name : {"dsv4-flash", "h6144-e256-k8"}) {
    for (int ranks : {1, 2}) {
      MoEConfig c = test::preset_config(name, ranks, 512);
      c.fp8_combine = true;
      for (int bm : {8, 16}) {
        compile_one(c, bm, pipelined);
        EXPECT_NE(runtime::nvfp4_mega_moe_request(c, bm, pipelined).entry.find(", 1>"),
                  std::string::npos);
      }
      EXPECT_EQ(runtime::nvfp4_kernel_version(c, 16), wide) << name;
      for (int bm : {16, 32}) {
        compile_one(c, bm, wide);
        EXPECT_NE(runtime::nvfp4_mega_moe_request(c, bm, wide).entry.find(", 1>"),
                  std::string::npos);
      }
      EXPECT_THROW(runtime::nvfp4_mega_moe_request(c, 8, runtime::Nvfp4KernelVersion::simple),
                   Unsupported);
    }
  }
  // Every reachable BLOCK_M of the GPU test's small shape, both streaming modes, and the wide
  // kernel where the default takes it at one and eight ranks (two: the presets above).
  for (int ranks : {1, 2, 4, 8}) {
    const MoEConfig small = [&] {
      MoEConfig m = config(1024, 512, 32, 8, ranks, 512);
      m.fp8_combine = true;
      return m;
    }();
    for (int bm : reachable_block_ms(small)) {
      compile_one(small, bm, pipelined);
      if (bm >= 16 && (ranks == 1 || ranks == 8)) compile_one(small, bm, wide);
    }
  }
  // The GPU test WideKernelFp8CombineMatchesPipelined: the wide shapes' FP8 builds with 2, 1 or 0
  // result buffers where they fit (each kernel once).
  std::set<std::string> built;
  for (int buffers : {2, 1, 0}) {
    test::ScopedEnv result_buffers("MEGAMOE_NVFP4_REDUCE_BUFFERS", std::to_string(buffers));
    for (const test::WideTestShape& g : test::kWideTestShapes) {
      MoEConfig c = config(g.hidden, g.inter, 32, 8, g.ranks, 512);
      c.fp8_combine = true;
      const int bm = get_block_m_for_mega_moe(c, g.tokens);
      try {
        runtime::nvfp4_launch_shape(c, bm, wide);
      } catch (const InvalidArgument&) {
        continue;
      }
      if (built.insert(runtime::nvfp4_mega_moe_request(c, bm, wide).entry).second) {
        compile_one(c, bm, wide);
      }
    }
  }
}

// The host sizes the dynamic shared memory from a mirror of the kernels' Smem structs: NVRTC
// checks the mirror against sizeof(Smem) (equal up to the 16-byte rounding) for both versions,
// both streaming modes and both combine formats.
void check_smem_mirror(const MoEConfig& c, int block_m, runtime::Nvfp4KernelVersion version) {
  const runtime::Nvfp4LaunchShape l = runtime::nvfp4_launch_shape(c, block_m, version);
  const bool pipelined = version == runtime::Nvfp4KernelVersion::pipelined;
  const bool wide = version == runtime::Nvfp4KernelVersion::wide;
  const std::string kmax = std::to_string(std::max(c.shape.hidden, c.shape.intermediate));
  const std::string common = std::to_string(c.experts_per_rank()) + ", " + std::to_string(block_m) +
                             ", " + std::to_string(l.token_subtile) + ", " + kmax;
  const std::string smem_type =
      wide ? "megamoe::device::nvfp4_wide::Smem<" + std::to_string(c.experts_per_rank()) + ", " +
                 std::to_string(block_m) + ", " + std::to_string(l.token_subtile) + ", " +
                 std::to_string(l.stages) + ", " + std::to_string(l.reduce_buffers) + ", " +
                 std::to_string(128 * l.stage_blocks) + ">"
      : pipelined
          ? "megamoe::device::nvfp4_pipe::Smem<" + common + ", " + std::to_string(l.ksplit) + ", " +
                std::to_string(l.stages) + ", " + std::to_string(l.stage_blocks) + ", " +
                std::to_string(l.reduce_buffers) + ", " + (c.fp8_combine ? "1" : "0") + ">"
          : "megamoe::device::nvfp4_moe::Smem<" + common + ">";
  jit::KernelRequest r;
  r.name = "nvfp4_smem_mirror";
  r.source = std::string("#include \"megamoe/impls/") +
             (wide        ? "sm90_nvfp4_mega_moe_wide.cuh"
              : pipelined ? "sm90_nvfp4_mega_moe_pipelined.cuh"
                          : "sm90_nvfp4_mega_moe.cuh") +
             "\"\nconstexpr unsigned long long kHost = " + std::to_string(l.smem) +
             "ull;\nstatic_assert(sizeof(" + smem_type +
             ") <= kHost, \"host shared-memory size below sizeof(Smem)\");\nstatic_assert(kHost - "
             "sizeof(" +
             smem_type +
             ") < 16, \"host shared-memory mirror drifted from Smem\");\n"
             "extern \"C\" __global__ void nvfp4_smem_mirror() {}\n";
  r.entry = "nvfp4_smem_mirror";
  SCOPED_TRACE(describe(c) + " BLOCK_M=" + std::to_string(block_m) + " " + smem_type + " host " +
               std::to_string(l.smem));
  EXPECT_NO_THROW(jit::compile(r));
}

TEST(Nvfp4KernelCompile, HostSharedMemoryMirrorsTheKernelStructs) {
  for (const char* name : {"dsv4-flash", "h6144-e256-k8"}) {
    for (bool fp8 : {false, true}) {
      MoEConfig c = test::preset_config(name, 1, 512);
      c.fp8_combine = fp8;
      for (int bm : {8, 16}) {
        check_smem_mirror(c, bm, runtime::Nvfp4KernelVersion::pipelined);
        test::ScopedEnv ring("MEGAMOE_NVFP4_STAGES", "0");
        check_smem_mirror(c, bm, runtime::Nvfp4KernelVersion::pipelined);
      }
      if (!fp8) check_smem_mirror(c, 8, runtime::Nvfp4KernelVersion::simple);
      for (int bm : {8, 16, 32, 128}) check_smem_mirror(c, bm, runtime::Nvfp4KernelVersion::wide);
      test::ScopedEnv none("MEGAMOE_NVFP4_REDUCE_BUFFERS", "0");
      check_smem_mirror(c, 16, runtime::Nvfp4KernelVersion::wide);
    }
  }
  const MoEConfig small = config(1024, 512, 32, 8, 8, 512);
  for (int bm : reachable_block_ms(small)) {
    check_smem_mirror(small, bm, runtime::Nvfp4KernelVersion::pipelined);
    check_smem_mirror(small, bm, runtime::Nvfp4KernelVersion::simple);
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

TEST(Nvfp4KernelCompile, WeightTransformFamilyIsShapeFreeAndCompilesWithoutSpills) {
  // The layout kernels take their shapes at run time: one build for every NVFP4 configuration.
  const auto small =
      runtime::kernels_for(config(1024, 512, 32, 8, 2, 512), {"nvfp4_weight_transform"});
  const auto large =
      runtime::kernels_for(config(7168, 2048, 256, 8, 1, 64), {"nvfp4_weight_transform"});
  ASSERT_EQ(small.size(), 2u);
  ASSERT_EQ(large.size(), 2u);
  for (std::size_t i = 0; i < small.size(); ++i) {
    EXPECT_EQ(jit::cache_key(small[i]), jit::cache_key(large[i])) << small[i].name;
    SCOPED_TRACE(small[i].name);
    test::expect_no_spills(*jit::compile(small[i]));
  }
  MoEConfig mx = config(1024, 512, 32, 8, 2, 512);
  mx.weight_format = mx.act_format = Format::mxfp4;
  EXPECT_TRUE(runtime::nvfp4_weight_transform_kernels(mx).empty());
}

TEST(Nvfp4KernelCompile, TooWideShapesAreUnsupported) {
  const MoEConfig c = config(16384, 16384, 32, 8, 1, 64);
  EXPECT_THROW(runtime::nvfp4_launch_shape(c, 8), Unsupported);
}

TEST(Nvfp4KernelCompile, TuningOverridesAreChecked) {
  const MoEConfig c = config(4096, 2048, 32, 8, 1, 512);
  const auto pipelined = runtime::Nvfp4KernelVersion::pipelined;
  {
    test::ScopedEnv env("MEGAMOE_NVFP4_KSPLIT", "3");
    EXPECT_THROW(runtime::nvfp4_launch_shape(c, 8, pipelined), InvalidArgument);
  }
  test::ScopedEnv k4("MEGAMOE_NVFP4_KSPLIT", "4");
  EXPECT_EQ(runtime::nvfp4_launch_shape(c, 8, pipelined).ring, 2);
  {
    test::ScopedEnv env("MEGAMOE_NVFP4_RING", "8");
    EXPECT_THROW(runtime::nvfp4_launch_shape(c, 8, pipelined), InvalidArgument);
  }
  test::ScopedEnv r3("MEGAMOE_NVFP4_RING", "3");
  EXPECT_EQ(runtime::nvfp4_launch_shape(c, 8, pipelined).ring, 3);
  // Stages: 8 blocks per consumer warp fit next to an 8-token tile of H = 4096 (16 consumer
  // warps + the producer); H / 128 = 32 and I / 128 = 16 divide by 4 x 4: four blocks a stage.
  const runtime::Nvfp4LaunchShape staged = runtime::nvfp4_launch_shape(c, 8, pipelined);
  EXPECT_EQ(staged.stage_blocks, 4);
  EXPECT_EQ(staged.stages, 2);
  EXPECT_EQ(staged.threads, 544);
  {
    test::ScopedEnv one("MEGAMOE_NVFP4_STAGE_BLOCKS", "1");
    const runtime::Nvfp4LaunchShape single = runtime::nvfp4_launch_shape(c, 8, pipelined);
    EXPECT_EQ(single.stage_blocks, 1);
    EXPECT_EQ(single.stages, 8);
    EXPECT_EQ(single.smem - staged.smem,
              std::size_t{6 * 16});  // the same bytes, 6 more barrier pairs
  }
  {
    test::ScopedEnv two("MEGAMOE_NVFP4_STAGE_BLOCKS", "2");
    const runtime::Nvfp4LaunchShape pairs = runtime::nvfp4_launch_shape(c, 8, pipelined);
    EXPECT_EQ(pairs.stage_blocks, 2);
    EXPECT_EQ(pairs.stages, 4);
  }
  // Two split-K exchange buffers fit beside those stages; not beside a 16-token tile's.
  EXPECT_EQ(staged.reduce_buffers, 2);
  EXPECT_EQ(runtime::nvfp4_launch_shape(c, 16, pipelined).reduce_buffers, 1);
  {
    test::ScopedEnv one("MEGAMOE_NVFP4_REDUCE_BUFFERS", "1");
    const runtime::Nvfp4LaunchShape single = runtime::nvfp4_launch_shape(c, 8, pipelined);
    EXPECT_EQ(single.reduce_buffers, 1);
    EXPECT_EQ(single.stages, staged.stages);
    EXPECT_EQ(staged.smem - single.smem, std::size_t{4 * 4 * 32 * 4 * 4});  // one more buffer
    test::ScopedEnv two("MEGAMOE_NVFP4_REDUCE_BUFFERS", "2");
    EXPECT_THROW(runtime::nvfp4_launch_shape(c, 16, pipelined), InvalidArgument);
    test::ScopedEnv three("MEGAMOE_NVFP4_REDUCE_BUFFERS", "3");
    EXPECT_THROW(runtime::nvfp4_launch_shape(c, 8, pipelined), InvalidArgument);
  }
  {
    test::ScopedEnv bad("MEGAMOE_NVFP4_STAGE_BLOCKS", "3");
    EXPECT_THROW(runtime::nvfp4_launch_shape(c, 8, pipelined), InvalidArgument);
  }
  {
    // I / 128 = 4 blocks are one per warp of the K split: one block a stage, and 2 is refused.
    const MoEConfig narrow = config(1024, 512, 32, 8, 1, 512);
    EXPECT_EQ(runtime::nvfp4_launch_shape(narrow, 8, pipelined).stage_blocks, 1);
    test::ScopedEnv two("MEGAMOE_NVFP4_STAGE_BLOCKS", "2");
    EXPECT_THROW(runtime::nvfp4_launch_shape(narrow, 8, pipelined), InvalidArgument);
    test::ScopedEnv four("MEGAMOE_NVFP4_STAGE_BLOCKS", "4");
    EXPECT_THROW(runtime::nvfp4_launch_shape(narrow, 8, pipelined), InvalidArgument);
  }
  {
    // 16-token tiles: stages beside a tile of H = 4096 with one rank and bf16 combine (4 blocks
    // per warp fit); the multi-rank and FP8-combine kernels keep the register ring (their
    // builds spill).
    const runtime::Nvfp4LaunchShape wide_tile = runtime::nvfp4_launch_shape(c, 16, pipelined);
    EXPECT_EQ(wide_tile.stages * wide_tile.stage_blocks, 4);
    MoEConfig two = c;
    two.num_ranks = 2;
    EXPECT_EQ(runtime::nvfp4_launch_shape(two, 16, pipelined).stages, 0);
    MoEConfig fp8 = c;
    fp8.fp8_combine = true;
    EXPECT_EQ(runtime::nvfp4_launch_shape(fp8, 16, pipelined).stages, 0);
    test::ScopedEnv forced("MEGAMOE_NVFP4_STAGES", "4");
    EXPECT_THROW(runtime::nvfp4_launch_shape(two, 16, pipelined), InvalidArgument);
  }
  {
    // A 16-token tile of H = 6144 leaves no room for 4 stages: the register ring.
    const MoEConfig wide = config(6144, 3072, 32, 8, 1, 512);
    EXPECT_EQ(runtime::nvfp4_launch_shape(wide, 16, pipelined).stages, 0);
    test::ScopedEnv forced("MEGAMOE_NVFP4_STAGES", "8");
    EXPECT_THROW(runtime::nvfp4_launch_shape(wide, 16, pipelined), InvalidArgument);
  }
  {
    test::ScopedEnv bad("MEGAMOE_NVFP4_STAGES", "1");
    EXPECT_THROW(runtime::nvfp4_launch_shape(c, 8, pipelined), InvalidArgument);
  }
  {
    // H / 128 = 10 blocks do not split over 4 warps: no stages.
    const MoEConfig odd = config(1280, 512, 32, 8, 1, 512);
    EXPECT_EQ(runtime::nvfp4_launch_shape(odd, 8, pipelined).stages, 0);
  }
}

}  // namespace
}  // namespace megamoe
