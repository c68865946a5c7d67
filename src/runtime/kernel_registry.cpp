#include "runtime/kernel_registry.hpp"

#include <algorithm>
#include <mutex>
#include <set>

#include "jit/selftest_kernel.hpp"
#include "megamoe/error.hpp"
#include "runtime/nvfp4_mega_moe_kernels.hpp"
#include "runtime/nvfp4_weight_transform_kernels.hpp"
#include "runtime/register_pre_dispatch.hpp"

namespace megamoe::runtime {
namespace {

std::vector<KernelFamily> builtin_families() {
  return {
      {"selftest", selftest_kernels},
      {"nvfp4_mega_moe", nvfp4_mega_moe_kernels},
      {"pre_dispatch", pre_dispatch_family},
      {"nvfp4_weight_transform", nvfp4_weight_transform_kernels},
  };
}

struct Extra {
  std::mutex mutex;
  std::vector<KernelFamily> families;
};

Extra& extra() {
  static Extra e;
  return e;
}

}  // namespace

std::vector<jit::KernelRequest> selftest_kernels(const MoEConfig&) {
  // The shape the GPU test launches: 256 threads x 64 items = 64 KB of dynamic shared memory.
  return {jit::selftest_request(jit::SelftestShape{256, 64})};
}

std::vector<KernelFamily> kernel_families() {
  std::vector<KernelFamily> all = builtin_families();
  std::lock_guard lock(extra().mutex);
  all.insert(all.end(), extra().families.begin(), extra().families.end());
  return all;
}

void register_kernel_family(std::string name, KernelLister list) {
  if (name.empty()) throw_invalid("name", "a kernel family needs a name");
  if (!list) throw_invalid("list", "must be a callable", name);
  for (const KernelFamily& f : kernel_families()) {
    if (f.name == name) throw_invalid("name", "must not name an existing kernel family", name);
  }
  std::lock_guard lock(extra().mutex);
  extra().families.push_back({std::move(name), std::move(list)});
}

std::vector<jit::KernelRequest> kernels_for(const MoEConfig& config,
                                            const std::vector<std::string>& only) {
  const std::vector<KernelFamily> families = kernel_families();
  for (const std::string& name : only) {
    const bool known = std::any_of(families.begin(), families.end(),
                                   [&](const KernelFamily& f) { return f.name == name; });
    if (!known) {
      std::string names;
      for (const KernelFamily& f : families) names += (names.empty() ? "" : ", ") + f.name;
      throw_invalid("family", "must name a kernel family: " + names, name);
    }
  }
  std::vector<jit::KernelRequest> out;
  std::set<std::string> seen;
  for (const KernelFamily& f : families) {
    if (!only.empty() && std::find(only.begin(), only.end(), f.name) == only.end()) continue;
    for (jit::KernelRequest& r : f.list(config)) {
      if (seen.insert(jit::cache_key(r)).second) out.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace megamoe::runtime
