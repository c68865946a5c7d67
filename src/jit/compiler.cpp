// Orchestrates a compile: key, in-memory cache, disk cache, NVRTC, diagnostics.
#include "jit/compiler.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <mutex>

#include "jit/disk_cache.hpp"
#include "jit/kernel_tree.hpp"
#include "jit/nvrtc_compile.hpp"
#include "jit/sha256.hpp"
#include "megamoe/error.hpp"

namespace megamoe::jit {
namespace {

// Bump when the meaning of a cached entry changes (its format, how flags are spelled).
constexpr std::string_view kKeyVersion = "megamoe-jit-key-v1";

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

bool verbose() {
  return env_flag("MEGAMOE_JIT_VERBOSE");
}

// Toolkit headers enter the key by their version: the directory they live in must not.
const std::string& toolkit_include_dir() {
  static const std::string dir = find_cuda_include_dir();
  return dir;
}

const std::string& toolkit_headers_version() {
  static const std::string v = cuda_headers_version(toolkit_include_dir());
  return v;
}

void validate(const KernelRequest& r) {
  if (r.name.empty()) throw_invalid("request.name", "must not be empty");
  if (r.source.empty()) throw_invalid("request.source", "must not be empty", r.name);
  if (r.entry.empty()) throw_invalid("request.entry", "must name the __global__ function", r.name);
  if (r.arch != "sm_90a" && r.arch != "sm_100a") {
    throw_invalid("request.arch", "must be sm_90a or sm_100a", r.arch);
  }
}

std::string key_of(const KernelRequest& request, const IncludeClosure& closure) {
  Sha256 h;
  h.update_field(kKeyVersion);
  h.update_field(nvrtc_version_string());
  h.update_field(toolkit_headers_version());
  h.update_field(request.arch);
  for (const std::string& f : compile_flags(request)) h.update_field(f);
  h.update_field(request.entry);
  h.update_field(request.source);
  h.update_field(std::to_string(closure.headers.size()));
  for (const auto& [name, content] : closure.headers) {
    h.update_field(name);
    h.update_field(content);
  }
  h.update_field(std::to_string(closure.missing.size()));
  for (const std::string& name : closure.missing) h.update_field(name);
  return h.finish_hex();
}

struct MemoryCache {
  std::mutex mutex;
  // A future per key: the first caller compiles, callers that arrive meanwhile wait on it.
  std::map<std::string, std::shared_future<std::shared_ptr<const CompiledKernel>>> entries;
  CacheStats stats;
};

MemoryCache& memory() {
  static MemoryCache m;
  return m;
}

std::filesystem::path dump_directory() {
  const char* v = std::getenv("MEGAMOE_JIT_DUMP");
  if (v == nullptr || *v == '\0' || std::string_view(v) == "0") return {};
  if (std::string_view(v) == "1") {
    const auto dir = cache_directory();
    return dir.empty() ? std::filesystem::path("megamoe-jit-dump") : dir / "dump";
  }
  return v;
}

void dump(const KernelRequest& request, const std::string& key, const std::string& ptx,
          const std::string& log) {
  const auto dir = dump_directory();
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string stem = request.name + "-" + key.substr(0, 16);
  auto write = [&](const char* ext, const std::string& text) {
    std::ofstream(dir / (stem + ext), std::ios::binary) << text;
  };
  write(".cu", request.source);
  if (!ptx.empty()) write(".ptx", ptx);
  write(".log", log);
  if (verbose()) std::fprintf(stderr, "megamoe jit: dumped %s/%s.*\n", dir.c_str(), stem.c_str());
}

std::string describe_request(const KernelRequest& r) {
  std::string s = "kernel '" + r.name + "'";
  if (!r.arguments.empty()) s += " (" + r.arguments + ")";
  return s + " for " + r.arch;
}

std::shared_ptr<const CompiledKernel> build(const KernelRequest& request,
                                            const IncludeClosure& closure, const std::string& key) {
  const std::filesystem::path dir = cache_directory();
  if (!dir.empty()) {
    std::string why;
    if (auto hit = read_entry(dir, key, &why)) {
      hit->name = request.name;
      {
        std::lock_guard lock(memory().mutex);
        ++memory().stats.disk_hits;
      }
      if (verbose()) {
        std::fprintf(stderr, "megamoe jit: disk cache hit %s key %.16s\n",
                     describe_request(request).c_str(), key.c_str());
      }
      return std::make_shared<const CompiledKernel>(std::move(*hit));
    }
    if (why != "absent") {
      std::fprintf(stderr, "megamoe jit: ignoring cache entry %s (%s); recompiling\n",
                   entry_path(dir, key).c_str(), why.c_str());
    }
  }

  NvrtcResult result = nvrtc_compile(request, closure, compile_flags(request));
  dump(request, key, result.ptx, result.kernel.log);
  if (!result.ok) {
    std::string args;
    for (const std::string& f : compile_flags(request)) args += " " + f;
    throw CudaError("megamoe jit: compiling " + describe_request(request) + " failed: " +
                    result.error + "\n  entry: " + request.entry + "\n  flags:" + args +
                    "\n  headers: " + KernelTree::current().describe() + "\n" + result.kernel.log);
  }
  CompiledKernel& k = result.kernel;
  k.key = key;
  k.name = request.name;
  {
    std::lock_guard lock(memory().mutex);
    ++memory().stats.compiles;
  }
  if (verbose()) {
    std::fprintf(stderr, "megamoe jit: compiled %s in %.1f ms, %d registers, key %.16s\n",
                 describe_request(request).c_str(), k.compile_ms, k.registers, key.c_str());
  }
  if (const std::string problem = resource_problems(k); !problem.empty()) {
    std::fprintf(stderr, "megamoe jit: warning: %s\n", problem.c_str());
  }
  if (!dir.empty()) {
    if (const std::string error = write_entry(dir, k); !error.empty()) {
      std::fprintf(stderr, "megamoe jit: warning: not cached: %s\n", error.c_str());
    }
  }
  return std::make_shared<const CompiledKernel>(std::move(k));
}

}  // namespace

std::vector<std::string> compile_flags(const KernelRequest& request) {
  std::vector<std::string> flags = {"-std=c++20", "--gpu-architecture=" + request.arch,
                                    "-default-device", "-lineinfo", "-DNDEBUG",
                                    // ptxas prints registers, stack and spills into the log.
                                    "-Xptxas=-v"};
  flags.insert(flags.end(), request.options.begin(), request.options.end());
  return flags;
}

std::string cache_key(const KernelRequest& request) {
  return cache_key(request, KernelTree::current());
}

std::string cache_key(const KernelRequest& request, const KernelTree& tree) {
  validate(request);
  return key_of(request, include_closure(request.source, tree));
}

std::shared_ptr<const CompiledKernel> compile(const KernelRequest& request) {
  validate(request);
  if (!nvrtc_available()) {
    throw CudaError("megamoe jit: cannot compile " + describe_request(request) + ": " +
                    nvrtc_version());
  }
  const IncludeClosure closure = include_closure(request.source, KernelTree::current());
  const std::string key = key_of(request, closure);

  MemoryCache& m = memory();
  std::promise<std::shared_ptr<const CompiledKernel>> promise;
  {
    std::unique_lock lock(m.mutex);
    if (auto it = m.entries.find(key); it != m.entries.end()) {
      ++m.stats.memory_hits;
      auto future = it->second;
      lock.unlock();
      if (verbose()) {
        std::fprintf(stderr, "megamoe jit: memory cache hit %s key %.16s\n",
                     describe_request(request).c_str(), key.c_str());
      }
      return future.get();
    }
    m.entries.emplace(key, promise.get_future().share());
  }
  try {
    auto kernel = build(request, closure, key);
    promise.set_value(kernel);
    return kernel;
  } catch (...) {
    promise.set_exception(std::current_exception());
    // Forget the failure so that a later request (after a fix in MEGAMOE_KERNEL_DIR) retries.
    std::lock_guard lock(m.mutex);
    m.entries.erase(key);
    throw;
  }
}

std::string nvrtc_version() {
  const std::string v = nvrtc_version_string();
  return v.empty() ? "unavailable: this build of megamoe has no NVRTC" : v;
}

bool nvrtc_available() {
  return !nvrtc_version_string().empty();
}

std::string cuda_include_dir() {
  return toolkit_include_dir();
}

std::filesystem::path cache_directory() {
  const char* dir = std::getenv("MEGAMOE_CACHE_DIR");
  if (dir != nullptr && *dir != '\0') {
    if (std::string_view(dir) == "off") return {};
    return dir;
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') return {};
  return std::filesystem::path(home) / ".cache" / "megamoe";
}

CacheStats cache_stats() {
  std::lock_guard lock(memory().mutex);
  return memory().stats;
}

void clear_memory_cache() {
  std::lock_guard lock(memory().mutex);
  memory().entries.clear();
}

std::string resource_problems(const CompiledKernel& k) {
  if (k.spill_bytes == 0 && k.local_bytes == 0) return {};
  std::string s = "kernel '" + k.name + "'";
  if (k.spill_bytes != 0) s += " spills " + std::to_string(k.spill_bytes) + " bytes of registers";
  if (k.local_bytes != 0) {
    s += (k.spill_bytes != 0 ? " and" : "");
    s += " uses " + std::to_string(k.local_bytes) + " bytes of local memory per thread";
  }
  return s;
}

}  // namespace megamoe::jit
