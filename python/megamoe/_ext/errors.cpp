// C++ errors -> Python exceptions of megamoe._errors, message kept:
//   InvalidArgument -> megamoe.InvalidArgument (a ValueError; .argument and .rule set)
//   Unsupported     -> megamoe.Unsupported (a NotImplementedError)
//   CudaError       -> megamoe.CudaError, DeviceFault -> megamoe.DeviceFault (RuntimeErrors)
#include <Python.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include "common.hpp"

namespace megamoe::python {
namespace {

// Sets the Python error to megamoe._errors.<type>(message). The classes are looked up at raise
// time, so the pure-Python module stays the single definition.
void raise(const char* type, const char* message, const InvalidArgument* invalid = nullptr) {
  try {
    nb::object cls = nb::module_::import_("megamoe._errors").attr(type);
    nb::object error = cls(nb::str(message));
    if (invalid != nullptr) {
      error.attr("argument") = nb::str(invalid->argument().c_str());
      error.attr("rule") = nb::str(invalid->rule().c_str());
    }
    PyErr_SetObject(cls.ptr(), error.ptr());
  } catch (const nb::python_error&) {
    PyErr_SetString(PyExc_RuntimeError, message);
  }
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const InvalidArgument& e) {
    raise("InvalidArgument", e.what(), &e);
  } catch (const Unsupported& e) {
    raise("Unsupported", e.what());
  } catch (const CudaError& e) {
    raise("CudaError", e.what());
  } catch (const DeviceFault& e) {
    raise("DeviceFault", e.what());
  } catch (const Error& e) {
    raise("Error", e.what());
  }
}

}  // namespace

void register_errors(nb::module_& m) {
  nb::register_exception_translator(translate);
  // For tests of the mapping itself: throws the named C++ error with `message`.
  m.def(
      "_throw",
      [](std::string_view kind, std::string message) {
        if (kind == "InvalidArgument") throw_invalid("some_argument", message, "a value");
        if (kind == "Unsupported") throw Unsupported(message);
        if (kind == "CudaError") throw CudaError(message);
        if (kind == "DeviceFault") throw DeviceFault(message);
        throw Error(message);
      },
      nb::arg("kind"), nb::arg("message"));
}

}  // namespace megamoe::python
