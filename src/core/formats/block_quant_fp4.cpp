// NVFP4 and MXFP4 block quantization of row-major [rows, k] matrices (docs/formats.md).
#include <cstdint>
#include <span>

#include "core/formats/codec_detail.hpp"
#include "core/formats/recipe_detail.hpp"
#include "megamoe/formats.hpp"

namespace megamoe::formats {
namespace {

using detail::to_str;

template <int Block>
float block_finite_amax(const float* x) {
  float m = 0.0f;
  for (int i = 0; i < Block; ++i) {
    const float a = detail::finite_abs(x[i]);
    m = a > m ? a : m;
  }
  return m;
}

// Packs the e2m1 codes of one block, low nibble = even element. Scaled(v) is the recipe's
// division of one element by its block's full scale.
template <int Block, typename Scaled>
void pack_e2m1_block(const float* x, std::uint8_t* out, Scaled scaled) {
  std::uint8_t codes[Block];
  for (int i = 0; i < Block; ++i) codes[i] = detail::e2m1_code(scaled(x[i]));
  for (int i = 0; i < Block / 2; ++i) {
    out[i] = static_cast<std::uint8_t>(codes[2 * i] | (codes[2 * i + 1] << 4));
  }
}

// One row of NVFP4 with global scale g: scales[k/16], packed[k/2].
void quantize_nvfp4_row(const float* x, std::int64_t k, float g, std::uint8_t* packed,
                        std::uint8_t* scales) {
  const float* table = detail::e4m3_table();
  for (std::int64_t b = 0; b < k / kNvfp4Block; ++b) {
    const float* xb = x + b * kNvfp4Block;
    const std::uint8_t code = detail::nvfp4_block_code(block_finite_amax<kNvfp4Block>(xb), g);
    scales[b] = code;
    const float denom = table[code] * g;  // one fp32 rounding, then one division per element
    pack_e2m1_block<kNvfp4Block>(xb, packed + b * (kNvfp4Block / 2),
                                 [denom](float v) { return v / denom; });
  }
}

void check_nvfp4_buffers(std::span<const float> x, std::int64_t rows, std::int64_t k,
                         std::span<std::uint8_t> packed, std::span<std::uint8_t> scales) {
  detail::check_matrix(rows, k, kNvfp4Block, "k");
  detail::check_size("x", x.size(), rows * k);
  detail::check_size("packed", packed.size(), rows * (k / 2));
  detail::check_size("scales", scales.size(), rows * (k / kNvfp4Block));
}

// Expands the e2m1 codes of one row into out, each multiplied by its block's scale value.
template <int Block>
void dequantize_fp4_row(const std::uint8_t* packed, const float* block_values, std::int64_t k,
                        float* out) {
  const float* e2m1 = detail::e2m1_table();
  for (std::int64_t b = 0; b < k / Block; ++b) {
    const float s = block_values[b];
    const std::uint8_t* pb = packed + b * (Block / 2);
    float* ob = out + b * Block;
    for (int i = 0; i < Block / 2; ++i) {
      ob[2 * i] = e2m1[pb[i] & 0xF] * s;
      ob[2 * i + 1] = e2m1[pb[i] >> 4] * s;
    }
  }
}

}  // namespace

void quantize_nvfp4(std::span<const float> x, std::int64_t rows, std::int64_t k, float global_scale,
                    std::span<std::uint8_t> packed, std::span<std::uint8_t> scales) {
  check_nvfp4_buffers(x, rows, k, packed, scales);
  detail::check_global_scale("global_scale", global_scale);
  detail::parallel_rows(rows, k, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      quantize_nvfp4_row(x.data() + r * k, k, global_scale, packed.data() + r * (k / 2),
                         scales.data() + r * (k / kNvfp4Block));
    }
  });
}

void quantize_nvfp4_per_row(std::span<const float> x, std::int64_t rows, std::int64_t k,
                            std::span<std::uint8_t> packed, std::span<std::uint8_t> scales,
                            std::span<float> global_scales) {
  check_nvfp4_buffers(x, rows, k, packed, scales);
  detail::check_size("global_scales", global_scales.size(), rows);
  detail::parallel_rows(rows, k, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* xr = x.data() + r * k;
      const float g = detail::nvfp4_global_from_amax(
          finite_abs_max(std::span<const float>(xr, static_cast<std::size_t>(k))));
      global_scales[static_cast<std::size_t>(r)] = g;
      quantize_nvfp4_row(xr, k, g, packed.data() + r * (k / 2),
                         scales.data() + r * (k / kNvfp4Block));
    }
  });
}

void dequantize_nvfp4(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> scales,
                      std::span<const float> global_scales, std::int64_t rows, std::int64_t k,
                      std::span<float> out) {
  detail::check_matrix(rows, k, kNvfp4Block, "k");
  detail::check_size("packed", packed.size(), rows * (k / 2));
  detail::check_size("scales", scales.size(), rows * (k / kNvfp4Block));
  detail::check_size("out", out.size(), rows * k);
  const auto n_global = static_cast<std::int64_t>(global_scales.size());
  if (n_global != 1 && n_global != rows) {
    throw_invalid("global_scales",
                  "must hold 1 (per tensor) or rows = " + to_str(rows) + " (per row) values",
                  to_str(n_global));
  }
  const float* e4m3 = detail::e4m3_table();
  detail::parallel_rows(rows, k, [&](std::int64_t r0, std::int64_t r1) {
    std::vector<float> block_values(static_cast<std::size_t>(k / kNvfp4Block));
    for (std::int64_t r = r0; r < r1; ++r) {
      const float g = global_scales[static_cast<std::size_t>(n_global == 1 ? 0 : r)];
      const std::uint8_t* sr = scales.data() + r * (k / kNvfp4Block);
      // value = (e2m1 * scale) * g: the first product is exact (2 x 4 significant bits), so
      // only the multiplication by g rounds.
      for (std::size_t b = 0; b < block_values.size(); ++b) block_values[b] = e4m3[sr[b]];
      float* orow = out.data() + r * k;
      dequantize_fp4_row<kNvfp4Block>(packed.data() + r * (k / 2), block_values.data(), k, orow);
      for (std::int64_t i = 0; i < k; ++i) orow[i] *= g;
    }
  });
}

void quantize_mxfp4(std::span<const float> x, std::int64_t rows, std::int64_t k,
                    std::span<std::uint8_t> packed, std::span<std::uint8_t> scales) {
  detail::check_matrix(rows, k, kMxfp4Block, "k");
  detail::check_size("x", x.size(), rows * k);
  detail::check_size("packed", packed.size(), rows * (k / 2));
  detail::check_size("scales", scales.size(), rows * (k / kMxfp4Block));
  detail::parallel_rows(rows, k, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* xr = x.data() + r * k;
      std::uint8_t* sr = scales.data() + r * (k / kMxfp4Block);
      for (std::int64_t b = 0; b < k / kMxfp4Block; ++b) {
        const float* xb = xr + b * kMxfp4Block;
        const std::uint8_t code =
            detail::pow2_block_code(block_finite_amax<kMxfp4Block>(xb), kE2m1Max);
        sr[b] = code;
        // Multiplying by the exact reciprocal 2^(127-s) is bitwise equal to dividing by 2^(s-127).
        const float inv = detail::ue8m0_reciprocal(code);
        pack_e2m1_block<kMxfp4Block>(xb, packed.data() + r * (k / 2) + b * (kMxfp4Block / 2),
                                     [inv](float v) { return v * inv; });
      }
    }
  });
}

void dequantize_mxfp4(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> scales,
                      std::int64_t rows, std::int64_t k, std::span<float> out) {
  detail::check_matrix(rows, k, kMxfp4Block, "k");
  detail::check_size("packed", packed.size(), rows * (k / 2));
  detail::check_size("scales", scales.size(), rows * (k / kMxfp4Block));
  detail::check_size("out", out.size(), rows * k);
  detail::parallel_rows(rows, k, [&](std::int64_t r0, std::int64_t r1) {
    std::vector<float> block_values(static_cast<std::size_t>(k / kMxfp4Block));
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::uint8_t* sr = scales.data() + r * (k / kMxfp4Block);
      for (std::size_t b = 0; b < block_values.size(); ++b) {
        block_values[b] = detail::ue8m0_value(sr[b]);
      }
      dequantize_fp4_row<kMxfp4Block>(packed.data() + r * (k / 2), block_values.data(), k,
                                      out.data() + r * k);
    }
  });
}

}  // namespace megamoe::formats
