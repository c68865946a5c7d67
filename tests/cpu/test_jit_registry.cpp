// The kernel registry that precompile walks.
#include <gtest/gtest.h>

#include "megamoe/error.hpp"
#include "megamoe/presets.hpp"
#include "runtime/kernel_registry.hpp"

namespace megamoe::runtime {
namespace {

MoEConfig config() {
  MoEConfig c;
  c.shape = find_preset("dsv3").shape;
  c.max_tokens_per_rank = 64;
  return c;
}

TEST(JitRegistry, SelftestFamilyIsBuiltIn) {
  const auto families = kernel_families();
  ASSERT_FALSE(families.empty());
  EXPECT_EQ(families.front().name, "selftest");
  const auto requests = kernels_for(config(), {"selftest"});
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].name, "selftest_cluster_axpy");
}

TEST(JitRegistry, RegisteredFamiliesAreWalkedAndDeduplicated) {
  register_kernel_family("test_duplicates", [](const MoEConfig& c) {
    // Two identical requests (same key) and one that differs by the hidden size.
    jit::KernelRequest r;
    r.name = "dup";
    r.source = "extern \"C\" __global__ void k() {}\n";
    r.entry = "k";
    jit::KernelRequest other = r;
    other.options.push_back("-DH=" + std::to_string(c.shape.hidden));
    return std::vector<jit::KernelRequest>{r, r, other};
  });
  const auto requests = kernels_for(config(), {"test_duplicates"});
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].options, std::vector<std::string>{"-DH=7168"});
  // Unfiltered: every family's requests, the two distinct duplicates among them.
  std::size_t others = 0;
  for (const KernelFamily& f : kernel_families()) {
    if (f.name != "test_duplicates") others += kernels_for(config(), {f.name}).size();
  }
  EXPECT_EQ(kernels_for(config()).size(), others + 2);
}

TEST(JitRegistry, BadNamesAreRejected) {
  try {
    kernels_for(config(), {"no_such_family"});
    FAIL() << "unknown family accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "family");
    EXPECT_NE(std::string(e.what()).find("selftest"), std::string::npos) << e.what();
  }
  EXPECT_THROW(register_kernel_family(
                   "selftest", [](const MoEConfig&) { return std::vector<jit::KernelRequest>{}; }),
               InvalidArgument);
  EXPECT_THROW(register_kernel_family(
                   "", [](const MoEConfig&) { return std::vector<jit::KernelRequest>{}; }),
               InvalidArgument);
}

}  // namespace
}  // namespace megamoe::runtime
