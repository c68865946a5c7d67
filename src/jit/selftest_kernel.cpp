#include "jit/selftest_kernel.hpp"

#include <string>

#include "megamoe/error.hpp"

namespace megamoe::jit {

KernelRequest selftest_request(const SelftestShape& shape, const std::string& arch) {
  if (shape.threads < 32 || shape.threads > 1024 || shape.threads % 32 != 0) {
    throw_invalid("threads", "must be a multiple of 32 in [32, 1024]",
                  std::to_string(shape.threads));
  }
  // Hopper's opt-in maximum of dynamic shared memory per block is 227 KB.
  if (shape.items_per_thread < 1 || shape.dynamic_smem_bytes() > 227 * 1024) {
    throw_invalid("items_per_thread", "must be >= 1 with threads * items * 4 <= 227 KB",
                  std::to_string(shape.items_per_thread));
  }
  const std::string args =
      std::to_string(shape.threads) + ", " + std::to_string(shape.items_per_thread);
  KernelRequest r;
  r.name = "selftest_cluster_axpy";
  r.entry = "megamoe::device::selftest::cluster_axpy_kernel<" + args + ">";
  r.source = "#include \"megamoe/selftest/cluster_axpy.cuh\"\n";
  r.arch = arch;
  r.arguments = "threads=" + std::to_string(shape.threads) +
                " items_per_thread=" + std::to_string(shape.items_per_thread);
  return r;
}

}  // namespace megamoe::jit
