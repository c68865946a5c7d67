// FP8 e4m3 block quantization: 1x128 (activations) and 128x128 (weights) blocks with fp32 or
// UE8M0 scales (docs/formats.md).
#include <algorithm>
#include <cstdint>
#include <span>

#include "core/formats/codec_detail.hpp"
#include "core/formats/recipe_detail.hpp"
#include "megamoe/formats.hpp"

namespace megamoe::formats {
namespace {

using detail::to_str;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

float segment_finite_amax(const float* x, std::int64_t n, float m) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float a = detail::finite_abs(x[i]);
    m = a > m ? a : m;
  }
  return m;
}

// The scale of one block from its amax, stored in the span that `kind` selects, and the
// element step: q = e4m3(x / scale_f32) or q = e4m3(x * 2^(127-s)) (== x / 2^(s-127) exactly).
struct Fp8BlockScale {
  Fp8ScaleKind kind;
  float divisor = 1.0f;     // f32
  float reciprocal = 1.0f;  // ue8m0
  std::uint8_t code = 0;    // ue8m0

  Fp8BlockScale(Fp8ScaleKind k, float amax) : kind(k) {
    if (kind == Fp8ScaleKind::f32) {
      divisor = detail::fp8_f32_scale(amax);
    } else {
      code = detail::pow2_block_code(amax, kE4m3Max);
      reciprocal = detail::ue8m0_reciprocal(code);
    }
  }

  void store(std::int64_t index, std::span<float> f32, std::span<std::uint8_t> ue8m0) const {
    if (kind == Fp8ScaleKind::f32) {
      f32[static_cast<std::size_t>(index)] = divisor;
    } else {
      ue8m0[static_cast<std::size_t>(index)] = code;
    }
  }

  void encode(const float* x, std::int64_t n, std::uint8_t* q) const {
    if (kind == Fp8ScaleKind::f32) {
      const float d = divisor;
      for (std::int64_t i = 0; i < n; ++i) q[i] = detail::e4m3_code(x[i] / d);
    } else {
      const float r = reciprocal;
      for (std::int64_t i = 0; i < n; ++i) q[i] = detail::e4m3_code(x[i] * r);
    }
  }
};

void check_kind(Fp8ScaleKind kind) {
  if (kind != Fp8ScaleKind::f32 && kind != Fp8ScaleKind::ue8m0) {
    throw_invalid("kind", "must be Fp8ScaleKind::f32 or Fp8ScaleKind::ue8m0",
                  std::to_string(static_cast<int>(kind)));
  }
}

void check_scale_buffers(Fp8ScaleKind kind, std::size_t f32_size, std::size_t ue8m0_size,
                         std::int64_t need) {
  check_kind(kind);
  if (kind == Fp8ScaleKind::f32) {
    detail::check_size("scales_f32", f32_size, need);
  } else {
    detail::check_size("scales_ue8m0", ue8m0_size, need);
  }
}

}  // namespace

void quantize_fp8_1x128(std::span<const float> x, std::int64_t rows, std::int64_t k,
                        Fp8ScaleKind kind, std::span<std::uint8_t> q, std::span<float> scales_f32,
                        std::span<std::uint8_t> scales_ue8m0) {
  detail::check_matrix(rows, k, kFp8Block, "k");
  detail::check_size("x", x.size(), rows * k);
  detail::check_size("q", q.size(), rows * k);
  check_scale_buffers(kind, scales_f32.size(), scales_ue8m0.size(), rows * (k / kFp8Block));
  const std::int64_t nb = k / kFp8Block;
  detail::parallel_rows(rows, k, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      for (std::int64_t b = 0; b < nb; ++b) {
        const float* xb = x.data() + r * k + b * kFp8Block;
        const Fp8BlockScale s(kind, segment_finite_amax(xb, kFp8Block, 0.0f));
        s.store(r * nb + b, scales_f32, scales_ue8m0);
        s.encode(xb, kFp8Block, q.data() + r * k + b * kFp8Block);
      }
    }
  });
}

void quantize_fp8_128x128(std::span<const float> w, std::int64_t rows, std::int64_t k,
                          Fp8ScaleKind kind, std::span<std::uint8_t> q, std::span<float> scales_f32,
                          std::span<std::uint8_t> scales_ue8m0) {
  detail::check_matrix(rows, k, kFp8Block, "k");
  detail::check_size("w", w.size(), rows * k);
  detail::check_size("q", q.size(), rows * k);
  const std::int64_t row_tiles = ceil_div(rows, kFp8Block);
  const std::int64_t nb = k / kFp8Block;
  check_scale_buffers(kind, scales_f32.size(), scales_ue8m0.size(), row_tiles * nb);
  detail::parallel_rows(row_tiles, kFp8Block * k, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t r_begin = t * kFp8Block;
      const std::int64_t r_end = std::min(rows, r_begin + kFp8Block);  // the last tile may be short
      for (std::int64_t b = 0; b < nb; ++b) {
        float amax = 0.0f;
        for (std::int64_t r = r_begin; r < r_end; ++r) {
          amax = segment_finite_amax(w.data() + r * k + b * kFp8Block, kFp8Block, amax);
        }
        const Fp8BlockScale s(kind, amax);
        s.store(t * nb + b, scales_f32, scales_ue8m0);
        for (std::int64_t r = r_begin; r < r_end; ++r) {
          s.encode(w.data() + r * k + b * kFp8Block, kFp8Block, q.data() + r * k + b * kFp8Block);
        }
      }
    }
  });
}

void dequantize_fp8(std::span<const std::uint8_t> q, std::int64_t rows, std::int64_t k,
                    int block_rows, Fp8ScaleKind kind, std::span<const float> scales_f32,
                    std::span<const std::uint8_t> scales_ue8m0, std::span<float> out) {
  detail::check_matrix(rows, k, kFp8Block, "k");
  if (block_rows != 1 && block_rows != kFp8Block) {
    throw_invalid("block_rows", "must be 1 (1x128 blocks) or 128 (128x128 blocks)",
                  std::to_string(block_rows));
  }
  detail::check_size("q", q.size(), rows * k);
  detail::check_size("out", out.size(), rows * k);
  const std::int64_t nb = k / kFp8Block;
  check_scale_buffers(kind, scales_f32.size(), scales_ue8m0.size(),
                      ceil_div(rows, block_rows) * nb);
  const float* e4m3 = detail::e4m3_table();
  detail::parallel_rows(rows, k, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t srow = r / block_rows;
      for (std::int64_t b = 0; b < nb; ++b) {
        const auto si = static_cast<std::size_t>(srow * nb + b);
        const float s =
            kind == Fp8ScaleKind::f32 ? scales_f32[si] : detail::ue8m0_value(scales_ue8m0[si]);
        const std::uint8_t* qb = q.data() + r * k + b * kFp8Block;
        float* ob = out.data() + r * k + b * kFp8Block;
        for (int i = 0; i < kFp8Block; ++i) ob[i] = e4m3[qb[i]] * s;
      }
    }
  });
}

}  // namespace megamoe::formats
