// Scale recipes of ../shared/DESIGN.md §3, as exact fp32 sequences (docs/formats.md, "Recipes").
#include <cfloat>
#include <cmath>
#include <string>

#include "core/formats/codec_detail.hpp"
#include "core/formats/recipe_detail.hpp"
#include "megamoe/formats.hpp"

namespace megamoe::formats {
namespace detail {

void check_matrix(std::int64_t rows, std::int64_t k, int block, const char* k_name) {
  if (rows < 0) throw_invalid("rows", "must be >= 0", to_str(rows));
  if (k <= 0 || k % block != 0) {
    throw_invalid(k_name, "must be a positive multiple of the block size " + std::to_string(block),
                  to_str(k));
  }
}

void check_size(const char* name, std::size_t have, std::int64_t need) {
  if (static_cast<std::int64_t>(have) < need) {
    throw_invalid(name, "buffer too small: needs " + to_str(need) + " elements",
                  std::to_string(have));
  }
}

void check_amax(const char* name, float amax) {
  if (!(amax >= 0.0f) || amax > FLT_MAX) {
    throw_invalid(name, "an amax must be finite and >= 0", std::to_string(amax));
  }
}

}  // namespace detail

float finite_abs_max(std::span<const float> x) {
  float m = 0.0f;
  for (const float v : x) {
    const float a = detail::finite_abs(v);
    m = a > m ? a : m;
  }
  return m;
}

float nvfp4_global_scale(float amax) {
  detail::check_amax("amax", amax);
  return detail::nvfp4_global_from_amax(amax);
}

std::uint8_t nvfp4_block_scale(float block_amax, float global_scale) {
  detail::check_amax("block_amax", block_amax);
  detail::check_global_scale("global_scale", global_scale);
  return detail::nvfp4_block_code(block_amax, global_scale);
}

std::uint8_t mxfp4_block_scale(float block_amax) {
  detail::check_amax("block_amax", block_amax);
  return detail::pow2_block_code(block_amax, kE2m1Max);
}

std::uint8_t fp8_pow2_block_scale(float block_amax) {
  detail::check_amax("block_amax", block_amax);
  return detail::pow2_block_code(block_amax, kE4m3Max);
}

float fp8_f32_block_scale(float block_amax) {
  detail::check_amax("block_amax", block_amax);
  return detail::fp8_f32_scale(block_amax);
}

}  // namespace megamoe::formats
