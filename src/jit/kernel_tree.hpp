#pragma once
// Where the JIT reads kernels/ headers from, and which of them a source includes.
//
// By default the headers are the ones embedded in the library at build time, so the JIT works
// wherever the library is installed. MEGAMOE_KERNEL_DIR=<dir> reads them from a directory
// instead (for kernel developers, and for tests that edit a header).
//
// Project headers are named from the root of kernels/ in both forms of #include
// ("megamoe/selftest/cluster_axpy.cuh"); an include that names no project header is left to
// NVRTC's search path (the CUDA toolkit headers).
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace megamoe::jit {

class KernelTree {
 public:
  static KernelTree embedded();
  static KernelTree from_directory(std::filesystem::path root);
  // MEGAMOE_KERNEL_DIR when set and non-empty, otherwise the embedded tree.
  static KernelTree current();

  // Content of `relative_path` (e.g. "megamoe/common.cuh"), or nullopt when absent.
  std::optional<std::string> read(std::string_view relative_path) const;
  // "embedded" or "directory <root>", for messages.
  std::string describe() const;

 private:
  std::optional<std::filesystem::path> root_;  // nullopt: embedded
};

// The names written in the #include directives of `text`, in order. Conservative: directives
// inside #if blocks or block comments are listed too, so the cache key may cover a header the
// compiler skips, never miss one it reads.
std::vector<std::string> scan_includes(std::string_view text);

// Every project header reachable from `source` through #include, by name -> content, plus the
// names that look like project headers ("megamoe/...") but do not exist (so the key changes
// when one appears). Names are relative, never absolute paths.
struct IncludeClosure {
  std::map<std::string, std::string> headers;
  std::vector<std::string> missing;
};
IncludeClosure include_closure(std::string_view source, const KernelTree& tree);

}  // namespace megamoe::jit
