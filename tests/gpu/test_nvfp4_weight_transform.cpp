// The GPU weight transform (checkpoint -> kernel layout) and the GPU scale-layout transform
// against their CPU twins, byte for byte: runtime::nvfp4_layout::encode_expert and
// formats::unswizzle_128x4. Fresh random bytes every run (every nibble, every scale byte with
// its sign bit, the NaN codes), outputs poisoned first so that an unwritten byte shows, both scale
// layouts, several expert counts and shapes, on a stream of its own with nothing else waiting.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/nvfp4_kernel_layout.hpp"
#include "runtime/nvfp4_kernel_weight_storage.hpp"

namespace megamoe {
namespace {

using runtime::DeviceBuffer;
using runtime::upload;

constexpr unsigned char kPoison = 0xA5;
const Device kGpu{DeviceKind::cuda, 0};

class Nvfp4WeightTransform : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::driver_available(&why)) GTEST_SKIP() << "no CUDA GPU: " << why;
  }
};

std::vector<std::uint8_t> random_bytes(std::size_t n, std::mt19937_64& rng) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

std::vector<float> random_floats(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> d(0.001f, 4.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

template <typename T>
std::vector<T> download(const DeviceBuffer& b) {
  std::vector<T> v(b.size() / sizeof(T));
  b.copy_to_host(std::as_writable_bytes(std::span<T>(v)));
  return v;
}

// The first differing byte, for a readable failure.
std::string first_difference(const std::vector<std::uint8_t>& got,
                             const std::vector<std::uint8_t>& want) {
  if (got.size() != want.size()) return "sizes differ";
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return "byte " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " +
             std::to_string(want[i]);
    }
  }
  return "";
}

// One matrix of every expert in the checkpoint layout, with its row-major scales (the CPU
// reference input) and the scales in the layout handed to the GPU.
struct Matrix {
  std::int64_t rows, k;
  std::vector<std::uint8_t> packed, scales_row_major, scales_given;
};

Matrix random_matrix(std::int64_t experts, std::int64_t rows, std::int64_t k, bool swizzled,
                     std::mt19937_64& rng) {
  Matrix m{rows,
           k,
           random_bytes(static_cast<std::size_t>(experts * rows * k / 2), rng),
           random_bytes(static_cast<std::size_t>(experts * rows * k / 16), rng),
           {}};
  if (!swizzled) {
    m.scales_given = m.scales_row_major;
    return m;
  }
  const std::int64_t cols = k / 16, per = formats::swizzled_128x4_size(rows, cols);
  m.scales_given.assign(static_cast<std::size_t>(experts * per), 0);
  for (std::int64_t e = 0; e < experts; ++e) {
    formats::swizzle_128x4(
        std::span(m.scales_row_major)
            .subspan(static_cast<std::size_t>(e * rows * cols),
                     static_cast<std::size_t>(rows * cols)),
        rows, cols,
        std::span(m.scales_given)
            .subspan(static_cast<std::size_t>(e * per), static_cast<std::size_t>(per)));
  }
  return m;
}

// The CPU transform of every expert: {q, q_sf}.
std::pair<std::vector<std::uint8_t>, std::vector<std::uint8_t>> cpu_encode(
    runtime::nvfp4_layout::Matrix role, std::int64_t intermediate, std::int64_t experts,
    const Matrix& m) {
  const auto qn = static_cast<std::size_t>(m.rows * m.k / 2);
  const auto sn = static_cast<std::size_t>(m.rows * m.k / 16);
  std::vector<std::uint8_t> q(qn * static_cast<std::size_t>(experts));
  std::vector<std::uint8_t> sf(sn * static_cast<std::size_t>(experts));
  for (std::int64_t e = 0; e < experts; ++e) {
    const auto ue = static_cast<std::size_t>(e);
    runtime::nvfp4_layout::encode_expert(
        role, intermediate, m.rows, m.k, std::span(m.packed).subspan(ue * qn, qn),
        std::span(m.scales_row_major).subspan(ue * sn, sn), std::span(q).subspan(ue * qn, qn),
        std::span(sf).subspan(ue * sn, sn));
  }
  return {std::move(q), std::move(sf)};
}

struct Shape {
  std::int64_t hidden, intermediate, experts;  // experts = experts per rank
  int ranks;
  bool swizzled;
};

TEST_F(Nvfp4WeightTransform, BytewiseEqualToCpuLayout) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Shape shapes[] = {
      {256, 128, 1, 1, false},   // one tile of W2, two of W13, a single 128-k block of W2
      {256, 128, 3, 1, true},    // several experts, swizzled scales
      {1024, 384, 4, 2, false},  // EP2's local half, I not a power of two
      {1024, 384, 4, 2, true},
      {4096, 256, 2, 4, true},  // dsv4-flash's H: 32 blocks of 128 k per W13 row
  };
  runtime::Stream stream;
  for (const Shape& s : shapes) {
    SCOPED_TRACE("H " + std::to_string(s.hidden) + " I " + std::to_string(s.intermediate) +
                 " experts per rank " + std::to_string(s.experts) +
                 (s.swizzled ? " swizzled" : " row-major"));
    MoEConfig c;
    c.shape.hidden = s.hidden;
    c.shape.intermediate = s.intermediate;
    c.shape.num_experts = s.experts * s.ranks;
    c.shape.top_k = 1;
    c.num_ranks = s.ranks;
    c.max_tokens_per_rank = 64;
    c.weight_format = c.act_format = Format::nvfp4;
    const std::int64_t h = s.hidden, i = s.intermediate, el = s.experts;

    const Matrix w13 = random_matrix(el, 2 * i, h, s.swizzled, rng);
    const Matrix w2 = random_matrix(el, h, i, s.swizzled, rng);
    const std::vector<float> g13 = random_floats(el, rng), g2 = random_floats(el, rng),
                             fc2s = random_floats(el, rng);
    const runtime::Nvfp4CheckpointStorage ck{
        upload(w13.packed), upload(w13.scales_given), upload(g13),
        upload(w2.packed),  upload(w2.scales_given),  upload(g2),
        upload(fc2s)};
    const Nvfp4CheckpointWeights in =
        ck.view(c, s.swizzled ? ScaleLayout::swizzled_128x4 : ScaleLayout::row_major);

    const Nvfp4KernelWeightBytes bytes = nvfp4_kernel_weight_bytes(c);
    DeviceBuffer q13(bytes.w13), q13sf(bytes.w13_sf), q2(bytes.w2), q2sf(bytes.w2_sf);
    DeviceBuffer a1(static_cast<std::size_t>(el) * 4), a2(static_cast<std::size_t>(el) * 4),
        a3(static_cast<std::size_t>(el) * 4);
    for (DeviceBuffer* b : {&q13, &q13sf, &q2, &q2sf, &a1, &a2, &a3}) b->fill_bytes(kPoison);
    const auto blob = [](const DeviceBuffer& b) {
      return TensorView::contiguous(b.as<void>(), DType::u8, {static_cast<std::int64_t>(b.size())},
                                    kGpu);
    };
    const auto f32s = [&](const DeviceBuffer& b) {
      return TensorView::contiguous(b.as<void>(), DType::f32, {el}, kGpu);
    };
    Nvfp4KernelWeights out;
    out.w13 = blob(q13);
    out.w13_sf = blob(q13sf);
    out.w2 = blob(q2);
    out.w2_sf = blob(q2sf);
    out.fc1_alpha = f32s(a1);
    out.fc2_alpha = f32s(a2);
    out.fc2_input_scale = f32s(a3);

    transform_weights_for_mega_moe(c, in, out, stream.get());
    stream.synchronize();

    using runtime::nvfp4_layout::Matrix;
    const auto [want13, want13sf] = cpu_encode(Matrix::w13, i, el, w13);
    const auto [want2, want2sf] = cpu_encode(Matrix::w2, i, el, w2);
    EXPECT_EQ(first_difference(download<std::uint8_t>(q13), want13), "") << "w13";
    EXPECT_EQ(first_difference(download<std::uint8_t>(q13sf), want13sf), "") << "w13_sf";
    EXPECT_EQ(first_difference(download<std::uint8_t>(q2), want2), "") << "w2";
    EXPECT_EQ(first_difference(download<std::uint8_t>(q2sf), want2sf), "") << "w2_sf";
    EXPECT_EQ(download<float>(a1), g13);
    EXPECT_EQ(download<float>(a2), g2);
    EXPECT_EQ(download<float>(a3), fc2s);
  }
}

TEST_F(Nvfp4WeightTransform, ScaleLayoutTransformMatchesCpu) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  struct ScaleShape {
    std::int64_t mats, rows, cols;
  };
  // Partial tiles in both directions (200 rows, 7 columns), one matrix without an expert axis.
  const ScaleShape shapes[] = {{1, 128, 4}, {3, 200, 7}, {2, 256, 256}, {1, 5, 1}};
  runtime::Stream stream;
  for (const ScaleShape& s : shapes) {
    for (const bool swizzled : {false, true}) {
      SCOPED_TRACE(std::to_string(s.mats) + " x [" + std::to_string(s.rows) + ", " +
                   std::to_string(s.cols) + "]" + (swizzled ? " swizzled" : " row-major"));
      const std::int64_t per =
          swizzled ? formats::swizzled_128x4_size(s.rows, s.cols) : s.rows * s.cols;
      const std::vector<std::uint8_t> given =
          random_bytes(static_cast<std::size_t>(s.mats * per), rng);
      std::vector<std::uint8_t> want(static_cast<std::size_t>(s.mats * s.rows * s.cols));
      for (std::int64_t m = 0; m < s.mats; ++m) {
        const auto dst = std::span(want).subspan(static_cast<std::size_t>(m * s.rows * s.cols),
                                                 static_cast<std::size_t>(s.rows * s.cols));
        const auto src = std::span(given).subspan(static_cast<std::size_t>(m * per),
                                                  static_cast<std::size_t>(per));
        if (swizzled) {
          formats::unswizzle_128x4(src, s.rows, s.cols, dst);
        } else {
          std::copy(src.begin(), src.end(), dst.begin());
        }
      }
      DeviceBuffer din = upload(std::span(given));
      DeviceBuffer dout(want.size());
      dout.fill_bytes(kPoison);
      const TensorView in = TensorView::contiguous(din.as<void>(), DType::u8,
                                                   {static_cast<std::int64_t>(given.size())}, kGpu);
      const TensorView out =
          s.mats == 1
              ? TensorView::contiguous(dout.as<void>(), DType::u8, {s.rows, s.cols}, kGpu)
              : TensorView::contiguous(dout.as<void>(), DType::u8, {s.mats, s.rows, s.cols}, kGpu);
      transform_ue4m3_sf_into_required_layout(
          in, swizzled ? ScaleLayout::swizzled_128x4 : ScaleLayout::row_major, out, stream.get());
      stream.synchronize();
      EXPECT_EQ(first_difference(download<std::uint8_t>(dout), want), "");
    }
  }
}

}  // namespace
}  // namespace megamoe
