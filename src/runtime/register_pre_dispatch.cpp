#include "runtime/register_pre_dispatch.hpp"

#include "runtime/pre_dispatch_kernel.hpp"

namespace megamoe::runtime {

std::vector<jit::KernelRequest> pre_dispatch_family(const MoEConfig& config) {
  return pre_dispatch_kernels(config);
}

}  // namespace megamoe::runtime
