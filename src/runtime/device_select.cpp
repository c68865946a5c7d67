#include "runtime/device_select.hpp"

#include <cuda.h>

#include <string>

#include "megamoe/error.hpp"
#include "runtime/cuda_driver.hpp"

namespace megamoe::cuda {

int device_count() {
  int count = 0;
  MEGAMOE_CU(driver().cuDeviceGetCount(&count));
  return count;
}

void select_device(int ordinal) {
  const Driver& d = driver();
  const int count = device_count();
  if (ordinal < 0 || ordinal >= count) {
    throw_invalid("ordinal", "must be a device in [0, " + std::to_string(count) + ")",
                  std::to_string(ordinal));
  }
  CUdevice device = 0;
  MEGAMOE_CU(d.cuDeviceGet(&device, ordinal));
  // Retained once per call and never released: modules and graphs loaded in the context may
  // outlive any scope here, like the default device's context in cuda_driver.cpp.
  CUcontext context = nullptr;
  MEGAMOE_CU(d.cuDevicePrimaryCtxRetain(&context, device));
  MEGAMOE_CU(d.cuCtxSetCurrent(context));
}

int current_device() {
  if (!driver_available()) return 0;
  const Driver& d = driver();
  CUdevice device = 0;
  MEGAMOE_CU(d.cuCtxGetDevice(&device));
  // CUdevice is a handle: find the ordinal it belongs to rather than assume they coincide.
  const int count = device_count();
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice candidate = 0;
    MEGAMOE_CU(d.cuDeviceGet(&candidate, ordinal));
    if (candidate == device) return ordinal;
  }
  throw CudaError("cuCtxGetDevice returned a device that no ordinal names");
}

Device current_gpu() {
  return Device{DeviceKind::cuda, current_device()};
}

}  // namespace megamoe::cuda
