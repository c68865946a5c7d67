#pragma once
// The CUDA driver API, opened at run time with dlopen("libcuda.so.1"): the library links no
// libcuda, so it builds, loads and runs its CPU parts on machines without a GPU.
#include <cuda.h>

#include <string>

namespace megamoe::cuda {

// Function pointers for the driver entry points megamoe uses, resolved through
// cuGetProcAddress at the ABI version of each prototype (cuda_driver_functions.inc).
struct Driver {
#define MEGAMOE_DRIVER_FN(name, version) decltype(&::name) name = nullptr;
#include "runtime/cuda_driver_functions.inc"
#undef MEGAMOE_DRIVER_FN
  int driver_version = 0;  // cuDriverGetVersion, e.g. 13000
};

// True when libcuda loads, cuInit succeeds and at least one device exists. `why` receives the
// reason otherwise ("libcuda.so.1 not found", "cuInit: CUDA_ERROR_NO_DEVICE ...").
bool driver_available(std::string* why = nullptr);

// The loaded driver with the primary context of the default device current on the calling thread
// (a thread that already has a context keeps it). The default device is $MEGAMOE_DEVICE when
// set (one process per GPU: run_process_group sets it to the rank), else device 0.
// Throws CudaError("no CUDA GPU: <why>") when unavailable.
const Driver& driver();

// Throws CudaError("<what>: <CU error name>: <error string>") when r != CUDA_SUCCESS.
void check(CUresult r, const char* what);

}  // namespace megamoe::cuda

#define MEGAMOE_CU(call) ::megamoe::cuda::check((call), #call)
