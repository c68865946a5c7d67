#pragma once
// Shared pieces of the nanobind module: DLPack arrays <-> megamoe::TensorView (no copies),
// host arrays <-> std::vector for the CPU functions, and enum arguments given as strings.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "megamoe/error.hpp"
#include "megamoe/types.hpp"

namespace nb = nanobind;

namespace megamoe::python {

// Any framework's array (torch, JAX, CuPy, NumPy, anything with __dlpack__ or the buffer
// protocol), any dtype and device, read-only allowed. Never copied by the caster.
using Array = nb::ndarray<nb::ro>;
// The same for arrays the library writes into.
using MutableArray = nb::ndarray<>;

// An argument as an array; anything else (or a read-only array where the library writes) is an
// InvalidArgument naming it rather than nanobind's generic cast error.
Array as_array(nb::handle value, std::string_view name);
MutableArray as_mutable_array(nb::handle value, std::string_view name);

// ---- device arrays: zero-copy views ---------------------------------------------------------
// The element type an array holds, by DLPack dtype; one-byte integer types map to u8.
DType dtype_of(const Array& a, std::string_view name);
// A view of `a` as `expected`. Byte formats (u8, e4m3, e2m1x2, ue4m3, ue8m0) accept any one-byte
// dtype (uint8, int8, float8_*), reinterpreted; other types must match exactly.
TensorView to_view(const Array& a, std::string_view name, DType expected);
TensorView to_view(const MutableArray& a, std::string_view name, DType expected);
// A view with its own dtype, which must be one of `allowed`.
TensorView to_view_of(const Array& a, std::string_view name, std::initializer_list<DType> allowed);

// ---- host arrays: copies for the CPU oracle and the format helpers ---------------------------
// Checks that `a` is on the CPU and has `shape` (-1 = any extent). Returns the shape.
std::vector<std::int64_t> expect_host(const Array& a, std::string_view name,
                                      std::initializer_list<std::int64_t> shape);
// Element values converted to the requested type (strided arrays allowed). Floats accept f16,
// bf16, f32, f64; integers accept any signed or unsigned integer type.
std::vector<float> read_floats(const Array& a, std::string_view name);
std::vector<std::int64_t> read_ints(const Array& a, std::string_view name);
// One-byte elements (packed codes, scales) as raw bytes.
std::vector<std::uint8_t> read_bytes(const Array& a, std::string_view name);

// A NumPy array owning `values` with `shape` (the product must equal values.size()).
template <typename T>
nb::object to_numpy(std::vector<T> values, std::vector<std::size_t> shape) {
  auto* heap = new std::vector<T>(std::move(values));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  nb::ndarray<nb::numpy, T> array(heap->data(), shape.size(), shape.data(), owner);
  return nb::cast(array);
}

// Shape helper: int64 extents to size_t.
std::vector<std::size_t> dims(std::initializer_list<std::int64_t> extents);

// ---- enums ----------------------------------------------------------------------------------
// An enum argument given as the bound enum or as its name ("nvfp4", "swizzled_128x4", ...).
template <typename E>
E enum_arg(nb::handle value, std::string_view argument) {
  if (nb::isinstance<nb::str>(value)) {
    nb::object cls = nb::borrow(nb::type<E>());
    nb::object members = cls.attr("__members__");
    if (!nb::cast<bool>(members.attr("__contains__")(value))) {
      const nb::str known = nb::str(nb::str(", ").attr("join")(members));
      throw_invalid(argument, std::string("must be one of ") + known.c_str(),
                    nb::str(value).c_str());
    }
    return nb::cast<E>(members[value]);
  }
  try {
    return nb::cast<E>(value);
  } catch (const nb::cast_error&) {
    throw_invalid(argument, "must be a name or a member of the enum", nb::repr(value).c_str());
  }
}

// A field of a dict (by key) or of any object (by attribute), for structs passed from Python.
nb::object field(nb::handle obj, const char* name);
bool has_field(nb::handle obj, const char* name);

// Per-rank arguments: `value` as a list of n entries, itself n times when it is not a list or
// tuple (a sequence must have exactly n entries).
bool is_sequence(nb::handle h);
std::vector<nb::object> per_rank(nb::handle value, std::size_t n, const char* name);
// The ranks of a call with n per-rank entries: `rank` (an int or a list), or else the buffer's
// driven ranks when n equals their count, or else 0..n-1.
std::vector<int> ranks_arg(nb::handle rank, std::size_t n, const std::vector<int>& driven);
// A field of a dict or object as a read-only / writable view; optional_* give an empty view when
// the field is absent or None.
TensorView field_view(nb::handle obj, const char* name, DType dtype);
TensorView mutable_field_view(nb::handle obj, const char* name, DType dtype);
TensorView optional_view(nb::handle obj, const char* name, DType dtype);
TensorView optional_mutable_view(nb::handle obj, const char* name, DType dtype);

// CUDA stream argument: an int (the cudaStream_t address), None (the legacy default stream), or
// an object with `cuda_stream` (torch.cuda.Stream) or `ptr` (cupy) attributes.
void* stream_arg(nb::handle stream);

}  // namespace megamoe::python
