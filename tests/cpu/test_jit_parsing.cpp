// The two text scanners of the JIT: #include directives and the ptxas resource report.
#include <gtest/gtest.h>

#include "jit/kernel_tree.hpp"
#include "jit/ptxas_info.hpp"

namespace megamoe::jit {
namespace {

TEST(JitIncludeScan, FindsBothFormsAndSkipsOtherLines) {
  const auto names = scan_includes(
      "#include \"megamoe/a.cuh\"\n"
      "  #  include <cuda_bf16.h>\n"
      "// #include \"megamoe/commented.cuh\"\n"
      "#define X \"#include\"\n"
      "#include_next <nope>\n"
      "\t#include\t\"megamoe/b/c.cuh\"  // trailing\n"
      "#include \"unterminated\n"
      "#include");
  // "#include_next" is a GNU extension NVRTC does not use; it is read as "#include" followed by
  // "_next", which starts with neither '"' nor '<' and so is skipped.
  EXPECT_EQ(names, (std::vector<std::string>{"megamoe/a.cuh", "cuda_bf16.h", "megamoe/b/c.cuh"}));
}

TEST(JitIncludeScan, ClosureFollowsHeadersRecursivelyAndRecordsMissingOnes) {
  const IncludeClosure c = include_closure(
      "#include \"megamoe/selftest/cluster_axpy.cuh\"\n#include \"megamoe/not_there.cuh\"\n"
      "#include <cuda_runtime.h>\n",
      KernelTree::embedded());
  std::vector<std::string> names;
  for (const auto& [name, content] : c.headers) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"megamoe/common.cuh", "megamoe/selftest/cluster_axpy.cuh",
                                      "megamoe/selftest/cluster_ptx.cuh"}));
  EXPECT_EQ(c.missing, (std::vector<std::string>{"megamoe/not_there.cuh"}));
}

TEST(JitIncludeScan, NamesOutsideTheTreeNeverResolve) {
  const KernelTree tree = KernelTree::embedded();
  EXPECT_TRUE(tree.read("megamoe/common.cuh").has_value());
  EXPECT_FALSE(tree.read("/etc/passwd").has_value());
  EXPECT_FALSE(tree.read("megamoe/../megamoe/common.cuh").has_value());
  EXPECT_FALSE(tree.read("").has_value());
}

TEST(JitPtxasInfo, ReadsRegistersStackAndSpillsOfEveryFunction) {
  // Shaped like NVRTC 13.0's report for a module with an entry and a non-inlined function.
  const PtxasInfo info = parse_ptxas_info(
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Function properties for _Z6helperv\n"
      "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z1kPf\n"
      "ptxas         .     16 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 16 bytes cumulative stack size\n"
      "ptxas info    : Compile time = 10.887 ms\n");
  EXPECT_TRUE(info.found);
  EXPECT_EQ(info.registers, 168);
  EXPECT_EQ(info.local_bytes, 24u);
  EXPECT_EQ(info.spill_bytes, 8u + 12u + 4u + 4u);
}

TEST(JitPtxasInfo, CleanKernelAndOlderLmemForm) {
  const PtxasInfo clean = parse_ptxas_info(
      "ptxas info    : Function properties for k\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 12 registers, used 1 barriers\n");
  EXPECT_TRUE(clean.found);
  EXPECT_EQ(clean.registers, 12);
  EXPECT_EQ(clean.local_bytes, 0u);
  EXPECT_EQ(clean.spill_bytes, 0u);

  const PtxasInfo older =
      parse_ptxas_info("ptxas info    : Used 40 registers, 32 bytes lmem, 352 bytes cmem[0]\n");
  EXPECT_EQ(older.registers, 40);
  EXPECT_EQ(older.local_bytes, 32u);

  EXPECT_FALSE(parse_ptxas_info("no ptxas output at all").found);
}

}  // namespace
}  // namespace megamoe::jit
