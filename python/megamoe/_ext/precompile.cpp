// megamoe.precompile (megamoe/precompile.hpp): every kernel a config can launch, into the cache.
#include <nanobind/stl/string.h>

#include <vector>

#include "common.hpp"
#include "megamoe/precompile.hpp"

namespace megamoe::python {

void register_precompile(nb::module_& m) {
  m.def(
      "precompile",
      [](const MoEConfig& config) {
        std::vector<PrecompiledKernel> kernels;
        {
          // NVRTC takes seconds a kernel: let other Python threads run meanwhile.
          nb::gil_scoped_release release;
          kernels = precompile(config);
        }
        nb::list out;
        for (const PrecompiledKernel& k : kernels) {
          nb::dict d;
          d["name"] = k.name;
          d["arguments"] = k.arguments;
          d["from_disk_cache"] = k.from_disk_cache;
          d["registers"] = k.registers;
          d["spill_bytes"] = k.spill_bytes;
          d["local_bytes"] = k.local_bytes;
          out.append(d);
        }
        return out;
      },
      nb::arg("config"),
      "compiles (or finds in MEGAMOE_CACHE_DIR, default ~/.cache/megamoe) every kernel `config` "
      "can launch, so that no later call compiles; needs NVRTC, not a GPU. One dict a kernel: "
      "name, arguments, from_disk_cache, registers, spill_bytes, local_bytes");
}

}  // namespace megamoe::python
