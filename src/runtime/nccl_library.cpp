#include "runtime/nccl_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "megamoe/error.hpp"

namespace megamoe::nccl {
namespace {

struct Loaded {
  Library lib;
  std::string error;  // empty when usable
};

template <typename Fn>
bool resolve(void* handle, const char* name, Fn& out, std::string& error) {
  out = reinterpret_cast<Fn>(dlsym(handle, name));
  if (out == nullptr && error.empty()) error = library_name() + " has no " + name;
  return out != nullptr;
}

std::string version_string(int v) {
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z from 2.9 on.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

Loaded load() {
  Loaded l;
  l.lib.path = library_name();
  // Never closed: NCCL keeps threads and state for the life of the process.
  void* handle = dlopen(l.lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    l.error = e != nullptr ? e : (l.lib.path + ": cannot be opened");
    return l;
  }
  Library& b = l.lib;
  std::string& e = l.error;
  resolve(handle, "ncclGetVersion", b.ncclGetVersion, e);
  resolve(handle, "ncclGetErrorString", b.ncclGetErrorString, e);
  resolve(handle, "ncclGetUniqueId", b.ncclGetUniqueId, e);
  resolve(handle, "ncclCommInitRank", b.ncclCommInitRank, e);
  resolve(handle, "ncclCommDestroy", b.ncclCommDestroy, e);
  resolve(handle, "ncclCommCount", b.ncclCommCount, e);
  resolve(handle, "ncclCommUserRank", b.ncclCommUserRank, e);
  resolve(handle, "ncclMemAlloc", b.ncclMemAlloc, e);
  resolve(handle, "ncclMemFree", b.ncclMemFree, e);
  if (b.ncclGetVersion != nullptr && b.ncclGetVersion(&b.version) != ncclSuccess) {
    if (e.empty()) e = "ncclGetVersion failed";
  }
  if (e.empty() && b.version < kMinVersion) {
    e = "NCCL " + version_string(b.version) + " < 2.28 (symmetric windows need NCCL >= 2.28)";
  }
  // Window registration appeared in 2.27; checked after the version so an old NCCL is named
  // as such rather than as a missing symbol.
  resolve(handle, "ncclCommWindowRegister", b.ncclCommWindowRegister, e);
  resolve(handle, "ncclCommWindowDeregister", b.ncclCommWindowDeregister, e);
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

std::string library_name() {
  const char* env = std::getenv("MEGAMOE_NCCL_LIBRARY");
  return env != nullptr && env[0] != '\0' ? std::string(env) : std::string("libnccl.so.2");
}

bool available(std::string* why) {
  const Loaded& l = loaded();
  if (why != nullptr) *why = l.error;
  return l.error.empty();
}

const Library& library() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw CudaError("NCCL unavailable: " + l.error);
  return l.lib;
}

void check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  const Loaded& l = loaded();
  const char* s = l.lib.ncclGetErrorString != nullptr ? l.lib.ncclGetErrorString(r) : nullptr;
  throw CudaError(std::string(what) + ": " + (s != nullptr ? s : "NCCL error") + " (" +
                  std::to_string(static_cast<int>(r)) + ")");
}

}  // namespace megamoe::nccl
