#pragma once
// NCCL opened at run time with dlopen (like the CUDA driver), so the library builds and runs
// without NCCL and only the `nccl` peer-memory provider needs it. <nccl.h> supplies the types.
#include <nccl.h>

#include <string>

namespace megamoe::nccl {

// The NCCL version the symmetric-window API needs (NCCL_VERSION(2, 28, 0)).
inline constexpr int kMinVersion = 22800;

struct Library {
  decltype(&::ncclGetVersion) ncclGetVersion = nullptr;
  decltype(&::ncclGetErrorString) ncclGetErrorString = nullptr;
  decltype(&::ncclGetUniqueId) ncclGetUniqueId = nullptr;
  decltype(&::ncclCommInitRank) ncclCommInitRank = nullptr;
  decltype(&::ncclCommDestroy) ncclCommDestroy = nullptr;
  decltype(&::ncclCommCount) ncclCommCount = nullptr;
  decltype(&::ncclCommUserRank) ncclCommUserRank = nullptr;
  decltype(&::ncclMemAlloc) ncclMemAlloc = nullptr;
  decltype(&::ncclMemFree) ncclMemFree = nullptr;
  decltype(&::ncclCommWindowRegister) ncclCommWindowRegister = nullptr;
  decltype(&::ncclCommWindowDeregister) ncclCommWindowDeregister = nullptr;
  int version = 0;   // e.g. 22809
  std::string path;  // what was opened
};

// Where NCCL is looked for: $MEGAMOE_NCCL_LIBRARY when set, else "libnccl.so.2".
std::string library_name();

// True when the library loads, has every entry point above and is >= 2.28. `why` receives the
// reason otherwise ("libnccl.so.2: cannot open shared object file", "NCCL 2.27.3 < 2.28").
bool available(std::string* why = nullptr);

// The loaded library; throws CudaError("NCCL unavailable: <why>") otherwise.
const Library& library();

// Throws CudaError("<what>: <NCCL error string>") when r != ncclSuccess.
void check(ncclResult_t r, const char* what);

}  // namespace megamoe::nccl

#define MEGAMOE_NCCL(call) ::megamoe::nccl::check((call), #call)
