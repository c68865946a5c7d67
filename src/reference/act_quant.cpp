#include "reference/act_quant.hpp"

#include <span>
#include <vector>

#include "megamoe/formats.hpp"

namespace megamoe::reference::detail {

float quantize_row(Format format, Fp8ScaleKind fp8_scale, const float* in, std::int64_t n,
                   float nvfp4_global, float* out) {
  const auto un = static_cast<std::size_t>(n);
  const std::span<const float> x(in, un);
  const std::span<float> y(out, un);
  thread_local std::vector<std::uint8_t> q, s;
  thread_local std::vector<float> sf;
  switch (format) {
    case Format::bf16:
      for (std::size_t i = 0; i < un; ++i) out[i] = formats::round_to_bf16(in[i]);
      return 1.0f;
    case Format::nvfp4: {
      q.resize(un / 2);
      s.resize(un / formats::kNvfp4Block);
      float global = nvfp4_global;
      if (global > 0.0f) {
        formats::quantize_nvfp4(x, 1, n, global, q, s);
      } else {
        formats::quantize_nvfp4_per_row(x, 1, n, q, s, std::span<float>(&global, 1));
      }
      const float one = 1.0f;
      formats::dequantize_nvfp4(q, s, std::span<const float>(&one, 1), 1, n, y);
      return global;
    }
    case Format::mxfp4:
      q.resize(un / 2);
      s.resize(un / formats::kMxfp4Block);
      formats::quantize_mxfp4(x, 1, n, q, s);
      formats::dequantize_mxfp4(q, s, 1, n, y);
      return 1.0f;
    case Format::fp8:
      q.resize(un);
      s.resize(un / formats::kFp8Block);
      sf.resize(un / formats::kFp8Block);
      formats::quantize_fp8_1x128(x, 1, n, fp8_scale, q, sf, s);
      formats::dequantize_fp8(q, 1, n, 1, fp8_scale, sf, s, y);
      return 1.0f;
  }
  return 1.0f;
}

}  // namespace megamoe::reference::detail
