// megamoe._core: the nanobind module. Each area of the C++ API has its own file.
#include "common.hpp"

namespace megamoe::python {
void register_errors(nb::module_& m);
void register_config(nb::module_& m);
void register_formats(nb::module_& m);
void register_reference(nb::module_& m);
void register_planner(nb::module_& m);
void register_buffer(nb::module_& m);
void register_heuristics(nb::module_& m);
void register_pre_dispatch(nb::module_& m);
void register_nvfp4(nb::module_& m);
void register_families(nb::module_& m);
void register_side_lora(nb::module_& m);
void register_precompile(nb::module_& m);
}  // namespace megamoe::python

NB_MODULE(_core, m) {
  using namespace megamoe::python;
  m.doc() = "megamoe C++ API (see docs/python.md)";
  register_errors(m);
  register_config(m);
  register_formats(m);
  register_reference(m);
  register_planner(m);
  register_buffer(m);
  register_heuristics(m);
  register_pre_dispatch(m);
  register_nvfp4(m);
  register_families(m);
  register_side_lora(m);
  register_precompile(m);
}
