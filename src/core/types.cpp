#include "megamoe/types.hpp"

#include "megamoe/error.hpp"

namespace megamoe {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::bf16:
    case DType::f16:
      return 2;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::u8:
    case DType::e4m3:
    case DType::e2m1x2:
    case DType::ue4m3:
    case DType::ue8m0:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::e4m3:
      return "e4m3";
    case DType::e2m1x2:
      return "e2m1x2";
    case DType::ue4m3:
      return "ue4m3";
    case DType::ue8m0:
      return "ue8m0";
  }
  return "?";
}

std::string_view format_name(Format f) {
  switch (f) {
    case Format::bf16:
      return "bf16";
    case Format::fp8:
      return "fp8";
    case Format::mxfp4:
      return "mxfp4";
    case Format::nvfp4:
      return "nvfp4";
  }
  return "?";
}

std::string_view activation_name(ActivationKind a) {
  switch (a) {
    case ActivationKind::swiglu:
      return "swiglu";
    case ActivationKind::geglu:
      return "geglu";
    case ActivationKind::swiglu_oai:
      return "swiglu_oai";
  }
  return "?";
}

TensorView TensorView::contiguous(void* data, DType dtype,
                                  std::initializer_list<std::int64_t> shape, Device device) {
  if (shape.size() > static_cast<std::size_t>(kMaxDims)) {
    throw_invalid("shape", "a TensorView has at most 4 dimensions");
  }
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (std::int64_t s : shape) v.shape[static_cast<std::size_t>(i++)] = s;
  std::int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.strides[static_cast<std::size_t>(d)] = stride;
    stride *= v.shape[static_cast<std::size_t>(d)];
  }
  return v;
}

std::int64_t TensorView::size(int dim) const {
  const int d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= ndim) throw_invalid("dim", "must index an existing dimension");
  return shape[static_cast<std::size_t>(d)];
}

std::int64_t TensorView::numel() const noexcept {
  std::int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[static_cast<std::size_t>(d)];
  return n;
}

bool TensorView::is_contiguous() const noexcept {
  std::int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    const auto i = static_cast<std::size_t>(d);
    if (shape[i] != 1 && strides[i] != stride) return false;
    stride *= shape[i];
  }
  return true;
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < ndim; ++d) {
    if (d) s += ", ";
    s += std::to_string(shape[static_cast<std::size_t>(d)]);
  }
  return s + "]";
}

}  // namespace megamoe
