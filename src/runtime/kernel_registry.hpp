#pragma once
// Which kernels a configuration needs. Each kernel family lists the JIT requests for a
// MoEConfig (an empty list when the configuration is not its business); `megamoe precompile`
// and the CPU test that compiles every kernel walk all of them.
//
// Families are listed in kernel_registry.cpp (kBuiltinFamilies): a static table rather than
// self-registering globals, which a static library would silently drop at link time. To add a
// family, declare its lister in its own header and add one line to that table.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "jit/compiler.hpp"
#include "megamoe/config.hpp"

namespace megamoe::runtime {

using KernelLister = std::function<std::vector<jit::KernelRequest>(const MoEConfig&)>;

struct KernelFamily {
  std::string name;  // e.g. "selftest", "pre_dispatch", "nvfp4_mega_moe"
  KernelLister list;
};

// The built-in families followed by those added with register_kernel_family, in that order.
std::vector<KernelFamily> kernel_families();

// Adds a family at run time (plugins, tests). InvalidArgument when the name is empty or taken.
void register_kernel_family(std::string name, KernelLister list);

// Every request of every family (or of the named families when `only` is not empty) for
// `config`, without duplicates (same cache key). InvalidArgument for an unknown family name.
std::vector<jit::KernelRequest> kernels_for(const MoEConfig& config,
                                            const std::vector<std::string>& only = {});

// The self-test family: the JIT self-test kernel, whatever the configuration.
std::vector<jit::KernelRequest> selftest_kernels(const MoEConfig& config);

}  // namespace megamoe::runtime
