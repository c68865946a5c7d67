#include "reference/weight_decode.hpp"

#include <array>
#include <cmath>
#include <string>

#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"

namespace megamoe::reference::detail {
namespace {

// Lookup tables built from the scalar codecs of formats.hpp, so the definitions stay there.
struct CodeTables {
  std::array<float, 256> e2m1_lo{}, e2m1_hi{};  // byte -> value of its low / high nibble
  std::array<float, 256> ue4m3{}, ue8m0{}, e4m3{};
  CodeTables() {
    for (int b = 0; b < 256; ++b) {
      const auto u = static_cast<std::uint8_t>(b);
      e2m1_lo[b] = formats::e2m1_to_float(static_cast<std::uint8_t>(u & 0xF));
      e2m1_hi[b] = formats::e2m1_to_float(static_cast<std::uint8_t>(u >> 4));
      ue4m3[b] = formats::ue4m3_to_float(u);
      ue8m0[b] = formats::ue8m0_to_float(u);
      e4m3[b] = formats::e4m3_to_float(u);
    }
  }
};

const CodeTables& tables() {
  static const CodeTables t;
  return t;
}

void decode_fp4(const QuantizedMatrix& m, int block, const std::array<float, 256>& scale_table,
                std::int64_t expert, std::int64_t row0, std::int64_t nrows, float* out) {
  const CodeTables& t = tables();
  const std::int64_t cols = m.cols, blocks = cols / block;
  for (std::int64_t r = 0; r < nrows; ++r) {
    const std::int64_t row = expert * m.rows + row0 + r;
    const std::uint8_t* packed = m.packed.data() + row * (cols / 2);
    const std::uint8_t* scales = m.scales.data() + row * blocks;
    float* o = out + r * cols;
    for (std::int64_t b = 0; b < blocks; ++b) {
      const float s = scale_table[scales[b]];
      for (int i = 0; i < block / 2; ++i) {
        const std::uint8_t byte = packed[b * (block / 2) + i];
        o[b * block + 2 * i] = t.e2m1_lo[byte] * s;
        o[b * block + 2 * i + 1] = t.e2m1_hi[byte] * s;
      }
    }
  }
}

void decode_fp8(const QuantizedMatrix& m, std::int64_t expert, std::int64_t row0,
                std::int64_t nrows, float* out) {
  const CodeTables& t = tables();
  const std::int64_t cols = m.cols, col_blocks = cols / formats::kFp8Block;
  const std::int64_t row_blocks = (m.rows + formats::kFp8Block - 1) / formats::kFp8Block;
  for (std::int64_t r = 0; r < nrows; ++r) {
    const std::int64_t row = row0 + r;
    const std::uint8_t* q = m.packed.data() + (expert * m.rows + row) * cols;
    const std::int64_t scale_row = (expert * row_blocks + row / formats::kFp8Block) * col_blocks;
    float* o = out + r * cols;
    for (std::int64_t b = 0; b < col_blocks; ++b) {
      const float s = m.fp8_scale == Fp8ScaleKind::f32 ? m.scales_f32[scale_row + b]
                                                       : t.ue8m0[m.scales[scale_row + b]];
      for (int i = 0; i < formats::kFp8Block; ++i) {
        const std::int64_t c = b * formats::kFp8Block + i;
        o[c] = t.e4m3[q[c]] * s;
      }
    }
  }
}

std::string dims(std::int64_t e, std::int64_t r, std::int64_t c) {
  return "[" + std::to_string(e) + ", " + std::to_string(r) + ", " + std::to_string(c) + "]";
}

void expect_size(const char* name, const char* field, std::size_t have, std::int64_t need) {
  if (static_cast<std::int64_t>(have) != need) {
    throw_invalid(std::string(name) + "." + field,
                  "must hold " + std::to_string(need) + " elements for its shape",
                  std::to_string(have));
  }
}

}  // namespace

void decode_rows(const QuantizedMatrix& m, std::int64_t expert, std::int64_t row0,
                 std::int64_t nrows, float* out) {
  switch (m.format) {
    case Format::nvfp4:
      decode_fp4(m, formats::kNvfp4Block, tables().ue4m3, expert, row0, nrows, out);
      return;
    case Format::mxfp4:
      decode_fp4(m, formats::kMxfp4Block, tables().ue8m0, expert, row0, nrows, out);
      return;
    case Format::fp8:
      decode_fp8(m, expert, row0, nrows, out);
      return;
    case Format::bf16: {
      const std::uint16_t* src = m.bf16.data() + (expert * m.rows + row0) * m.cols;
      for (std::int64_t i = 0; i < nrows * m.cols; ++i) out[i] = formats::bf16_to_float(src[i]);
      return;
    }
  }
}

float matrix_global_scale(const QuantizedMatrix& m, std::int64_t expert) {
  return m.format == Format::nvfp4 ? m.global_scales[static_cast<std::size_t>(expert)] : 1.0f;
}

void validate_matrix(const QuantizedMatrix& m, const char* name, Format format,
                     Fp8ScaleKind fp8_scale, std::int64_t experts, std::int64_t rows,
                     std::int64_t cols) {
  if (m.format != format) {
    throw_invalid(name, "format must be " + std::string(format_name(format)) + " (config)",
                  std::string(format_name(m.format)));
  }
  if (m.experts != experts || m.rows != rows || m.cols != cols) {
    throw_invalid(name, "shape must be " + dims(experts, rows, cols),
                  dims(m.experts, m.rows, m.cols));
  }
  const std::int64_t n = experts * rows * cols;
  switch (format) {
    case Format::nvfp4:
    case Format::mxfp4: {
      const int block = format == Format::nvfp4 ? formats::kNvfp4Block : formats::kMxfp4Block;
      expect_size(name, "packed", m.packed.size(), n / 2);
      expect_size(name, "scales", m.scales.size(), n / block);
      if (format == Format::nvfp4) {
        expect_size(name, "global_scales", m.global_scales.size(), experts);
        for (float g : m.global_scales) {
          if (!(g > 0.0f) || !std::isfinite(g)) {
            throw_invalid(std::string(name) + ".global_scales", "must be finite and > 0",
                          std::to_string(g));
          }
        }
      }
      return;
    }
    case Format::fp8: {
      if (m.fp8_scale != fp8_scale) {
        throw_invalid(std::string(name) + ".fp8_scale", "must match config.fp8_scale");
      }
      expect_size(name, "packed", m.packed.size(), n);
      const std::int64_t nscales = experts *
                                   ((rows + formats::kFp8Block - 1) / formats::kFp8Block) *
                                   (cols / formats::kFp8Block);
      if (fp8_scale == Fp8ScaleKind::f32) {
        expect_size(name, "scales_f32", m.scales_f32.size(), nscales);
      } else {
        expect_size(name, "scales", m.scales.size(), nscales);
      }
      return;
    }
    case Format::bf16:
      expect_size(name, "bf16", m.bf16.size(), n);
      return;
  }
}

}  // namespace megamoe::reference::detail
