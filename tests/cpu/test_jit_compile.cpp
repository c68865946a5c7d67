// NVRTC compiles for sm_90a without a GPU; the memory and disk caches; diagnostics.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "jit/compiler.hpp"
#include "jit/disk_cache.hpp"
#include "jit/selftest_kernel.hpp"
#include "jit_test_support.hpp"
#include "megamoe/error.hpp"
#include "megamoe/presets.hpp"
#include "runtime/bandwidth_probe.hpp"
#include "runtime/kernel_registry.hpp"

namespace megamoe::jit {
namespace {

// Every test gets an empty disk cache and an empty memory cache.
class JitCompile : public ::testing::Test {
 protected:
  void SetUp() override { clear_memory_cache(); }
  void TearDown() override { clear_memory_cache(); }

  test::ScratchDir cache_;
  test::ScopedEnv cache_env_{"MEGAMOE_CACHE_DIR", cache_.path().string()};
};

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::size_t count_files(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

TEST_F(JitCompile, SelftestKernelCompilesForSm90a) {
  const auto k = compile(selftest_request(SelftestShape{256, 64}));
  ASSERT_GE(k->cubin.size(), 4u);
  EXPECT_EQ(k->cubin.substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_NE(k->lowered_name.find("cluster_axpy_kernel"), std::string::npos) << k->lowered_name;
  EXPECT_NE(k->lowered_name.find("ILi256ELi64E"), std::string::npos) << k->lowered_name;
  EXPECT_GT(k->registers, 0) << "no ptxas report in the log:\n" << k->log;
  EXPECT_FALSE(k->from_cache);
  EXPECT_EQ(k->key, cache_key(selftest_request(SelftestShape{256, 64})));
  test::expect_no_spills(*k);
}

// The floor's reduction, from the kernel tree as the bench and t1_stream_floor.cu build it.
TEST_F(JitCompile, ReadBandwidthKernelCompilesForSm90a) {
  const auto k = compile(runtime::read_bandwidth_request());
  ASSERT_GE(k->cubin.size(), 4u);
  EXPECT_EQ(k->cubin.substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_NE(k->lowered_name.find("read_bandwidth_kernel"), std::string::npos) << k->lowered_name;
  test::expect_no_spills(*k);
}

TEST_F(JitCompile, Sm100aIsAcceptedAndCachedSeparately) {
  const CacheStats before = cache_stats();
  const auto hopper = compile(selftest_request(SelftestShape{128, 4}, "sm_90a"));
  const auto blackwell = compile(selftest_request(SelftestShape{128, 4}, "sm_100a"));
  EXPECT_NE(hopper->key, blackwell->key);
  EXPECT_NE(hopper->cubin, blackwell->cubin);
  EXPECT_EQ(cache_stats().compiles - before.compiles, 2u);
}

TEST_F(JitCompile, SecondRequestHitsMemoryThenDiskCache) {
  const KernelRequest r = selftest_request(SelftestShape{128, 8});
  const CacheStats before = cache_stats();
  const auto first = compile(r);
  const auto second = compile(r);
  EXPECT_EQ(second.get(), first.get());
  CacheStats now = cache_stats();
  EXPECT_EQ(now.compiles - before.compiles, 1u);
  EXPECT_EQ(now.memory_hits - before.memory_hits, 1u);

  // A new process (modelled by forgetting the memory cache) reads the disk entry.
  clear_memory_cache();
  const auto third = compile(r);
  EXPECT_TRUE(third->from_cache);
  EXPECT_EQ(third->cubin, first->cubin);
  EXPECT_EQ(third->lowered_name, first->lowered_name);
  EXPECT_EQ(third->registers, first->registers);
  now = cache_stats();
  EXPECT_EQ(now.compiles - before.compiles, 1u);
  EXPECT_EQ(now.disk_hits - before.disk_hits, 1u);
  EXPECT_TRUE(std::filesystem::exists(entry_path(cache_.path(), first->key)));
  EXPECT_EQ(count_files(cache_.path()), 1u) << "temporary files left behind";
}

TEST_F(JitCompile, CorruptDiskEntryIsRecompiledAndRepaired) {
  const KernelRequest r = selftest_request(SelftestShape{128, 8});
  const auto good = compile(r);
  const auto path = entry_path(cache_.path(), good->key);
  const std::string bytes = read_file(path);

  // One flipped cubin byte, then a truncated file: both must be rejected, never loaded.
  for (int damage = 0; damage < 2; ++damage) {
    std::string broken = bytes;
    if (damage == 0) {
      broken[broken.size() - good->log.size() - 10] ^= 0x40;
    } else {
      broken.resize(broken.size() / 2);
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << broken;
    std::string why;
    EXPECT_FALSE(read_entry(cache_.path(), good->key, &why).has_value());
    EXPECT_FALSE(why.empty());

    clear_memory_cache();
    testing::internal::CaptureStderr();
    const auto again = compile(r);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_FALSE(again->from_cache) << "damage " << damage;
    EXPECT_EQ(again->cubin, good->cubin);
    EXPECT_NE(err.find("recompiling"), std::string::npos) << err;
    EXPECT_TRUE(read_entry(cache_.path(), good->key).has_value()) << "entry not repaired";
  }
}

TEST_F(JitCompile, CompileErrorNamesKernelArgumentsAndLog) {
  KernelRequest r;
  r.name = "broken_kernel";
  r.arguments = "tile=7";
  r.source =
      "#include \"megamoe/common.cuh\"\n"
      "__global__ void broken(int* p) { p[0] = undeclared_name_xyz; }\n";
  r.entry = "broken";
  try {
    compile(r);
    FAIL() << "a kernel with an undeclared name compiled";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("broken_kernel"), std::string::npos) << what;
    EXPECT_NE(what.find("tile=7"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_name_xyz"), std::string::npos) << what;
    EXPECT_NE(what.find("sm_90a"), std::string::npos) << what;
  }
  EXPECT_EQ(count_files(cache_.path()), 0u) << "a failed compile left a cache entry";
}

TEST_F(JitCompile, LocalMemoryIsReported) {
  // A dynamically indexed array lives in local memory: the detector must see it, or the
  // no-spill checks of the other tests could never fail.
  KernelRequest r;
  r.name = "uses_local_memory";
  r.source =
      "extern \"C\" __global__ void uses_local(float* out, const int* index) {\n"
      "  float scratch[256];\n"
      "  for (int i = 0; i < 256; ++i) scratch[index[i] & 255] = out[i];\n"
      "  out[threadIdx.x] = scratch[index[threadIdx.x] & 255];\n"
      "}\n";
  r.entry = "uses_local";
  testing::internal::CaptureStderr();
  const auto k = compile(r);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(k->lowered_name, "uses_local");
  EXPECT_GT(k->local_bytes, 0u) << k->log;
  EXPECT_NE(resource_problems(*k).find("uses_local_memory"), std::string::npos);
  EXPECT_NE(err.find("local memory"), std::string::npos) << err;
}

TEST_F(JitCompile, VerboseAndDumpDiagnostics) {
  test::ScratchDir dump;
  test::ScopedEnv verbose("MEGAMOE_JIT_VERBOSE", "1");
  test::ScopedEnv dump_env("MEGAMOE_JIT_DUMP", dump.path().string());
  const KernelRequest r = selftest_request(SelftestShape{64, 4});
  testing::internal::CaptureStderr();
  const auto k = compile(r);
  compile(r);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("compiled kernel 'selftest_cluster_axpy'"), std::string::npos) << err;
  EXPECT_NE(err.find(" ms"), std::string::npos) << err;
  EXPECT_NE(err.find("memory cache hit"), std::string::npos) << err;
  const std::string stem = r.name + "-" + k->key.substr(0, 16);
  EXPECT_NE(read_file(dump.path() / (stem + ".ptx")).find(".entry"), std::string::npos);
  EXPECT_NE(read_file(dump.path() / (stem + ".log")).find("registers"), std::string::npos);
  EXPECT_EQ(read_file(dump.path() / (stem + ".cu")), r.source);
}

TEST_F(JitCompile, HeaderEditedInKernelDirIsCompiled) {
  // MEGAMOE_KERNEL_DIR reaches the compiler, not only the key: a broken header breaks the build.
  test::ScratchDir scratch;
  const auto root = test::copy_kernel_tree(scratch.path() / "kernels");
  std::ofstream(root / "megamoe" / "common.cuh", std::ios::app)
      << "\nstatic_assert(false, \"edited header\");\n";
  test::ScopedEnv env("MEGAMOE_KERNEL_DIR", root.string());
  try {
    compile(selftest_request(SelftestShape{64, 4}));
    FAIL() << "the edited header was not used";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("edited header"), std::string::npos) << e.what();
  }
}

TEST_F(JitCompile, EveryRegisteredKernelCompilesWithoutSpills) {
  // NVRTC 13.0 may crash on malformed inline PTX: compiling everything here finds that in CI.
  std::size_t kernels = 0;
  for (const char* preset : {"dsv3", "qwen3-235b"}) {
    for (int ranks : {1, 8}) {
      MoEConfig config;
      config.shape = find_preset(preset).shape;
      config.num_ranks = ranks;
      config.max_tokens_per_rank = 128;
      for (Format f : {Format::nvfp4, Format::mxfp4, Format::fp8, Format::bf16}) {
        config.weight_format = config.act_format = f;
        for (const KernelRequest& r : runtime::kernels_for(config)) {
          SCOPED_TRACE(r.name + " " + r.arguments + " for " + describe(config));
          const auto k = compile(r);
          test::expect_no_spills(*k);
          ++kernels;
        }
      }
    }
  }
  EXPECT_GT(kernels, 0u);
}

}  // namespace
}  // namespace megamoe::jit
