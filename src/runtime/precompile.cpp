#include "megamoe/precompile.hpp"

#include "core/validate.hpp"
#include "jit/compiler.hpp"
#include "runtime/kernel_registry.hpp"

namespace megamoe {

std::vector<PrecompiledKernel> precompile(const MoEConfig& config) {
  validate::validate_config(config);
  // Every request first: a family that refuses the config fails before any compile starts.
  const std::vector<jit::KernelRequest> requests = runtime::kernels_for(config);
  std::vector<PrecompiledKernel> out;
  out.reserve(requests.size());
  for (const jit::KernelRequest& r : requests) {
    const auto k = jit::compile(r);
    out.push_back(
        {r.name, r.arguments, k->from_cache, k->registers, k->spill_bytes, k->local_bytes});
  }
  return out;
}

}  // namespace megamoe
