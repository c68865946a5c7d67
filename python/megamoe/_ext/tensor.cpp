// DLPack arrays -> megamoe::TensorView and host vectors. Views never copy: the library sees the
// caller's memory, strides included, and its own validation judges shapes and alignment.
#include <bit>
#include <cmath>
#include <cstring>

#include "common.hpp"

namespace megamoe::python {
namespace {

namespace dl = nb::dlpack;

std::string dlpack_dtype_name(dl::dtype t) {
  const char* code = "code";
  switch (static_cast<dl::dtype_code>(t.code)) {
    case dl::dtype_code::Int:
      code = "int";
      break;
    case dl::dtype_code::UInt:
      code = "uint";
      break;
    case dl::dtype_code::Float:
      code = "float";
      break;
    case dl::dtype_code::Bfloat:
      code = "bfloat";
      break;
    case dl::dtype_code::Bool:
      code = "bool";
      break;
    case dl::dtype_code::Complex:
      code = "complex";
      break;
    default:
      return "dlpack dtype code " + std::to_string(t.code) + " bits " + std::to_string(t.bits);
  }
  std::string s = code + std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

bool is_code(dl::dtype t, dl::dtype_code code, int bits) {
  return t.code == static_cast<std::uint8_t>(code) && t.bits == bits && t.lanes == 1;
}

bool is_byte_format(DType t) {
  return t == DType::u8 || t == DType::e4m3 || t == DType::e2m1x2 || t == DType::ue4m3 ||
         t == DType::ue8m0;
}

bool is_one_byte(dl::dtype t) {
  return t.bits == 8 && t.lanes == 1 && t.code != static_cast<std::uint8_t>(dl::dtype_code::Bool);
}

Device device_of(int device_type, int device_id, std::string_view name) {
  switch (device_type) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value:
      return Device{DeviceKind::cpu, 0};
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value:
      return Device{DeviceKind::cuda, device_id};
    default:
      throw_invalid(name, "must be a CPU or CUDA array",
                    "DLPack device type " + std::to_string(device_type));
  }
}

template <typename A>
TensorView make_view(const A& a, std::string_view name, DType dtype) {
  if (a.ndim() > static_cast<std::size_t>(TensorView::kMaxDims)) {
    throw_invalid(name, "must have at most 4 dimensions", std::to_string(a.ndim()) + " dimensions");
  }
  TensorView v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.dtype = dtype;
  v.device = device_of(a.device_type(), a.device_id(), name);
  v.ndim = static_cast<int>(a.ndim());
  std::int64_t contiguous = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    const auto i = static_cast<std::size_t>(d);
    v.shape[i] = static_cast<std::int64_t>(a.shape(i));
    // DLPack allows strides == NULL for a compact row-major tensor.
    v.strides[i] = a.stride_ptr() != nullptr ? a.stride(i) : contiguous;
    contiguous *= v.shape[i];
  }
  return v;
}

template <typename A>
TensorView view_as(const A& a, std::string_view name, DType expected) {
  const dl::dtype t = a.dtype();
  if (is_byte_format(expected)) {
    if (!is_one_byte(t)) {
      throw_invalid(
          name,
          "must hold one-byte elements (uint8 or float8) for " + std::string(dtype_name(expected)),
          dlpack_dtype_name(t));
    }
    return make_view(a, name, expected);
  }
  const DType got = dtype_of(Array(a), name);
  if (got != expected) {
    throw_invalid(name, "must have dtype " + std::string(dtype_name(expected)),
                  std::string(dtype_name(got)));
  }
  return make_view(a, name, expected);
}

// IEEE half -> float, for host reads of float16 arrays.
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  const std::uint32_t mant = h & 0x3ffu;
  float magnitude;
  if (exp == 0) {
    magnitude = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    magnitude = mant != 0 ? std::nanf("") : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mant | 0x400u), exp - 25);
  }
  return sign != 0 ? -magnitude : magnitude;
}

// Visits the elements of a host array in row-major order, handing the address of each.
template <typename F>
void for_each_element(const Array& a, F&& visit) {
  const std::size_t n = a.size();
  if (n == 0) return;
  const auto* base = static_cast<const std::uint8_t*>(a.data());
  const std::size_t ndim = a.ndim();
  const std::int64_t item = static_cast<std::int64_t>(a.itemsize());
  std::vector<std::int64_t> index(ndim, 0);
  std::vector<std::int64_t> strides(ndim);
  std::int64_t contiguous = 1;
  for (std::size_t d = ndim; d-- > 0;) {
    strides[d] = a.stride_ptr() != nullptr ? a.stride(d) : contiguous;
    contiguous *= static_cast<std::int64_t>(a.shape(d));
  }
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < ndim; ++d) offset += index[d] * strides[d];
    visit(base + offset * item);
    for (std::size_t d = ndim; d-- > 0;) {
      if (++index[d] < static_cast<std::int64_t>(a.shape(d))) break;
      index[d] = 0;
    }
  }
}

template <typename T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

void require_host(const Array& a, std::string_view name) {
  if (device_of(a.device_type(), a.device_id(), name).kind != DeviceKind::cpu) {
    throw_invalid(name, "must be a host (CPU) array for this function", "a CUDA array");
  }
}

}  // namespace

Array as_array(nb::handle value, std::string_view name) {
  Array a;
  if (!nb::try_cast(value, a)) {
    throw_invalid(name, "must be an array (DLPack or buffer protocol)",
                  Py_TYPE(value.ptr())->tp_name);
  }
  return a;
}

MutableArray as_mutable_array(nb::handle value, std::string_view name) {
  MutableArray a;
  if (!nb::try_cast(value, a)) {
    throw_invalid(name, "must be a writable array (DLPack or buffer protocol)",
                  Py_TYPE(value.ptr())->tp_name);
  }
  return a;
}

DType dtype_of(const Array& a, std::string_view name) {
  const dl::dtype t = a.dtype();
  using C = dl::dtype_code;
  if (is_code(t, C::Float, 32)) return DType::f32;
  if (is_code(t, C::Float, 16)) return DType::f16;
  if (is_code(t, C::Float, 64)) return DType::f64;
  if (is_code(t, C::Bfloat, 16)) return DType::bf16;
  if (is_code(t, C::Int, 32)) return DType::i32;
  if (is_code(t, C::Int, 64)) return DType::i64;
  // DLPack 1.1 codes kDLFloat8_e4m3fn (10) and kDLFloat8_e8m0fnu (14), by number so that older
  // nanobind releases (without the enum names) build too.
  if (t.code == 10 && t.bits == 8 && t.lanes == 1) return DType::e4m3;
  if (t.code == 14 && t.bits == 8 && t.lanes == 1) return DType::ue8m0;
  if (is_one_byte(t)) return DType::u8;
  throw_invalid(name, "has a dtype megamoe does not use", dlpack_dtype_name(t));
}

TensorView to_view(const Array& a, std::string_view name, DType expected) {
  return view_as(a, name, expected);
}

TensorView to_view(const MutableArray& a, std::string_view name, DType expected) {
  return view_as(a, name, expected);
}

TensorView to_view_of(const Array& a, std::string_view name, std::initializer_list<DType> allowed) {
  const DType got = dtype_of(a, name);
  std::string names;
  for (DType t : allowed) {
    if (t == got) return make_view(a, name, got);
    if (!names.empty()) names += " or ";
    names += dtype_name(t);
  }
  throw_invalid(name, "must have dtype " + names, std::string(dtype_name(got)));
}

std::vector<std::int64_t> expect_host(const Array& a, std::string_view name,
                                      std::initializer_list<std::int64_t> shape) {
  require_host(a, name);
  std::vector<std::int64_t> got(a.ndim());
  for (std::size_t d = 0; d < a.ndim(); ++d) got[d] = static_cast<std::int64_t>(a.shape(d));
  bool ok = got.size() == shape.size();
  std::string want = "[";
  std::size_t d = 0;
  for (std::int64_t extent : shape) {
    if (d > 0) want += ", ";
    want += extent < 0 ? std::string("*") : std::to_string(extent);
    if (ok && extent >= 0 && got[d] != extent) ok = false;
    ++d;
  }
  want += "]";
  if (!ok) {
    std::string have = "[";
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (i > 0) have += ", ";
      have += std::to_string(got[i]);
    }
    throw_invalid(name, "must have shape " + want, "shape " + have + "]");
  }
  return got;
}

std::vector<float> read_floats(const Array& a, std::string_view name) {
  require_host(a, name);
  const DType t = dtype_of(a, name);
  std::vector<float> out;
  out.reserve(a.size());
  switch (t) {
    case DType::f32:
      for_each_element(a, [&](const std::uint8_t* p) { out.push_back(load<float>(p)); });
      break;
    case DType::f64:
      for_each_element(
          a, [&](const std::uint8_t* p) { out.push_back(static_cast<float>(load<double>(p))); });
      break;
    case DType::f16:
      for_each_element(
          a, [&](const std::uint8_t* p) { out.push_back(half_to_float(load<std::uint16_t>(p))); });
      break;
    case DType::bf16:
      for_each_element(a, [&](const std::uint8_t* p) {
        out.push_back(std::bit_cast<float>(std::uint32_t{load<std::uint16_t>(p)} << 16));
      });
      break;
    default:
      throw_invalid(name, "must be a floating-point array (float16, bfloat16, float32, float64)",
                    std::string(dtype_name(t)));
  }
  return out;
}

std::vector<std::int64_t> read_ints(const Array& a, std::string_view name) {
  require_host(a, name);
  const dl::dtype t = a.dtype();
  const bool is_signed = t.code == static_cast<std::uint8_t>(dl::dtype_code::Int);
  const bool is_unsigned = t.code == static_cast<std::uint8_t>(dl::dtype_code::UInt);
  if ((!is_signed && !is_unsigned) || t.lanes != 1) {
    throw_invalid(name, "must be an integer array", dlpack_dtype_name(t));
  }
  std::vector<std::int64_t> out;
  out.reserve(a.size());
  for_each_element(a, [&](const std::uint8_t* p) {
    std::int64_t v = 0;
    switch (t.bits) {
      case 8:
        v = is_signed ? load<std::int8_t>(p) : load<std::uint8_t>(p);
        break;
      case 16:
        v = is_signed ? load<std::int16_t>(p) : load<std::uint16_t>(p);
        break;
      case 32:
        v = is_signed ? load<std::int32_t>(p) : load<std::uint32_t>(p);
        break;
      default:
        v = load<std::int64_t>(p);
        break;
    }
    out.push_back(v);
  });
  return out;
}

std::vector<std::uint8_t> read_bytes(const Array& a, std::string_view name) {
  require_host(a, name);
  if (!is_one_byte(a.dtype())) {
    throw_invalid(name, "must hold one-byte elements (uint8)", dlpack_dtype_name(a.dtype()));
  }
  std::vector<std::uint8_t> out;
  out.reserve(a.size());
  for_each_element(a, [&](const std::uint8_t* p) { out.push_back(*p); });
  return out;
}

std::vector<std::size_t> dims(std::initializer_list<std::int64_t> extents) {
  std::vector<std::size_t> out;
  for (std::int64_t e : extents) out.push_back(static_cast<std::size_t>(e));
  return out;
}

nb::object field(nb::handle obj, const char* name) {
  if (nb::isinstance<nb::dict>(obj)) {
    nb::dict d = nb::borrow<nb::dict>(obj);
    if (!d.contains(name)) throw_invalid(name, "is missing from the dict");
    return d[name];
  }
  if (!nb::hasattr(obj, name)) throw_invalid(name, "is missing (no such attribute)");
  return obj.attr(name);
}

bool has_field(nb::handle obj, const char* name) {
  if (nb::isinstance<nb::dict>(obj)) {
    nb::dict d = nb::borrow<nb::dict>(obj);
    return d.contains(name) && !d[name].is_none();
  }
  return nb::hasattr(obj, name) && !obj.attr(name).is_none();
}

bool is_sequence(nb::handle h) {
  return nb::isinstance<nb::list>(h) || nb::isinstance<nb::tuple>(h);
}

std::vector<nb::object> per_rank(nb::handle value, std::size_t n, const char* name) {
  std::vector<nb::object> out;
  if (is_sequence(value)) {
    for (nb::handle item : value) out.push_back(nb::borrow(item));
    if (out.size() != n) {
      throw_invalid(name, "must have one entry per rank (" + std::to_string(n) + ")",
                    std::to_string(out.size()) + " entries");
    }
  } else {
    out.assign(n, nb::borrow(value));
  }
  return out;
}

std::vector<int> ranks_arg(nb::handle rank, std::size_t n, const std::vector<int>& driven) {
  std::vector<int> ranks;
  if (!rank.is_none()) {
    for (const nb::object& r : per_rank(rank, n, "rank")) ranks.push_back(nb::cast<int>(r));
  } else if (n == driven.size()) {
    ranks = driven;
  } else {
    for (std::size_t r = 0; r < n; ++r) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

TensorView field_view(nb::handle obj, const char* name, DType dtype) {
  return to_view(as_array(field(obj, name), name), name, dtype);
}

TensorView mutable_field_view(nb::handle obj, const char* name, DType dtype) {
  return to_view(as_mutable_array(field(obj, name), name), name, dtype);
}

TensorView optional_view(nb::handle obj, const char* name, DType dtype) {
  return has_field(obj, name) ? field_view(obj, name, dtype) : TensorView{};
}

TensorView optional_mutable_view(nb::handle obj, const char* name, DType dtype) {
  return has_field(obj, name) ? mutable_field_view(obj, name, dtype) : TensorView{};
}

void* stream_arg(nb::handle stream) {
  if (stream.is_none()) return nullptr;
  nb::handle value = stream;
  nb::object holder;
  if (!nb::isinstance<nb::int_>(stream)) {
    if (nb::hasattr(stream, "cuda_stream")) {
      holder = stream.attr("cuda_stream");
    } else if (nb::hasattr(stream, "ptr")) {
      holder = stream.attr("ptr");
    } else {
      throw_invalid("stream", "must be an int (cudaStream_t), None or a CUDA stream object",
                    nb::repr(stream).c_str());
    }
    value = holder;
  }
  return reinterpret_cast<void*>(nb::cast<std::uintptr_t>(value));
}

}  // namespace megamoe::python
