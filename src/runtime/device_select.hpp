#pragma once
// Choosing the GPU of the calling thread. One process per GPU gets its device at load time from
// $MEGAMOE_DEVICE (cuda_driver.hpp); select_device moves one thread to another GPU inside a
// process (tests, tools that drive several GPUs from one process).
namespace megamoe::cuda {

// Number of CUDA devices; CudaError("no CUDA GPU: ...") without a driver or device.
int device_count();

// Makes the primary context of device `ordinal` current on the calling thread (retained for the
// life of the process). InvalidArgument naming `ordinal` when it is not in [0, device_count()).
// Note: the library's TensorView device index is still compared against 0 (the current
// device) by the launchers, so tensors of a selected device are tagged {cuda, 0}.
void select_device(int ordinal);

}  // namespace megamoe::cuda
