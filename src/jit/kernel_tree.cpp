#include "jit/kernel_tree.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "jit/embedded_kernels.hpp"

namespace megamoe::jit {

KernelTree KernelTree::embedded() {
  return KernelTree{};
}

KernelTree KernelTree::from_directory(std::filesystem::path root) {
  KernelTree t;
  t.root_ = std::move(root);
  return t;
}

KernelTree KernelTree::current() {
  const char* dir = std::getenv("MEGAMOE_KERNEL_DIR");
  if (dir != nullptr && *dir != '\0') return from_directory(dir);
  return embedded();
}

std::optional<std::string> KernelTree::read(std::string_view relative_path) const {
  // Names that climb out of the tree or are absolute never resolve: the key must only ever
  // cover files of kernels/.
  const std::filesystem::path rel(relative_path);
  if (relative_path.empty() || rel.is_absolute()) return std::nullopt;
  for (const auto& part : rel) {
    if (part == "..") return std::nullopt;
  }
  if (!root_) {
    const auto files = embedded_kernel_files();
    const auto it =
        std::lower_bound(files.begin(), files.end(), relative_path,
                         [](const EmbeddedFile& f, std::string_view p) { return f.path < p; });
    if (it == files.end() || it->path != relative_path) return std::nullopt;
    return std::string(it->content);
  }
  std::ifstream in(*root_ / rel, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return std::move(s).str();
}

std::string KernelTree::describe() const {
  return root_ ? "directory " + root_->string() : std::string("embedded");
}

std::vector<std::string> scan_includes(std::string_view text) {
  std::vector<std::string> names;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    auto skip_space = [&line] {
      while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    };
    skip_space();
    if (!line.starts_with('#')) continue;
    line.remove_prefix(1);
    skip_space();
    if (!line.starts_with("include")) continue;
    line.remove_prefix(7);
    skip_space();
    if (line.empty()) continue;
    const char close = line.front() == '"' ? '"' : line.front() == '<' ? '>' : '\0';
    if (close == '\0') continue;
    const std::size_t stop = line.find(close, 1);
    if (stop == std::string_view::npos) continue;
    names.emplace_back(line.substr(1, stop - 1));
  }
  return names;
}

IncludeClosure include_closure(std::string_view source, const KernelTree& tree) {
  IncludeClosure out;
  std::vector<std::string> pending = scan_includes(source);
  while (!pending.empty()) {
    std::string name = std::move(pending.back());
    pending.pop_back();
    if (out.headers.count(name) != 0) continue;
    if (std::find(out.missing.begin(), out.missing.end(), name) != out.missing.end()) continue;
    std::optional<std::string> content = tree.read(name);
    if (!content) {
      if (name.starts_with("megamoe/")) out.missing.push_back(name);
      continue;
    }
    for (std::string& inner : scan_includes(*content)) pending.push_back(std::move(inner));
    out.headers.emplace(std::move(name), std::move(*content));
  }
  std::sort(out.missing.begin(), out.missing.end());
  return out;
}

}  // namespace megamoe::jit
