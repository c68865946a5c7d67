#pragma once
// The pre-dispatch kernel family of the kernel registry (kernel_registry.cpp lists it).
#include <vector>

#include "jit/compiler.hpp"
#include "megamoe/config.hpp"

namespace megamoe::runtime {

// Every pre-dispatch kernel a configuration can launch (see pre_dispatch_kernels).
std::vector<jit::KernelRequest> pre_dispatch_family(const MoEConfig& config);

}  // namespace megamoe::runtime
