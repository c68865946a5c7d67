// The JIT cache key: what changes it, what does not, and that it holds no path.
#include <gtest/gtest.h>

#include <fstream>

#include "jit/compiler.hpp"
#include "jit/kernel_tree.hpp"
#include "jit/selftest_kernel.hpp"
#include "jit_test_support.hpp"
#include "megamoe/error.hpp"

namespace megamoe::jit {
namespace {

void append(const std::filesystem::path& file, const std::string& text) {
  std::ofstream(file, std::ios::app) << text;
}

KernelRequest selftest() {
  return selftest_request(SelftestShape{128, 8});
}

TEST(JitKey, IsA256BitHexDigestAndDeterministic) {
  const std::string key = cache_key(selftest(), KernelTree::embedded());
  ASSERT_EQ(key.size(), 64u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos) << key;
  EXPECT_EQ(cache_key(selftest(), KernelTree::embedded()), key);
}

TEST(JitKey, ChangesWithEveryInputOfTheCompile) {
  const KernelTree tree = KernelTree::embedded();
  const std::string base = cache_key(selftest(), tree);
  KernelRequest r = selftest();
  r.options.push_back("-DMEGAMOE_TEST_FLAG=1");
  EXPECT_NE(cache_key(r, tree), base) << "options";
  r = selftest();
  r.arch = "sm_100a";
  EXPECT_NE(cache_key(r, tree), base) << "arch";
  r = selftest();
  r.source += "\n// a comment changes the translation unit\n";
  EXPECT_NE(cache_key(r, tree), base) << "source";
  EXPECT_NE(cache_key(selftest_request(SelftestShape{128, 16}), tree), base) << "entry";
  // The name and the human-readable arguments do not change the binary.
  r = selftest();
  r.name = "renamed";
  r.arguments = "other words";
  EXPECT_EQ(cache_key(r, tree), base);
}

TEST(JitKey, EditingAnIncludedHeaderChangesItEditingAnotherDoesNot) {
  test::ScratchDir scratch;
  const auto root = test::copy_kernel_tree(scratch.path() / "kernels");
  const KernelTree tree = KernelTree::from_directory(root);
  const std::string before = cache_key(selftest(), tree);

  // Not included by the self-test: an edit and a new file leave the key alone.
  std::filesystem::create_directories(root / "megamoe" / "unrelated");
  append(root / "megamoe" / "unrelated" / "other.cuh", "#pragma once\nint unrelated;\n");
  EXPECT_EQ(cache_key(selftest(), tree), before);

  // Included two levels down (cluster_axpy.cuh -> cluster_ptx.cuh -> common.cuh).
  append(root / "megamoe" / "common.cuh", "\n// edited\n");
  const std::string after_common = cache_key(selftest(), tree);
  EXPECT_NE(after_common, before);
  append(root / "megamoe" / "selftest" / "cluster_ptx.cuh", "\n// edited\n");
  EXPECT_NE(cache_key(selftest(), tree), after_common);
}

TEST(JitKey, AHeaderAppearingWhereOneWasMissingChangesIt) {
  test::ScratchDir scratch;
  const auto root = test::copy_kernel_tree(scratch.path() / "kernels");
  const KernelTree tree = KernelTree::from_directory(root);
  KernelRequest r = selftest();
  r.source = "#include \"megamoe/later.cuh\"\n" + r.source;
  const std::string before = cache_key(r, tree);
  append(root / "megamoe" / "later.cuh", "#pragma once\n");
  EXPECT_NE(cache_key(r, tree), before);
}

TEST(JitKey, HoldsNoPathSoTheCacheSurvivesAMove) {
  // The same tree at two different places, and the copy embedded in the library, give one key.
  test::ScratchDir a, b;
  const auto root_a = test::copy_kernel_tree(a.path() / "kernels");
  const auto root_b = test::copy_kernel_tree(b.path() / "deeper" / "install" / "kernels");
  const std::string key_a = cache_key(selftest(), KernelTree::from_directory(root_a));
  EXPECT_EQ(cache_key(selftest(), KernelTree::from_directory(root_b)), key_a);
  EXPECT_EQ(cache_key(selftest(), KernelTree::embedded()), key_a)
      << "the embedded kernels differ from the source tree: rebuild the library";
}

TEST(JitKey, KernelDirEnvironmentSelectsTheTree) {
  test::ScratchDir scratch;
  const auto root = test::copy_kernel_tree(scratch.path() / "kernels");
  append(root / "megamoe" / "common.cuh", "\n// edited\n");
  const std::string embedded = cache_key(selftest());
  test::ScopedEnv env("MEGAMOE_KERNEL_DIR", root.string());
  EXPECT_EQ(cache_key(selftest()), cache_key(selftest(), KernelTree::from_directory(root)));
  EXPECT_NE(cache_key(selftest()), embedded);
}

TEST(JitKey, RejectsABadRequestNamingTheField) {
  KernelRequest r = selftest();
  r.arch = "sm_80";
  try {
    cache_key(r);
    FAIL() << "sm_80 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "request.arch");
  }
  r = selftest();
  r.entry.clear();
  EXPECT_THROW(cache_key(r), InvalidArgument);
}

}  // namespace
}  // namespace megamoe::jit
