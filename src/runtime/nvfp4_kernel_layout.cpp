#include "runtime/nvfp4_kernel_layout.hpp"

#include <cmath>

#include "megamoe/formats.hpp"

namespace megamoe::runtime::nvfp4_layout {

std::uint8_t reencode_ue4m3(std::uint8_t c) {
  const std::uint8_t code = c & 0x7F;  // UE4M3: the sign bit carries no meaning
  if (code == 0x7F) return 0xFF;
  const float s = formats::ue4m3_to_float(code);
  if (s == 0.0f) return 0;
  int ex = 0;
  const float m = std::frexp(s * 128.0f, &ex);  // s * 2^7 = m * 2^ex, m in [0.5, 1)
  const int f16_exponent = ex - 1 + 15;         // normal for every UE4M3 scale: 13 .. 30
  const int mant3 = static_cast<int>((m * 2.0f - 1.0f) * 8.0f);
  return static_cast<std::uint8_t>((f16_exponent << 3) | mant3);
}

std::int64_t source_row(Matrix m, std::int64_t intermediate, std::int64_t tile, int rg, int r) {
  if (m == Matrix::w2) return tile * 64 + rg * 16 + r;
  const std::int64_t col = tile * 32 + (rg & 1) * 16 + r;
  return rg < 2 ? col : intermediate + col;
}

std::int64_t word_offset(std::int64_t k, std::int64_t tile, int rg, std::int64_t block, int lane,
                         int step) {
  const std::int64_t blocks = k / 128;
  return ((tile * 4 + rg) * blocks + block) * 1024 + (step / 4) * 512 + lane * 16 + (step % 4) * 4;
}

std::int64_t sf_offset(std::int64_t k, std::int64_t tile, int rg, std::int64_t block, int g,
                       int step) {
  const std::int64_t blocks = k / 128;
  return ((tile * 4 + rg) * blocks + block) * 128 + g * 16 + step * 2;
}

void encode_expert(Matrix m, std::int64_t intermediate, std::int64_t rows, std::int64_t k,
                   std::span<const std::uint8_t> packed, std::span<const std::uint8_t> sf,
                   std::span<std::uint8_t> q, std::span<std::uint8_t> q_sf) {
  const std::int64_t tiles = rows / 64;  // 64 rows per tile (w13: 32 gate + 32 up)
  const std::int64_t blocks = k / 128;
  auto nibble = [&](std::int64_t row, std::int64_t col) -> std::uint32_t {
    const std::uint8_t b = packed[static_cast<std::size_t>(row * (k / 2) + col / 2)];
    return (col & 1) ? (b >> 4) : (b & 0xF);
  };
  for (std::int64_t tile = 0; tile < tiles; ++tile) {
    for (int rg = 0; rg < 4; ++rg) {
      std::int64_t src[16];
      for (int r = 0; r < 16; ++r) src[r] = source_row(m, intermediate, tile, rg, r);
      for (std::int64_t blk = 0; blk < blocks; ++blk) {
        for (int step = 0; step < 8; ++step) {
          const std::int64_t k0 = blk * 128 + step * 16;
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane / 4, t = lane % 4;
            std::uint32_t word = 0;
            for (int j = 0; j < 4; ++j) {
              const std::int64_t row = src[g + ((j & 1) ? 8 : 0)];
              for (int hi = 0; hi < 2; ++hi) {
                const std::uint32_t n = nibble(row, k0 + (j >= 2 ? 8 : 0) + 2 * t + hi);
                word |= (n & 7u) << (kMagnitudeBit[j] + 16 * hi);
                word |= (n >> 3) << (kSignBit[j] + 16 * hi);
              }
            }
            const std::int64_t off = word_offset(k, tile, rg, blk, lane, step);
            for (int i = 0; i < 4; ++i) {
              q[static_cast<std::size_t>(off + i)] = static_cast<std::uint8_t>(word >> (8 * i));
            }
          }
          for (int g = 0; g < 8; ++g) {
            const std::int64_t off = sf_offset(k, tile, rg, blk, g, step);
            for (int h = 0; h < 2; ++h) {
              const std::int64_t row = src[g + 8 * h];
              q_sf[static_cast<std::size_t>(off + h)] =
                  reencode_ue4m3(sf[static_cast<std::size_t>(row * (k / 16) + k0 / 16)]);
            }
          }
        }
      }
    }
  }
}

}  // namespace megamoe::runtime::nvfp4_layout
