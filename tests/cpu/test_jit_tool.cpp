// `megamoe info`, `megamoe precompile` and the multi-GPU bench's option checks as a user runs
// them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "jit/compiler.hpp"
#include "jit/selftest_kernel.hpp"
#include "jit_test_support.hpp"

namespace megamoe {
namespace {

struct ToolRun {
  int exit_code;
  std::string output;  // stdout and stderr
};

ToolRun run_tool(const std::string& arguments) {
  const std::string command = std::string(MEGAMOE_TOOL_PATH) + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string out;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(JitTool, InfoReportsTheGpuOrWhyThereIsNoneAndExitsZero) {
  const ToolRun r = run_tool("info");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const bool gpu = r.output.find("gpu 0: ") != std::string::npos;
  const bool no_gpu = r.output.find("no GPU: ") != std::string::npos;
  EXPECT_TRUE(gpu != no_gpu) << r.output;
  if (gpu) {
    EXPECT_NE(r.output.find(" SMs, "), std::string::npos) << r.output;
  }
  EXPECT_NE(r.output.find("nvrtc: " + jit::nvrtc_version()), std::string::npos) << r.output;
}

TEST(JitTool, PrecompileFillsTheCacheThenFindsItThere) {
  test::ScratchDir cache;
  test::ScopedEnv env("MEGAMOE_CACHE_DIR", cache.path().string());
  const std::string arguments =
      "precompile --preset dsv3 --family nvfp4,fp8 --ranks 8 --max-tokens 64";
  const ToolRun first = run_tool(arguments);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("compiled selftest_cluster_axpy"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find(" 0 failed"), std::string::npos) << first.output;
  const std::string key = jit::cache_key(jit::selftest_request(jit::SelftestShape{256, 64}));
  EXPECT_TRUE(std::filesystem::exists(cache.path() / (key + ".jit")));

  // The same configuration again (a second rank, a restarted server): nothing left to compile.
  const ToolRun second = run_tool(arguments);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("cached   selftest_cluster_axpy"), std::string::npos)
      << second.output;
  EXPECT_NE(second.output.find(": 0 compiled"), std::string::npos) << second.output;
  EXPECT_EQ(second.output.find("\ncompiled "), std::string::npos) << second.output;
}

TEST(JitTool, PrecompileRejectsBadOptionsNamingThem) {
  ToolRun r = run_tool("precompile --preset nope");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("'--preset'"), std::string::npos) << r.output;
  r = run_tool("precompile --preset dsv3 --ranks 3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("'--ranks'"), std::string::npos) << r.output;
  r = run_tool("precompile --preset dsv3 --family int3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("'--family'"), std::string::npos) << r.output;
  r = run_tool("precompile");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("'--preset'"), std::string::npos) << r.output;
}

// Ragged rows of the multi-GPU bench are checked in the parent, before any process or GPU.
TEST(JitTool, BenchRejectsBadRankTokensNamingThem) {
  for (const char* rows : {"1/2/3", "4", "1/x", "1//2", "1/2,", "-1/2"}) {
    const ToolRun r = run_tool(std::string("bench --ranks 2 --rank-tokens ") + rows);
    EXPECT_NE(r.exit_code, 0) << rows;
    EXPECT_NE(r.output.find("'--rank-tokens'"), std::string::npos) << rows << ": " << r.output;
  }
}

}  // namespace
}  // namespace megamoe
