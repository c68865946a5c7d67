// The bit-exact format helpers (megamoe/formats.hpp) over NumPy arrays: quantize, dequantize,
// scale-layout swizzles, scalar codecs. Host memory only; results are new NumPy arrays.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>

#include "common.hpp"
#include "megamoe/formats.hpp"

namespace megamoe::python {
namespace {

namespace f = megamoe::formats;

struct Matrix {
  std::int64_t rows = 0, k = 0;
  std::vector<float> values;
};

Matrix read_matrix(const Array& x, const char* name, int block) {
  const auto shape = expect_host(x, name, {-1, -1});
  if (shape[1] % block != 0) {
    throw_invalid(name, "must have a last dimension that is a multiple of " + std::to_string(block),
                  std::to_string(shape[1]));
  }
  return Matrix{shape[0], shape[1], read_floats(x, name)};
}

// Packed FP4 [rows, k/2] and its scales [rows, k/block]: returns k.
std::int64_t check_fp4(const Array& packed, const Array& scales, int block) {
  const auto p = expect_host(packed, "packed", {-1, -1});
  const std::int64_t k = p[1] * 2;
  expect_host(scales, "scales", {p[0], k / block});
  if (k % block != 0) {
    throw_invalid("packed", "must have k/2 columns with k a multiple of " + std::to_string(block),
                  std::to_string(p[1]));
  }
  return k;
}

nb::tuple quantize_nvfp4(const Array& x, float global_scale) {
  Matrix m = read_matrix(x, "x", f::kNvfp4Block);
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(m.rows * m.k / 2));
  std::vector<std::uint8_t> scales(static_cast<std::size_t>(m.rows * m.k / f::kNvfp4Block));
  f::quantize_nvfp4(m.values, m.rows, m.k, global_scale, packed, scales);
  return nb::make_tuple(to_numpy(std::move(packed), dims({m.rows, m.k / 2})),
                        to_numpy(std::move(scales), dims({m.rows, m.k / f::kNvfp4Block})));
}

nb::tuple quantize_nvfp4_per_row(const Array& x) {
  Matrix m = read_matrix(x, "x", f::kNvfp4Block);
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(m.rows * m.k / 2));
  std::vector<std::uint8_t> scales(static_cast<std::size_t>(m.rows * m.k / f::kNvfp4Block));
  std::vector<float> global(static_cast<std::size_t>(m.rows));
  f::quantize_nvfp4_per_row(m.values, m.rows, m.k, packed, scales, global);
  return nb::make_tuple(to_numpy(std::move(packed), dims({m.rows, m.k / 2})),
                        to_numpy(std::move(scales), dims({m.rows, m.k / f::kNvfp4Block})),
                        to_numpy(std::move(global), dims({m.rows})));
}

nb::object dequantize_nvfp4(const Array& packed, const Array& scales, const Array& global_scales) {
  const std::int64_t k = check_fp4(packed, scales, f::kNvfp4Block);
  const std::int64_t rows = static_cast<std::int64_t>(packed.shape(0));
  std::vector<float> global = read_floats(global_scales, "global_scales");
  if (global.size() != 1 && static_cast<std::int64_t>(global.size()) != rows) {
    throw_invalid("global_scales", "must hold 1 (per tensor) or rows (per row) values",
                  std::to_string(global.size()) + " values for " + std::to_string(rows) + " rows");
  }
  std::vector<float> out(static_cast<std::size_t>(rows * k));
  f::dequantize_nvfp4(read_bytes(packed, "packed"), read_bytes(scales, "scales"), global, rows, k,
                      out);
  return to_numpy(std::move(out), dims({rows, k}));
}

nb::tuple quantize_mxfp4(const Array& x) {
  Matrix m = read_matrix(x, "x", f::kMxfp4Block);
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(m.rows * m.k / 2));
  std::vector<std::uint8_t> scales(static_cast<std::size_t>(m.rows * m.k / f::kMxfp4Block));
  f::quantize_mxfp4(m.values, m.rows, m.k, packed, scales);
  return nb::make_tuple(to_numpy(std::move(packed), dims({m.rows, m.k / 2})),
                        to_numpy(std::move(scales), dims({m.rows, m.k / f::kMxfp4Block})));
}

nb::object dequantize_mxfp4(const Array& packed, const Array& scales) {
  const std::int64_t k = check_fp4(packed, scales, f::kMxfp4Block);
  const std::int64_t rows = static_cast<std::int64_t>(packed.shape(0));
  std::vector<float> out(static_cast<std::size_t>(rows * k));
  f::dequantize_mxfp4(read_bytes(packed, "packed"), read_bytes(scales, "scales"), rows, k, out);
  return to_numpy(std::move(out), dims({rows, k}));
}

// FP8: `block_rows` 1 (activations, 1x128) or 128 (weights, 128x128).
nb::tuple quantize_fp8(const Array& x, nb::handle kind_arg, int block_rows) {
  const Fp8ScaleKind kind = enum_arg<Fp8ScaleKind>(kind_arg, "scale_kind");
  Matrix m = read_matrix(x, "x", f::kFp8Block);
  const std::int64_t scale_rows = (m.rows + block_rows - 1) / block_rows;
  const auto n_scales = static_cast<std::size_t>(scale_rows * (m.k / f::kFp8Block));
  std::vector<std::uint8_t> q(static_cast<std::size_t>(m.rows * m.k));
  std::vector<float> s_f32(kind == Fp8ScaleKind::f32 ? n_scales : 0);
  std::vector<std::uint8_t> s_ue8m0(kind == Fp8ScaleKind::ue8m0 ? n_scales : 0);
  if (block_rows == 1) {
    f::quantize_fp8_1x128(m.values, m.rows, m.k, kind, q, s_f32, s_ue8m0);
  } else {
    f::quantize_fp8_128x128(m.values, m.rows, m.k, kind, q, s_f32, s_ue8m0);
  }
  nb::object scales = kind == Fp8ScaleKind::f32
                          ? to_numpy(std::move(s_f32), dims({scale_rows, m.k / f::kFp8Block}))
                          : to_numpy(std::move(s_ue8m0), dims({scale_rows, m.k / f::kFp8Block}));
  return nb::make_tuple(to_numpy(std::move(q), dims({m.rows, m.k})), scales);
}

// The scale kind follows the dtype of `scales`: float32 -> f32, uint8 -> ue8m0.
nb::object dequantize_fp8(const Array& q, const Array& scales, int block_rows) {
  if (block_rows != 1 && block_rows != 128) {
    throw_invalid("block_rows", "must be 1 (1x128 activations) or 128 (128x128 weights)",
                  std::to_string(block_rows));
  }
  const auto shape = expect_host(q, "q", {-1, -1});
  const std::int64_t rows = shape[0], k = shape[1];
  if (k % f::kFp8Block != 0) {
    throw_invalid("q", "must have a last dimension that is a multiple of 128", std::to_string(k));
  }
  expect_host(scales, "scales", {(rows + block_rows - 1) / block_rows, k / f::kFp8Block});
  const DType sdt = dtype_of(scales, "scales");
  std::vector<float> out(static_cast<std::size_t>(rows * k));
  if (sdt == DType::f32) {
    f::dequantize_fp8(read_bytes(q, "q"), rows, k, block_rows, Fp8ScaleKind::f32,
                      read_floats(scales, "scales"), {}, out);
  } else if (sdt == DType::u8 || sdt == DType::ue8m0) {
    f::dequantize_fp8(read_bytes(q, "q"), rows, k, block_rows, Fp8ScaleKind::ue8m0, {},
                      read_bytes(scales, "scales"), out);
  } else {
    throw_invalid("scales", "must be float32 (f32 scales) or uint8 (ue8m0 scales)",
                  std::string(dtype_name(sdt)));
  }
  return to_numpy(std::move(out), dims({rows, k}));
}

nb::object swizzle(const Array& sf) {
  const auto shape = expect_host(sf, "sf", {-1, -1});
  std::vector<std::uint8_t> out(
      static_cast<std::size_t>(f::swizzled_128x4_size(shape[0], shape[1])));
  f::swizzle_128x4(read_bytes(sf, "sf"), shape[0], shape[1], out);
  const auto n = static_cast<std::int64_t>(out.size());
  return to_numpy(std::move(out), dims({n}));
}

nb::object unswizzle(const Array& swizzled, std::int64_t rows, std::int64_t cols) {
  if (rows < 0 || cols < 0) throw_invalid("rows/cols", "must be >= 0");
  expect_host(swizzled, "swizzled", {f::swizzled_128x4_size(rows, cols)});
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * cols));
  f::unswizzle_128x4(read_bytes(swizzled, "swizzled"), rows, cols, out);
  return to_numpy(std::move(out), dims({rows, cols}));
}

}  // namespace

void register_formats(nb::module_& root) {
  nb::module_ m = root.def_submodule("formats", "Bit-exact number formats (CPU).");
  m.def("bf16_from_float", &f::bf16_from_float, nb::arg("x"));
  m.def("bf16_to_float", &f::bf16_to_float, nb::arg("bits"));
  m.def("round_to_bf16", &f::round_to_bf16, nb::arg("x"));
  m.def("e2m1_from_float", &f::e2m1_from_float, nb::arg("x"));
  m.def("e2m1_to_float", &f::e2m1_to_float, nb::arg("nibble"));
  m.def("e4m3_from_float", &f::e4m3_from_float, nb::arg("x"));
  m.def("e4m3_to_float", &f::e4m3_to_float, nb::arg("code"));
  m.def("ue4m3_from_float", &f::ue4m3_from_float, nb::arg("x"));
  m.def("ue4m3_to_float", &f::ue4m3_to_float, nb::arg("code"));
  m.def("ue8m0_from_float_ceil", &f::ue8m0_from_float_ceil, nb::arg("x"));
  m.def("ue8m0_to_float", &f::ue8m0_to_float, nb::arg("code"));

  m.attr("E2M1_MAX") = f::kE2m1Max;
  m.attr("E4M3_MAX") = f::kE4m3Max;
  m.attr("NVFP4_BLOCK") = f::kNvfp4Block;
  m.attr("MXFP4_BLOCK") = f::kMxfp4Block;
  m.attr("FP8_BLOCK") = f::kFp8Block;

  m.def(
      "finite_abs_max", [](const Array& x) { return f::finite_abs_max(read_floats(x, "x")); },
      nb::arg("x"));
  m.def("nvfp4_global_scale", &f::nvfp4_global_scale, nb::arg("amax"));
  m.def("nvfp4_block_scale", &f::nvfp4_block_scale, nb::arg("block_amax"), nb::arg("global_scale"));
  m.def("mxfp4_block_scale", &f::mxfp4_block_scale, nb::arg("block_amax"));
  m.def("fp8_pow2_block_scale", &f::fp8_pow2_block_scale, nb::arg("block_amax"));
  m.def("fp8_f32_block_scale", &f::fp8_f32_block_scale, nb::arg("block_amax"));

  m.def("quantize_nvfp4", &quantize_nvfp4, nb::arg("x"), nb::arg("global_scale"),
        "x [rows, k] -> (packed uint8 [rows, k/2], ue4m3 scales uint8 [rows, k/16])");
  m.def("quantize_nvfp4_per_row", &quantize_nvfp4_per_row, nb::arg("x"),
        "x [rows, k] -> (packed, scales, global_scales float32 [rows])");
  m.def("dequantize_nvfp4", &dequantize_nvfp4, nb::arg("packed"), nb::arg("scales"),
        nb::arg("global_scales"));
  m.def("quantize_mxfp4", &quantize_mxfp4, nb::arg("x"),
        "x [rows, k] -> (packed uint8 [rows, k/2], ue8m0 scales uint8 [rows, k/32])");
  m.def("dequantize_mxfp4", &dequantize_mxfp4, nb::arg("packed"), nb::arg("scales"));
  m.def(
      "quantize_fp8_1x128",
      [](const Array& x, nb::handle kind) { return quantize_fp8(x, kind, 1); }, nb::arg("x"),
      nb::arg("scale_kind") = "f32",
      "x [rows, k] -> (e4m3 uint8 [rows, k], scales [rows, k/128] float32 or ue8m0 uint8)");
  m.def(
      "quantize_fp8_128x128",
      [](const Array& x, nb::handle kind) { return quantize_fp8(x, kind, 128); }, nb::arg("w"),
      nb::arg("scale_kind") = "f32",
      "w [rows, k] -> (e4m3 uint8 [rows, k], scales [ceil(rows/128), k/128])");
  m.def("dequantize_fp8", &dequantize_fp8, nb::arg("q"), nb::arg("scales"), nb::arg("block_rows"));

  m.def("swizzled_128x4_size", &f::swizzled_128x4_size, nb::arg("rows"), nb::arg("cols"));
  m.def("swizzled_128x4_offset", &f::swizzled_128x4_offset, nb::arg("row"), nb::arg("col"),
        nb::arg("cols"));
  m.def("swizzle_128x4", &swizzle, nb::arg("sf"),
        "row-major scales [rows, cols] -> the 128x4 swizzled bytes (flat, padding zeroed)");
  m.def("unswizzle_128x4", &unswizzle, nb::arg("swizzled"), nb::arg("rows"), nb::arg("cols"));
}

}  // namespace megamoe::python
