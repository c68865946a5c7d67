// Opens libcuda at run time and resolves the entry points of cuda_driver_functions.inc.
#include "runtime/cuda_driver.hpp"

#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdlib>
#include <type_traits>

#include <mutex>

#include "megamoe/error.hpp"

namespace megamoe::cuda {
namespace {

struct Loaded {
  Driver driver;
  CUcontext primary = nullptr;  // the default device's primary context, retained for the process
  bool ok = false;
  std::string why;
};

std::string result_text(const Driver& d, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.cuGetErrorName != nullptr) d.cuGetErrorName(r, &name);
  if (d.cuGetErrorString != nullptr) d.cuGetErrorString(r, &text);
  std::string s = name != nullptr ? name : "CUDA error " + std::to_string(static_cast<int>(r));
  if (text != nullptr) s += std::string(": ") + text;
  return s;
}

Loaded load() {
  Loaded l;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    l.why =
        std::string("libcuda.so.1 not found (") + (err != nullptr ? err : "dlopen failed") + ")";
    return l;
  }
  // The library is never closed: function pointers into it live as long as the process.
  using GetProc =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    l.why = "libcuda.so.1 has no cuGetProcAddress_v2 (driver older than CUDA 12)";
    return l;
  }
  Driver& d = l.driver;
  std::string missing;
  auto resolve = [&](const char* name, int version, void** slot) {
    CUdriverProcAddressQueryResult status{};
    const CUresult r = get_proc(name, slot, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (r != CUDA_SUCCESS || *slot == nullptr) {
      *slot = nullptr;
      missing += missing.empty() ? name : std::string(", ") + name;
    }
  };
  // `#name` is the unversioned name the driver expects ("cuMemAlloc"); `d.name` expands to the
  // member for the versioned symbol the headers map it to (cuMemAlloc_v2). The static_assert
  // proves the requested ABI version has exactly the prototype the member was declared with.
#define MEGAMOE_DRIVER_FN(name, version)                                                       \
  static_assert(std::is_same_v<decltype(&::name), PFN_##name##_v##version>,                    \
                #name ": the ABI version in cuda_driver_functions.inc does not match cuda.h"); \
  resolve(#name, version, reinterpret_cast<void**>(&d.name));
#include "runtime/cuda_driver_functions.inc"
#undef MEGAMOE_DRIVER_FN

  if (d.cuDriverGetVersion != nullptr) d.cuDriverGetVersion(&d.driver_version);
  if (!missing.empty()) {
    l.why = "the CUDA driver (version " + std::to_string(d.driver_version) +
            ") lacks entry points built against CUDA " + std::to_string(CUDA_VERSION) + ": " +
            missing;
    return l;
  }
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) {
    l.why = "cuInit: " + result_text(d, r);
    return l;
  }
  int count = 0;
  r = d.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0) {
    l.why = r != CUDA_SUCCESS ? "cuDeviceGetCount: " + result_text(d, r) : "no CUDA device";
    return l;
  }
  // MEGAMOE_DEVICE (set per rank by runtime/process_group.cpp) names the GPU whose primary
  // context threads get by default, so a rank's process never creates a context on device 0.
  int ordinal = 0;
  if (const char* v = std::getenv("MEGAMOE_DEVICE"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long parsed = std::strtol(v, &end, 10);
    if (*end != '\0' || parsed < 0 || parsed >= count) {
      l.why = "MEGAMOE_DEVICE=" + std::string(v) + " is not a device ordinal in [0, " +
              std::to_string(count) + ")";
      return l;
    }
    ordinal = static_cast<int>(parsed);
  }
  CUdevice device = 0;
  r = d.cuDeviceGet(&device, ordinal);
  if (r == CUDA_SUCCESS) r = d.cuDevicePrimaryCtxRetain(&l.primary, device);
  if (r != CUDA_SUCCESS) {
    l.why = "retaining the primary context of device " + std::to_string(ordinal) + ": " +
            result_text(d, r);
    return l;
  }
  l.ok = true;
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

bool driver_available(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok && why != nullptr) *why = l.why;
  return l.ok;
}

const Driver& driver() {
  const Loaded& l = loaded();
  if (!l.ok) throw CudaError("no CUDA GPU: " + l.why);
  // A thread that already has a context (the caller's framework chose a device) keeps it;
  // a thread without one gets the default device's primary context, once.
  thread_local bool context_checked = false;
  if (!context_checked) {
    CUcontext current = nullptr;
    check(l.driver.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
    if (current == nullptr) check(l.driver.cuCtxSetCurrent(l.primary), "cuCtxSetCurrent");
    context_checked = true;
  }
  return l.driver;
}

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const Loaded& l = loaded();
  throw CudaError(std::string(what) + ": " + result_text(l.driver, r));
}

}  // namespace megamoe::cuda
