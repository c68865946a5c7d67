#pragma once
// Helpers for the JIT tests: scratch directories, environment overrides, resource checks.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <optional>
#include <string>

#include "jit/compiler.hpp"

namespace megamoe::test {

// Fails the test when the kernel spills registers or uses local memory (docs/jit.md: such
// builds must not ship).
inline void expect_no_spills(const jit::CompiledKernel& kernel) {
  EXPECT_EQ(jit::resource_problems(kernel), "") << "ptxas log:\n" << kernel.log;
}

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "megamoe-test-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Sets an environment variable for the life of the object, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The kernels/ tree of the source checkout, copied to `dest` (so a test can edit headers).
inline std::filesystem::path copy_kernel_tree(const std::filesystem::path& dest) {
  const std::filesystem::path source = std::filesystem::path(MEGAMOE_SOURCE_DIR) / "kernels";
  std::filesystem::create_directories(dest);
  std::filesystem::copy(source, dest, std::filesystem::copy_options::recursive);
  return dest;
}

}  // namespace megamoe::test
