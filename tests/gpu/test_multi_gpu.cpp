// Multi-GPU expert parallelism (docs/multi_gpu.md). On one GPU: the `nccl` provider with one rank
// against the `local` provider, bitwise, in this process and through the launcher
// (`megamoe bench --ranks 1 --check-virtual`, one child process). On >= 2 GPUs: the launcher
// across every GPU, bitwise equal to R virtual ranks on GPU 0, and the timeout test (the last
// rank never calls the layer; the others stop with a fault naming rank and phase).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "megamoe/buffer.hpp"
#include "megamoe/heuristics.hpp"
#include "megamoe/presets.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/device_select.hpp"
#include "runtime/ep_nvfp4_ranks.hpp"
#include "runtime/nccl_library.hpp"

namespace megamoe {
namespace {

struct ToolRun {
  int status = -1;
  std::string output;
};

// The megamoe tool: $MEGAMOE_TOOL, else the build's own, else the one beside this test binary
// (a folder of binaries carried to a GPU machine).
std::string tool_path() {
  if (const char* env = std::getenv("MEGAMOE_TOOL")) return env;
  if (::access(MEGAMOE_TOOL_PATH, X_OK) == 0) return MEGAMOE_TOOL_PATH;
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : std::string();
  return dir.substr(0, dir.rfind('/') + 1) + "megamoe";
}

ToolRun run_tool(const std::string& args) {
  const std::string cmd = tool_path() + " " + args + " 2>&1";
  ToolRun r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) r.output += buf;
  const int st = ::pclose(pipe);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// `megamoe bench ... --check-virtual`: a clean exit and every one of its `rows` bitwise equal to
// the virtual ranks' run.
ToolRun run_virtual_check(const std::string& args, int rows) {
  const ToolRun r = run_tool(args);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "bitwise equal"), rows) << r.output;
  EXPECT_EQ(count_of(r.output, "DIFFERS"), 0) << r.output;
  return r;
}

class MultiGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::driver_available(&why)) GTEST_SKIP() << "no CUDA GPU: " << why;
    if (!nccl::available(&why)) GTEST_SKIP() << "NCCL unavailable: " << why;
    // NVLink multicast stays off on the lent machines.
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);
    ::setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
    gpus_ = cuda::device_count();
  }
  bool have_two_gpus() const { return gpus_ >= 2; }
  int gpus_ = 0;
};

// One rank through NCCL symmetric memory against the local provider, same seed: the same bytes.
TEST_F(MultiGpu, NcclProviderWithOneRankMatchesLocalBitwise) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const nccl::Library& n = nccl::library();
  cuda::driver();
  ncclUniqueId id{};
  MEGAMOE_NCCL(n.ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  MEGAMOE_NCCL(n.ncclCommInitRank(&comm, 1, id, 0));

  struct Shape {
    MoEShape shape;
    std::vector<std::int64_t> tokens;
  };
  const std::vector<Shape> shapes = {
      {{1024, 512, 32, 8}, {1, 8, 16, 127, 128}},
      {find_preset("dsv4-flash").shape, {1, 16}},
  };
  runtime::Stream stream;
  for (const Shape& s : shapes) {
    MoEConfig c;
    c.shape = s.shape;
    c.num_ranks = 1;
    c.max_tokens_per_rank = 128;
    SCOPED_TRACE(describe(c));
    const runtime::EpNvfp4Setup setup{c, seed, {}};
    {
      const SymmBuffer nb = get_symm_buffer_for_mega_moe(c, "nccl", comm);
      const SymmBuffer lb = get_symm_buffer_for_mega_moe(c, "local");
      ASSERT_EQ(nb.memory->kind(), "nccl");
      runtime::EpNvfp4Ranks on_nccl(setup, nb);
      runtime::EpNvfp4Ranks on_local(setup, lb);
      for (const std::int64_t t : s.tokens) {
        SCOPED_TRACE("T=" + std::to_string(t));
        for (runtime::EpNvfp4Ranks* r : {&on_nccl, &on_local}) {
          r->set_tokens(t);
          r->pre_dispatch(stream.get());
          r->moe(stream.get());
        }
        stream.synchronize();
        const std::vector<std::uint16_t> a = on_nccl.output(0), b = on_local.output(0);
        ASSERT_EQ(a.size(), static_cast<std::size_t>(t * c.shape.hidden));
        EXPECT_EQ(runtime::count_poison(a), 0) << "rows the kernel never wrote (nccl)";
        EXPECT_EQ(runtime::first_difference(a, b), -1) << "nccl and local outputs differ";
        // Not a vacuous comparison: the layer produced non-zero values.
        std::int64_t nonzero = 0;
        for (const std::uint16_t v : a) nonzero += (v & 0x7FFFu) != 0 ? 1 : 0;
        EXPECT_GT(nonzero, static_cast<std::int64_t>(a.size()) / 2);
      }
    }
  }
  MEGAMOE_NCCL(n.ncclCommDestroy(comm));
}

// The launcher end to end with one child process: NCCL init from a relayed unique id, the nccl
// provider, the virtual-rank comparison on the same GPU, timing; last a call with no tokens.
TEST_F(MultiGpu, LauncherWithOneRankIsBitwiseEqualToTheLocalProvider) {
  const ToolRun r = run_tool(
      "bench --ranks 1 --preset dsv4-flash --tokens 1,8,16,128 --rank-tokens 0 --check-virtual "
      "--iters 2 --reps 3");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "bitwise equal"), 5) << r.output;
  EXPECT_EQ(count_of(r.output, "DIFFERS"), 0) << r.output;
  EXPECT_NE(r.output.find("all 1 ranks ok"), std::string::npos) << r.output;
}

TEST_F(MultiGpu, AcrossGpusBitwiseEqualToVirtualRanks) {
  if (!have_two_gpus()) GTEST_SKIP() << "needs >= 2 GPUs, found " << gpus_;
  const int ranks = gpus_ >= 8 ? 8 : (gpus_ >= 4 ? 4 : 2);
  run_virtual_check("bench --ranks " + std::to_string(ranks) +
                        " --preset dsv4-flash --tokens 1,8,16,128 --check-virtual --iters 2 "
                        "--reps 3",
                    4);
}

// FP8 combine slots across GPUs: T = 1 (the pipelined kernel) and 128 per rank (the wide one at
// R = 2), every rank's output bitwise equal to R virtual ranks on one GPU.
TEST_F(MultiGpu, AcrossGpusFp8CombineBitwiseEqualToVirtualRanks) {
  if (!have_two_gpus()) GTEST_SKIP() << "needs >= 2 GPUs, found " << gpus_;
  const ToolRun r = run_virtual_check(
      "bench --ranks 2 --preset dsv4-flash --tokens 1,128 --fp8-combine --check-virtual "
      "--iters 2 --reps 3",
      2);
  EXPECT_NE(r.output.find("fp8 combine slots"), std::string::npos) << r.output;
}

// Tile choice on the device with one process per GPU: every rank counts every rank's routes and
// reaches the verdict R virtual ranks reach (the bench checks each rank's against the host's
// rule on the same routes and fails the run on a mismatch), so every output stays bitwise equal to
// the virtual ranks'. Zipf(1.2) in expert order puts the hot experts on rank 0 and leaves rank 1
// about one route per expert: both ranks hand the call to their 32-token kernels at 48 and 64
// tokens a rank (the table's 8) and at 128 (the table's 16). Then the permuted Zipf.
TEST_F(MultiGpu, AcrossGpusTileChoiceBitwiseEqualToVirtualRanks) {
  if (!have_two_gpus()) GTEST_SKIP() << "needs >= 2 GPUs, found " << gpus_;
  const ToolRun r = run_virtual_check(
      "bench --ranks 2 --preset dsv4-flash --routing zipf-by-id --tokens 48,64,128 "
      "--check-virtual --iters 2 --reps 3",
      3);
  EXPECT_EQ(count_of(r.output, "8 / 32 (ran 32, 32)"), 2) << r.output;
  EXPECT_EQ(count_of(r.output, "16 / 32 (ran 32, 32)"), 1) << r.output;
  const ToolRun z = run_virtual_check(
      "bench --ranks 2 --preset dsv4-flash --routing zipf --tokens 24,128 --check-virtual "
      "--iters 2 --reps 3",
      2);
  EXPECT_EQ(count_of(z.output, "(ran "), 2) << z.output;
}

// Ragged batches across GPUs, as data-parallel ranks send them: an idle rank (0 tokens) beside a
// busy one, ranks whose counts give them different BLOCK_M tables (so different kernels in one
// call: the ranks meet only at the cross-rank barriers), both ranks idle. Every output is complete
// and repeatable, each rank's verdict matches the host's rule, and every rank's output equals the
// virtual ranks' (whose table comes from the row's largest count): bitwise where every rank ran
// the virtual run's tile, else within the oracle gates. Each row with tokens runs again with its
// largest count passed as max_tokens_across_ranks ("(max N)"): one table on every rank, bitwise
// equal to the virtual ranks.
TEST_F(MultiGpu, AcrossGpusRaggedTokenCounts) {
  if (!have_two_gpus()) GTEST_SKIP() << "needs >= 2 GPUs, found " << gpus_;
  MoEConfig c;
  c.shape = find_preset("dsv4-flash").shape;
  c.num_ranks = 2;
  c.max_tokens_per_rank = 512;
  ASSERT_NE(get_block_m_for_mega_moe(c, 1), get_block_m_for_mega_moe(c, 512))
      << "the rows 1/512 and 512/0 must give the two ranks different tables";
  const ToolRun r = run_tool(
      "bench --ranks 2 --preset dsv4-flash --rank-tokens 0/37,1/512,512/0,0/0,5/3 "
      "--check-virtual --iters 2 --reps 3");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "bitwise equal") + count_of(r.output, "within the gates"), 9)
      << r.output;
  EXPECT_EQ(count_of(r.output, "DIFFERS"), 0) << r.output;
  EXPECT_EQ(count_of(r.output, "FAILED"), 0) << r.output;
  int shared = 0;
  for (std::size_t at = r.output.find("(max "); at != std::string::npos;
       at = r.output.find("(max ", at + 1)) {
    if (!std::isdigit(static_cast<unsigned char>(r.output[at + 5]))) continue;  // a heading
    const std::size_t end = r.output.find('\n', at);
    EXPECT_NE(r.output.substr(at, end - at).find("bitwise equal"), std::string::npos)
        << "a row with max_tokens_across_ranks must equal the virtual ranks bitwise: "
        << r.output.substr(at, end - at);
    ++shared;
  }
  EXPECT_EQ(shared, 4) << r.output;
}

TEST_F(MultiGpu, AMissingRankTimesOutNamingRankAndPhase) {
  if (!have_two_gpus()) GTEST_SKIP() << "needs >= 2 GPUs, found " << gpus_;
  const int ranks = 2;
  const ToolRun r = run_tool("bench --ranks " + std::to_string(ranks) +
                             " --preset dsv4-flash --tokens 8 --timeout-test "
                             "--peer-timeout-ms 1500 --group-timeout-ms 300000");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("PASS rank 0: DeviceFault: nvfp4_mega_moe: cross-rank timeout on rank 0"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank(s) that did not arrive: 1 "), std::string::npos) << r.output;
  EXPECT_EQ(count_of(r.output, "FAIL rank"), 0) << r.output;
}

}  // namespace
}  // namespace megamoe
