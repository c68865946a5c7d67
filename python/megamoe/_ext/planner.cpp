// Symmetric buffer planning (megamoe/buffer.hpp): the exact byte layout of one rank's buffer,
// pure host code.
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "common.hpp"
#include "megamoe/buffer.hpp"

namespace megamoe::python {

void register_planner(nb::module_& m) {
  nb::class_<BufferRegion>(m, "BufferRegion")
      .def_ro("name", &BufferRegion::name)
      .def_ro("offset", &BufferRegion::offset)
      .def_ro("bytes", &BufferRegion::bytes)
      .def_ro("alignment", &BufferRegion::alignment)
      .def_ro("rows", &BufferRegion::rows)
      .def_ro("row_pitch", &BufferRegion::row_pitch)
      .def("__repr__", [](const BufferRegion& r) {
        return "BufferRegion('" + r.name + "', offset=" + std::to_string(r.offset) +
               ", bytes=" + std::to_string(r.bytes) + ", alignment=" + std::to_string(r.alignment) +
               ")";
      });
  nb::class_<SymmBufferPlan>(m, "SymmBufferPlan", "The exact byte layout of one rank's buffer")
      .def_ro("config", &SymmBufferPlan::config)
      .def_ro("regions", &SymmBufferPlan::regions)
      .def_ro("total_bytes", &SymmBufferPlan::total_bytes)
      .def_ro("pool_rows", &SymmBufferPlan::pool_rows)
      .def_ro("sync_fields", &SymmBufferPlan::sync_fields)
      .def("region", &SymmBufferPlan::region, nb::arg("name"), nb::rv_policy::copy)
      .def("has", &SymmBufferPlan::has, nb::arg("name"))
      .def("__contains__", &SymmBufferPlan::has, nb::arg("name"));
  m.def("plan_symm_buffer", &plan_symm_buffer, nb::arg("config"));
}

}  // namespace megamoe::python
