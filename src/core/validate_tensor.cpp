// Reusable tensor checks of the validation layer (core/validate.hpp).
#include <cstdio>
#include <string>

#include "core/validate.hpp"
#include "megamoe/error.hpp"

namespace megamoe::validate {
namespace {

std::string num(std::int64_t v) {
  return std::to_string(v);
}

std::string device_string(Device d) {
  return (d.kind == DeviceKind::cuda ? "cuda:" : "cpu:") + std::to_string(d.index);
}

std::string strides_string(const TensorView& t) {
  std::string s = "strides [";
  for (int d = 0; d < t.ndim; ++d) {
    if (d) s += ", ";
    s += num(t.strides[static_cast<std::size_t>(d)]);
  }
  return s + "]";
}

std::string address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

bool empty_tensor(const TensorView& t) {
  return t.ndim > 0 && t.numel() == 0;
}

}  // namespace

std::string indexed(std::string_view name, std::size_t i) {
  return std::string(name) + "[" + std::to_string(i) + "]";
}

std::string field(std::string_view name, std::string_view member) {
  return std::string(name) + "." + std::string(member);
}

void check_defined(const TensorView& t, std::string_view name) {
  if (t.data == nullptr && !empty_tensor(t)) {
    throw_invalid(name, "is required but missing (data pointer is null)");
  }
}

void check_absent(const TensorView& t, std::string_view name, std::string_view why) {
  if (t.data != nullptr || t.ndim != 0) {
    throw_invalid(name, "must be left empty " + std::string(why), t.shape_string());
  }
}

void check_dtype(const TensorView& t, std::string_view name, DType want) {
  if (t.dtype != want) {
    throw_invalid(name, "dtype must be " + std::string(dtype_name(want)),
                  std::string(dtype_name(t.dtype)));
  }
}

void check_dtype_any(const TensorView& t, std::string_view name,
                     std::initializer_list<DType> allowed) {
  std::string list;
  for (DType d : allowed) {
    if (d == t.dtype) return;
    if (!list.empty()) list += " or ";
    list += dtype_name(d);
  }
  throw_invalid(name, "dtype must be " + list, std::string(dtype_name(t.dtype)));
}

void check_ndim(const TensorView& t, std::string_view name, int ndim) {
  if (t.ndim != ndim) {
    throw_invalid(name, "must have " + std::to_string(ndim) + " dimensions",
                  "shape " + t.shape_string());
  }
}

void check_dim(const TensorView& t, std::string_view name, int dim, std::int64_t want,
               std::string_view what) {
  if (t.shape[static_cast<std::size_t>(dim)] != want) {
    throw_invalid(
        name, "dim " + std::to_string(dim) + " must equal " + std::string(what) + " = " + num(want),
        "shape " + t.shape_string());
  }
}

void check_dim_at_most(const TensorView& t, std::string_view name, int dim, std::int64_t max,
                       std::string_view what) {
  const std::int64_t v = t.shape[static_cast<std::size_t>(dim)];
  if (v < 0 || v > max) {
    throw_invalid(name,
                  "dim " + std::to_string(dim) + " must be in [0, " + std::string(what) + " = " +
                      num(max) + "]",
                  "shape " + t.shape_string());
  }
}

void check_shape(const TensorView& t, std::string_view name, std::initializer_list<Dim> dims) {
  check_ndim(t, name, static_cast<int>(dims.size()));
  int d = 0;
  for (const Dim& dim : dims) check_dim(t, name, d++, dim.value, dim.what);
}

void check_contiguous(const TensorView& t, std::string_view name) {
  if (!t.is_contiguous()) {
    throw_invalid(name, "must be contiguous (dense row-major)",
                  "shape " + t.shape_string() + ", " + strides_string(t));
  }
}

void check_rows(const TensorView& t, std::string_view name, std::size_t bytes) {
  if (t.ndim == 0) return;
  const auto last = static_cast<std::size_t>(t.ndim - 1);
  if (t.shape[last] > 1 && t.strides[last] != 1) {
    throw_invalid(name, "last dimension must be dense (stride 1)", strides_string(t));
  }
  const std::size_t elem = dtype_size(t.dtype);
  for (int d = t.ndim - 2; d >= 0; --d) {
    const auto i = static_cast<std::size_t>(d);
    if (t.shape[i] <= 1) continue;
    const std::int64_t inner = t.shape[i + 1] * (t.shape[i + 1] > 1 ? t.strides[i + 1] : 1);
    if (t.strides[i] < inner) {
      throw_invalid(
          name,
          "rows must not overlap: stride of dim " + std::to_string(d) + " must be >= " + num(inner),
          strides_string(t));
    }
    if ((static_cast<std::size_t>(t.strides[i]) * elem) % bytes != 0) {
      throw_invalid(name,
                    "stride of dim " + std::to_string(d) + " must be a multiple of " +
                        std::to_string(bytes) + " bytes",
                    strides_string(t) + " of " + std::to_string(elem) + "-byte elements");
    }
  }
}

void check_pointer_aligned(const TensorView& t, std::string_view name, std::size_t bytes) {
  if (reinterpret_cast<std::uintptr_t>(t.data) % bytes != 0) {
    throw_invalid(name, "data pointer must be " + std::to_string(bytes) + "-byte aligned",
                  address(t.data));
  }
}

void check_device(const TensorView& t, std::string_view name, Device device) {
  if (t.device.kind != DeviceKind::cuda) {
    throw_invalid(name, "must be a CUDA tensor", device_string(t.device));
  }
  if (t.device.index != device.index) {
    throw_invalid(name, "must be on the buffer's GPU " + device_string(device),
                  device_string(t.device));
  }
}

void check_min_bytes(const TensorView& t, std::string_view name, std::size_t need,
                     std::string_view what) {
  if (t.nbytes() < need) {
    throw_invalid(
        name, "must hold at least " + std::to_string(need) + " bytes (" + std::string(what) + ")",
        std::to_string(t.nbytes()) + " bytes");
  }
}

void check_tensor_any(const TensorView& t, std::string_view name,
                      std::initializer_list<DType> dtypes, std::initializer_list<Dim> dims,
                      Device device, bool contiguous) {
  check_defined(t, name);
  check_device(t, name, device);
  check_dtype_any(t, name, dtypes);
  check_shape(t, name, dims);
  if (contiguous) {
    check_contiguous(t, name);
  } else {
    check_rows(t, name);
  }
  if (t.data != nullptr) check_pointer_aligned(t, name);
}

void check_tensor(const TensorView& t, std::string_view name, DType dtype,
                  std::initializer_list<Dim> dims, Device device, bool contiguous) {
  check_tensor_any(t, name, {dtype}, dims, device, contiguous);
}

}  // namespace megamoe::validate

namespace megamoe::validate {

std::int64_t check_token_rows(const TensorView& t, std::string_view name, DType dtype,
                              const MoEConfig& config, Device device) {
  check_defined(t, name);
  check_device(t, name, device);
  check_dtype(t, name, dtype);
  check_ndim(t, name, 2);
  check_dim_at_most(t, name, 0, config.max_tokens_per_rank, "max_tokens_per_rank");
  const std::int64_t tokens = t.shape[0];
  check_tensor(t, name, dtype, {{tokens, "tokens"}, {config.shape.hidden, "hidden"}}, device,
               /*contiguous=*/false);
  return tokens;
}

}  // namespace megamoe::validate
