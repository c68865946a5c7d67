// Two processes compiling the same kernel into one empty cache directory at the same moment
// leave exactly one valid entry (the situation of ranks that JIT at start-up).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jit/compiler.hpp"
#include "jit/disk_cache.hpp"
#include "jit/selftest_kernel.hpp"
#include "jit_test_support.hpp"

namespace megamoe::jit {
namespace {

TEST(JitCacheConcurrency, TwoProcessesLeaveOneValidEntry) {
  test::ScratchDir cache;
  test::ScopedEnv env("MEGAMOE_CACHE_DIR", cache.path().string());
  const KernelRequest request = selftest_request(SelftestShape{256, 32});
  const std::string key = cache_key(request);

  // Both children block on the pipe until the parent closes it, so they compile together.
  int start[2];
  ASSERT_EQ(pipe(start), 0);
  pid_t children[2];
  for (pid_t& child : children) {
    child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      close(start[1]);
      char c;
      while (read(start[0], &c, 1) > 0) {
      }
      int status = 0;
      try {
        const auto k = compile(request);
        status = (k->key == key && !k->from_cache) ? 0 : 2;
      } catch (...) {
        status = 3;
      }
      _exit(status);  // no gtest teardown in the child
    }
  }
  close(start[0]);
  close(start[1]);
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "child crashed";
    // 2 means one child saw the other's entry before compiling: legal, but then the test did
    // not race; accept it rather than fail on scheduling.
    EXPECT_TRUE(WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 2)
        << "child exit " << WEXITSTATUS(status);
  }

  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(cache.path())) {
    names.push_back(e.path().filename().string());
  }
  ASSERT_EQ(names, std::vector<std::string>{key + ".jit"}) << "expected one entry, no temp files";
  std::string why;
  const auto entry = read_entry(cache.path(), key, &why);
  ASSERT_TRUE(entry.has_value()) << why;
  EXPECT_FALSE(entry->cubin.empty());

  clear_memory_cache();
  const auto loaded = compile(request);
  EXPECT_TRUE(loaded->from_cache);
  EXPECT_EQ(loaded->cubin, entry->cubin);
  clear_memory_cache();
}

}  // namespace
}  // namespace megamoe::jit
