#pragma once
// A host stand-in for mega_moe_pre_dispatch with NVFP4 activations, for the NVFP4 MegaMoE tests
// and benchmark: builds the bytes of one rank's input region ("x" .. "num_tokens", which the
// planner places first and contiguously) with the CPU formats functions, the same recipe the
// pre-dispatch kernel implements bit for bit (its own tests check that). It lets the layer's tests
// isolate the fused kernel from the pre-dispatch kernel.
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "megamoe/buffer.hpp"
#include "megamoe/formats.hpp"

namespace megamoe::test {

struct InputImage {
  std::size_t offset = 0;  // of region "x" in the rank's buffer
  std::vector<std::uint8_t> bytes;
};

// x: [tokens, H] values (rounded to bf16 here, as the kernel receives bf16); ids / weights:
// [tokens, K]. Ids outside [0, E) are stored as -1 like pre-dispatch does.
inline InputImage nvfp4_input_image(const SymmBufferPlan& plan, std::span<const float> x,
                                    std::span<const std::int64_t> ids,
                                    std::span<const float> weights, std::int64_t tokens) {
  const MoEConfig& c = plan.config;
  const std::int64_t h = c.shape.hidden, k = c.shape.top_k, e = c.shape.num_experts;
  const BufferRegion& rx = plan.region("x");
  const BufferRegion& rsf = plan.region("x_sf");
  const BufferRegion& rg = plan.region("x_global");
  const BufferRegion& ri = plan.region("topk_idx");
  const BufferRegion& rw = plan.region("topk_weights");
  const BufferRegion& rn = plan.region("num_tokens");
  InputImage img;
  img.offset = rx.offset;
  img.bytes.assign(rn.offset + 4 - rx.offset, 0);
  auto at = [&](const BufferRegion& r, std::size_t byte) {
    return img.bytes.data() + (r.offset - rx.offset) + byte;
  };
  std::vector<float> row(static_cast<std::size_t>(h));
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(h / 2)),
      sf(static_cast<std::size_t>(h / 16));
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t j = 0; j < h; ++j) {
      row[static_cast<std::size_t>(j)] =
          formats::round_to_bf16(x[static_cast<std::size_t>(t * h + j)]);
    }
    float g = 0;
    formats::quantize_nvfp4_per_row(row, 1, h, packed, sf, std::span<float>(&g, 1));
    std::memcpy(at(rx, static_cast<std::size_t>(t) * rx.row_pitch), packed.data(), packed.size());
    std::memcpy(at(rsf, static_cast<std::size_t>(t) * rsf.row_pitch), sf.data(), sf.size());
    std::memcpy(at(rg, static_cast<std::size_t>(t) * 4), &g, 4);
  }
  for (std::int64_t t = 0; t < c.max_tokens_per_rank; ++t) {
    for (std::int64_t j = 0; j < k; ++j) {
      std::int32_t id = -1;
      float w = 0.0f;
      if (t < tokens) {
        const std::int64_t v = ids[static_cast<std::size_t>(t * k + j)];
        if (v >= 0 && v < e) {
          id = static_cast<std::int32_t>(v);
          w = weights[static_cast<std::size_t>(t * k + j)];
        }
      }
      std::memcpy(
          at(ri, static_cast<std::size_t>(t) * ri.row_pitch + static_cast<std::size_t>(j) * 4), &id,
          4);
      std::memcpy(
          at(rw, static_cast<std::size_t>(t) * rw.row_pitch + static_cast<std::size_t>(j) * 4), &w,
          4);
    }
  }
  const auto n = static_cast<std::int32_t>(tokens);
  std::memcpy(at(rn, 0), &n, 4);
  return img;
}

}  // namespace megamoe::test
