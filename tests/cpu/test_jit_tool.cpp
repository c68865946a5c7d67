// `megamoe info`, `megamoe precompile` and the multi-GPU bench's option checks as a user runs
// them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

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

// The values after " = " of every listed line of one kernel name, e.g. {"4096", "2048", ...}.
std::vector<std::vector<std::string>> listed_arguments(const std::string& output,
                                                       const std::string& name) {
  std::vector<std::vector<std::string>> out;
  std::size_t begin = 0;
  while (begin < output.size()) {
    const std::size_t end = std::min(output.find('\n', begin), output.size());
    const std::string line = output.substr(begin, end - begin);
    begin = end + 1;
    const std::size_t eq = line.find(" = ");
    if (!line.starts_with(name + " ") || eq == std::string::npos || !line.ends_with(")")) continue;
    std::vector<std::string> values;
    const std::string list = line.substr(eq + 3, line.size() - eq - 4);
    for (std::size_t b = 0; b <= list.size();) {
      const std::size_t comma = std::min(list.find(", ", b), list.size());
      values.push_back(list.substr(b, comma - b));
      b = comma + 2;
    }
    out.push_back(std::move(values));
  }
  return out;
}

// A config's activation kind and FP8 combine pick other kernels than the defaults: precompile
// must be able to name them, or such a server compiles on its first call.
TEST(JitTool, PrecompileListsTheKernelsOfTheActivationAndFp8Combine) {
  const std::string base =
      "precompile --preset dsv4-flash --family nvfp4 --kernels nvfp4_mega_moe --list";
  const ToolRun plain = run_tool(base);
  const ToolRun chosen = run_tool(base + " --activation geglu --fp8-combine");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(chosen.exit_code, 0) << chosen.output;
  for (const char* name : {"sm90_nvfp4_mega_moe_pipelined", "sm90_nvfp4_mega_moe_wide"}) {
    const auto p = listed_arguments(plain.output, name);
    const auto c = listed_arguments(chosen.output, name);
    ASSERT_FALSE(p.empty()) << name << ": " << plain.output;
    ASSERT_EQ(p.size(), c.size()) << name << ": " << chosen.output;
    for (std::size_t i = 0; i < p.size(); ++i) {
      ASSERT_GE(p[i].size(), 10u) << name;
      EXPECT_EQ(p[i][8], "0") << name << ": act, swiglu by default";
      EXPECT_EQ(c[i][8], "1") << name << ": act, geglu";
      EXPECT_EQ(p[i].back(), "0") << name << ": fp8_combine off by default";
      EXPECT_EQ(c[i].back(), "1") << name << ": fp8_combine";
    }
  }
  const ToolRun bad = run_tool("precompile --preset dsv4-flash --activation relu --list");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("'--activation'"), std::string::npos) << bad.output;
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
