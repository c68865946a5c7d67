#pragma once
// Choosing the GPU of the calling thread. One process per GPU gets its device at load time from
// $MEGAMOE_DEVICE (cuda_driver.hpp); select_device moves one thread to another GPU inside a
// process (tests, tools that drive several GPUs from one process).
#include "megamoe/types.hpp"

namespace megamoe::cuda {

// Number of CUDA devices; CudaError("no CUDA GPU: ...") without a driver or device.
int device_count();

// Makes the primary context of device `ordinal` current on the calling thread (retained for the
// life of the process). InvalidArgument naming `ordinal` when it is not in [0, device_count()).
void select_device(int ordinal);

// Ordinal of the device of the calling thread's current context (after driver(): the default
// device's when the thread had none); 0 on a machine without a usable GPU, so that argument
// errors read the same there. The launchers launch on it and require every tensor to be tagged
// with it ({cuda, current_device()}), as a framework tags its cuda:r tensors.
int current_device();

// The same as the Device the launchers check tensors against: {cuda, current_device()}.
Device current_gpu();

}  // namespace megamoe::cuda
