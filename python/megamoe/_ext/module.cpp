// megamoe._core: the nanobind module. Each area of the C++ API has its own file; an area is
// compiled in only once the library implements it (python/CMakeLists.txt).
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
}  // namespace megamoe::python

NB_MODULE(_core, m) {
  using namespace megamoe::python;
  m.doc() = "megamoe C++ API (see docs/python.md)";
  m.attr("areas") = nb::str(MEGAMOE_PY_AREAS);
  register_errors(m);
  register_config(m);
#ifdef MEGAMOE_PY_HAVE_FORMATS
  register_formats(m);
#endif
#ifdef MEGAMOE_PY_HAVE_REFERENCE
  register_reference(m);
#endif
#ifdef MEGAMOE_PY_HAVE_PLANNER
  register_planner(m);
#endif
#ifdef MEGAMOE_PY_HAVE_BUFFER
  register_buffer(m);
#endif
#ifdef MEGAMOE_PY_HAVE_HEURISTICS
  register_heuristics(m);
#endif
#ifdef MEGAMOE_PY_HAVE_PRE_DISPATCH
  register_pre_dispatch(m);
#endif
#ifdef MEGAMOE_PY_HAVE_NVFP4
  register_nvfp4(m);
#endif
#ifdef MEGAMOE_PY_HAVE_FAMILIES
  register_families(m);
#endif
#ifdef MEGAMOE_PY_HAVE_SIDE_LORA
  register_side_lora(m);
#endif
}
