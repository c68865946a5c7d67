// Pre-dispatch on the GPU against the CPU formats (bytewise): every format, both FP4 kernels
// (1, 2 or 4 warps per row, one CTA per row), random T (1 ... T_max included), H in {2048, 2176,
// 4096, 7168} (2176: a partial last step of the row kernel), top-k in {1, 6, 8}, masked and
// out-of-range ids, the error counter, padding rows, CUDA-graph capture with programmatic
// dependent launch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "megamoe/buffer.hpp"
#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/pre_dispatch_kernel.hpp"

namespace megamoe {
namespace {

using runtime::DeviceBuffer;
using runtime::upload;

constexpr unsigned char kPoison = 0xA5;

struct Case {
  Format format = Format::nvfp4;
  Fp8ScaleKind fp8_scale = Fp8ScaleKind::f32;
  std::int64_t hidden = 2048;
  int top_k = 8;
  int num_ranks = 1;
  std::int64_t t_max = 256;
  std::int64_t num_experts = 64;
};

std::string describe_case(const Case& c) {
  return std::string(format_name(c.format)) +
         (c.format == Format::fp8 ? (c.fp8_scale == Fp8ScaleKind::f32 ? "/f32" : "/ue8m0") : "") +
         " H=" + std::to_string(c.hidden) + " K=" + std::to_string(c.top_k) +
         " R=" + std::to_string(c.num_ranks) + " T_max=" + std::to_string(c.t_max);
}

MoEConfig config_of(const Case& c) {
  MoEConfig m;
  m.shape.hidden = c.hidden;
  m.shape.intermediate = 256;
  m.shape.num_experts = c.num_experts;
  m.shape.top_k = c.top_k;
  m.weight_format = m.act_format = c.format;
  m.fp8_scale = c.fp8_scale;
  m.num_ranks = c.num_ranks;
  m.max_tokens_per_rank = c.t_max;
  return m;
}

// One rank's host inputs.
struct HostInputs {
  std::int64_t tokens = 0;
  std::int64_t row_stride = 0;   // elements
  std::vector<std::uint16_t> x;  // bf16 [T, row_stride]
  std::vector<std::int64_t> ids;
  std::vector<float> weights;
  std::vector<float> expert_scales;  // empty: none
  bool idx64 = false;
};

std::uint16_t bf16(float v) {
  return formats::bf16_from_float(v);
}

// Rows of hand-made values: exact ties of every recipe's rounding, zeros, tiny values, NaN/Inf.
void plant_special_rows(HostInputs& in, std::int64_t h, Format format, std::mt19937_64& rng) {
  auto row = [&](std::int64_t r) { return in.x.data() + r * in.row_stride; };
  std::int64_t r = 0;
  // A row whose blocks get scales that make element / scale land exactly on decision ties.
  if (r < in.tokens) {
    std::uint16_t* x = row(r++);
    std::fill(x, x + h, bf16(0.0f));
    const float ties_fp4[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    const float ties_fp8[] = {1.0625f, 1.1875f, 0.0029296875f, 17.0f, 272.0f, 0.013671875f};
    const std::int64_t block = format == Format::fp8 ? 128 : (format == Format::mxfp4 ? 32 : 16);
    const float unit = 0x1p-10f;
    for (std::int64_t b = 0; b + 1 < h / block; ++b) {
      std::uint16_t* xb = x + b * block;
      // Block amax: 6 (fp4) or 448 (fp8) times the unit, so the scale is exactly the unit (the
      // NVFP4 global scale comes out as 2^-10 through the last block's amax).
      xb[0] = bf16((format == Format::fp8 ? 448.0f : 6.0f) * unit);
      int i = 1;
      const float* ties = format == Format::fp8 ? ties_fp8 : ties_fp4;
      const int n = format == Format::fp8 ? 6 : 7;
      for (int k = 0; k < n && i + 1 < block; ++k) {
        xb[i++] = bf16(ties[k] * unit);
        xb[i++] = bf16(-ties[k] * unit);
      }
    }
    // NVFP4: g = amax / 2688 = 2^-10 needs amax = 2.625.
    x[h - 1] = bf16(format == Format::nvfp4 ? 2.625f : 1.0f);
  }
  if (r < in.tokens) {  // all zeros
    std::fill(row(r), row(r) + h, bf16(0.0f));
    ++r;
  }
  if (r < in.tokens) {  // tiny values
    std::uint16_t* x = row(r++);
    std::uniform_real_distribution<float> tiny(-1e-36f, 1e-36f);
    for (std::int64_t i = 0; i < h; ++i) x[i] = bf16(tiny(rng));
  }
  if (r < in.tokens) {  // non-finite inputs stay inside their block / token
    std::uint16_t* x = row(r++);
    x[3] = 0x7FC0;      // NaN
    x[h / 2] = 0xFF80;  // -Inf
    x[h - 5] = 0x7F80;  // +Inf
  }
  if (r < in.tokens) {
    // Small but normal NVFP4 global scale (~2^-101): blocks whose scale * g falls below 2^-100
    // take the fp64 bounds of the row kernel, the others the fp32 ones.
    std::uint16_t* x = row(r++);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::int64_t i = 0; i < h; ++i) {
      x[i] = bf16(normal(rng) * std::ldexp(1.0f, -90 - static_cast<int>((i / 16) % 24)));
    }
  }
  if (r < in.tokens) {
    // Near the bf16 maximum with infinities in the same blocks: MXFP4 scales of 2^126, whose
    // last e2m1 bound is clamped to +Inf.
    std::uint16_t* x = row(r++);
    for (std::int64_t i = 0; i < h; ++i) {
      x[i] = bf16((i % 3 == 0 ? 3.0e38f : -1.5e38f) / static_cast<float>(1 + (i / 32) % 4));
    }
    x[1] = 0x7F80;
    x[h - 31] = 0xFF80;
  }
}

HostInputs make_inputs(const Case& c, std::int64_t tokens, std::mt19937_64& rng, bool idx64,
                       bool scales, std::uint32_t* expected_errors) {
  HostInputs in;
  in.tokens = tokens;
  in.idx64 = idx64;
  in.row_stride = c.hidden + (rng() % 2 == 0 ? 0 : 64);  // sometimes padded rows
  in.x.resize(static_cast<std::size_t>(tokens * in.row_stride), bf16(0.0f));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-8.0f, 8.0f);
  for (std::int64_t t = 0; t < tokens; ++t) {
    // Per-token magnitudes over many octaves, a few outliers per row.
    const float s = std::exp2(log_scale(rng));
    for (std::int64_t i = 0; i < c.hidden; ++i) {
      float v = normal(rng) * s;
      if (rng() % 997 == 0) v *= 64.0f;
      in.x[static_cast<std::size_t>(t * in.row_stride + i)] = bf16(v);
    }
  }
  plant_special_rows(in, c.hidden, c.format, rng);

  const auto k = static_cast<std::size_t>(c.top_k);
  in.ids.resize(static_cast<std::size_t>(tokens) * k);
  in.weights.resize(in.ids.size());
  std::uniform_real_distribution<float> weight(0.0f, 1.0f);
  std::uint32_t errors = 0;
  for (std::size_t i = 0; i < in.ids.size(); ++i) {
    const auto roll = rng() % 100;
    std::int64_t id = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c.num_experts));
    if (roll < 10) {
      id = -1;  // masked
    } else if (roll < 16) {
      // Out of range: just past E, far past, negative, and (i64) past 2^31.
      const std::int64_t bad[] = {c.num_experts,
                                  c.num_experts + 1000,
                                  -2,
                                  -1000000,
                                  idx64 ? (std::int64_t{1} << 33) + 3 : 1 << 30,
                                  idx64 ? std::numeric_limits<std::int64_t>::min() : -(1 << 30)};
      id = bad[rng() % 6];
    }
    in.ids[i] = id;
    in.weights[i] = weight(rng);
  }
  // Ids drawn with replacement repeat within a row now and then; the first rows repeat their
  // first id on purpose. Errors: every id outside [-1, E), and every repeat of an in-range id
  // after its first occurrence in the row.
  const std::size_t rows = static_cast<std::size_t>(tokens);
  for (std::size_t r = 0; r < rows && r < 3 && k >= 2; ++r) in.ids[r * k + 1] = in.ids[r * k];
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < k; ++j) {
      const std::int64_t id = in.ids[r * k + j];
      if (id == -1) continue;
      if (id < 0 || id >= c.num_experts) {
        ++errors;
        continue;
      }
      for (std::size_t i = 0; i < j; ++i) {
        if (in.ids[r * k + i] == id) {
          ++errors;
          break;
        }
      }
    }
  }
  if (scales) {
    std::uniform_real_distribution<float> scale(0.5f, 2.0f);
    in.expert_scales.resize(static_cast<std::size_t>(c.num_experts));
    for (float& v : in.expert_scales) v = scale(rng);
  }
  *expected_errors = errors;
  return in;
}

// The CPU oracle: each token row quantized with the formats module, routes masked.
struct Expected {
  std::vector<std::uint8_t> x;    // [T, row_bytes]
  std::vector<std::uint8_t> sf;   // [T, sf_row_bytes]
  std::vector<float> global;      // [T] (nvfp4)
  std::vector<std::int32_t> ids;  // [T_max, K]
  std::vector<float> weights;     // [T_max, K]
  std::size_t row_bytes = 0, sf_row_bytes = 0;
};

Expected oracle(const Case& c, const HostInputs& in) {
  Expected e;
  const std::int64_t h = c.hidden, t = in.tokens;
  std::vector<float> xf(static_cast<std::size_t>(t * h));
  for (std::int64_t r = 0; r < t; ++r) {
    for (std::int64_t i = 0; i < h; ++i) {
      xf[static_cast<std::size_t>(r * h + i)] =
          formats::bf16_to_float(in.x[static_cast<std::size_t>(r * in.row_stride + i)]);
    }
  }
  const auto n = static_cast<std::size_t>(t);
  if (c.format == Format::nvfp4) {
    e.row_bytes = static_cast<std::size_t>(h / 2);
    e.sf_row_bytes = static_cast<std::size_t>(h / 16);
    e.x.resize(n * e.row_bytes);
    e.sf.resize(n * e.sf_row_bytes);
    e.global.resize(n);
    formats::quantize_nvfp4_per_row(xf, t, h, e.x, e.sf, e.global);
  } else if (c.format == Format::mxfp4) {
    e.row_bytes = static_cast<std::size_t>(h / 2);
    e.sf_row_bytes = static_cast<std::size_t>(h / 32);
    e.x.resize(n * e.row_bytes);
    e.sf.resize(n * e.sf_row_bytes);
    formats::quantize_mxfp4(xf, t, h, e.x, e.sf);
  } else {
    e.row_bytes = static_cast<std::size_t>(h);
    const auto blocks = static_cast<std::size_t>(h / 128);
    e.x.resize(n * e.row_bytes);
    if (c.fp8_scale == Fp8ScaleKind::f32) {
      std::vector<float> s(n * blocks);
      formats::quantize_fp8_1x128(xf, t, h, c.fp8_scale, e.x, s, {});
      e.sf_row_bytes = blocks * 4;
      e.sf.resize(n * e.sf_row_bytes);
      std::memcpy(e.sf.data(), s.data(), e.sf.size());
    } else {
      e.sf_row_bytes = blocks;
      e.sf.resize(n * blocks);
      formats::quantize_fp8_1x128(xf, t, h, c.fp8_scale, e.x, {}, e.sf);
    }
  }
  const auto k = static_cast<std::size_t>(c.top_k);
  e.ids.assign(static_cast<std::size_t>(c.t_max) * k, -1);
  e.weights.assign(e.ids.size(), 0.0f);
  for (std::size_t i = 0; i < in.ids.size(); ++i) {
    const std::int64_t id = in.ids[i];
    if (id < 0 || id >= c.num_experts) continue;
    bool repeat = false;  // an earlier route of the row to the same expert keeps it
    for (std::size_t j = i - i % k; j < i; ++j) repeat = repeat || in.ids[j] == id;
    if (repeat) continue;
    e.ids[i] = static_cast<std::int32_t>(id);
    e.weights[i] = in.expert_scales.empty()
                       ? in.weights[i]
                       : in.weights[i] * in.expert_scales[static_cast<std::size_t>(id)];
  }
  return e;
}

// Device copies of one rank's inputs.
struct DeviceInputs {
  DeviceBuffer x, ids, weights, scales;
  PreDispatchInputs view;
};

DeviceInputs to_device(const Case& c, const HostInputs& in, int rank) {
  DeviceInputs d;
  const Device gpu{DeviceKind::cuda, 0};
  d.x = upload(in.x);
  if (in.idx64) {
    d.ids = upload(in.ids);
  } else {
    std::vector<std::int32_t> ids32(in.ids.size());
    for (std::size_t i = 0; i < ids32.size(); ++i) ids32[i] = static_cast<std::int32_t>(in.ids[i]);
    d.ids = upload(ids32);
  }
  d.weights = upload(in.weights);
  d.view.rank = rank;
  d.view.x = TensorView::contiguous(d.x.as<void>(), DType::bf16, {in.tokens, c.hidden}, gpu);
  d.view.x.strides[0] = in.row_stride;
  d.view.topk_idx = TensorView::contiguous(d.ids.as<void>(), in.idx64 ? DType::i64 : DType::i32,
                                           {in.tokens, c.top_k}, gpu);
  d.view.topk_weights =
      TensorView::contiguous(d.weights.as<void>(), DType::f32, {in.tokens, c.top_k}, gpu);
  if (!in.expert_scales.empty()) {
    d.scales = upload(in.expert_scales);
    d.view.expert_scales =
        TensorView::contiguous(d.scales.as<void>(), DType::f32, {c.num_experts}, gpu);
  }
  return d;
}

std::vector<std::uint8_t> download_rank(const SymmBuffer& b, int rank) {
  std::vector<std::uint8_t> host(b.plan.total_bytes);
  MEGAMOE_CU(cuda::driver().cuMemcpyDtoH(
      host.data(), reinterpret_cast<CUdeviceptr>(b.memory->base(rank)), host.size()));
  return host;
}

void poison(const SymmBuffer& b, int rank) {
  const cuda::Driver& d = cuda::driver();
  const auto base = reinterpret_cast<CUdeviceptr>(b.memory->base(rank));
  MEGAMOE_CU(d.cuMemsetD8Async(base, kPoison, b.plan.total_bytes, nullptr));
  MEGAMOE_CU(d.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(b.view(rank, "error_count")), 0, 1,
                                nullptr));
  MEGAMOE_CU(d.cuCtxSynchronize());
}

// Byte-compares `rows` rows of `row_bytes` at `region` (pitched) with `want` (dense).
::testing::AssertionResult rows_equal(const std::vector<std::uint8_t>& got, const BufferRegion& r,
                                      std::size_t rows, std::size_t row_bytes,
                                      const std::vector<std::uint8_t>& want) {
  const std::size_t pitch = r.row_pitch != 0 ? r.row_pitch : row_bytes;
  for (std::size_t row = 0; row < rows; ++row) {
    const std::uint8_t* g = got.data() + r.offset + row * pitch;
    const std::uint8_t* w = want.data() + row * row_bytes;
    for (std::size_t i = 0; i < row_bytes; ++i) {
      if (g[i] != w[i]) {
        return ::testing::AssertionFailure()
               << "region '" << r.name << "' row " << row << " byte " << i << ": got 0x" << std::hex
               << int{g[i]} << ", want 0x" << int{w[i]} << std::dec;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

template <typename T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

void check_rank(const Case& c, const SymmBuffer& b, int rank, const HostInputs& in,
                std::uint32_t expected_errors) {
  const Expected e = oracle(c, in);
  const std::vector<std::uint8_t> got = download_rank(b, rank);
  const SymmBufferPlan& p = b.plan;
  const auto t = static_cast<std::size_t>(in.tokens);
  EXPECT_TRUE(rows_equal(got, p.region("x"), t, e.row_bytes, e.x));
  EXPECT_TRUE(rows_equal(got, p.region("x_sf"), t, e.sf_row_bytes, e.sf));
  if (c.format == Format::nvfp4) {
    EXPECT_TRUE(rows_equal(got, p.region("x_global"), t, 4, bytes_of(e.global)));
  }
  const std::size_t route_bytes = static_cast<std::size_t>(c.top_k) * 4;
  EXPECT_TRUE(rows_equal(got, p.region("topk_idx"), static_cast<std::size_t>(c.t_max), route_bytes,
                         bytes_of(e.ids)));
  EXPECT_TRUE(rows_equal(got, p.region("topk_weights"), static_cast<std::size_t>(c.t_max),
                         route_bytes, bytes_of(e.weights)));
  std::int32_t num_tokens = 0;
  std::memcpy(&num_tokens, got.data() + p.region("num_tokens").offset, 4);
  EXPECT_EQ(num_tokens, in.tokens);
  // Rows past T of "x" are not the kernel's to write: still poison.
  const BufferRegion& rx = p.region("x");
  const std::size_t pitch = rx.row_pitch != 0 ? rx.row_pitch : e.row_bytes;
  for (std::size_t row = t; row < static_cast<std::size_t>(c.t_max); row += 7) {
    ASSERT_EQ(got[rx.offset + row * pitch], kPoison) << "x row " << row << " was written";
  }
  EXPECT_EQ(read_and_clear_dispatch_errors(b, rank, nullptr), expected_errors);
  EXPECT_EQ(read_and_clear_dispatch_errors(b, rank, nullptr), 0u) << "not cleared";
}

class PreDispatchGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::driver_available(&why)) GTEST_SKIP() << "no CUDA GPU: " << why;
  }
};

// One case: R ranks, each with its own T, launched by one call; returns nothing, checks all.
void run_case(const Case& c, std::mt19937_64& rng, std::int64_t first_tokens, bool hw_e4m3,
              bool cta_per_row = false, int warps_per_row = 0) {
  SCOPED_TRACE(describe_case(c) + (hw_e4m3 ? " hw-e4m3" : " soft-e4m3") +
               (cta_per_row ? " cta-per-row" : "") +
               (warps_per_row != 0 ? " warps-per-row=" + std::to_string(warps_per_row) : ""));
  const SymmBuffer b = get_symm_buffer_for_mega_moe(config_of(c));
  std::vector<HostInputs> host;
  std::vector<std::uint32_t> errors;
  std::vector<DeviceInputs> dev;
  for (int r = 0; r < c.num_ranks; ++r) {
    const std::int64_t t =
        r == 0 ? first_tokens
               : static_cast<std::int64_t>(1 + rng() % static_cast<std::uint64_t>(c.t_max));
    std::uint32_t e = 0;
    host.push_back(make_inputs(c, t, rng, rng() % 2 == 0, rng() % 2 == 0, &e));
    errors.push_back(e);
    poison(b, r);
  }
  for (int r = 0; r < c.num_ranks; ++r) {
    dev.push_back(to_device(c, host[static_cast<std::size_t>(r)], r));
  }
  std::vector<PreDispatchInputs> views;
  for (const DeviceInputs& d : dev) views.push_back(d.view);
  runtime::Stream stream;  // a real stream: launched with programmatic dependent launch
  runtime::launch_pre_dispatch(b, views, stream.get(), hw_e4m3, cta_per_row, warps_per_row);
  stream.synchronize();
  for (int r = 0; r < c.num_ranks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) +
                 " T=" + std::to_string(host[static_cast<std::size_t>(r)].tokens));
    check_rank(c, b, r, host[static_cast<std::size_t>(r)], errors[static_cast<std::size_t>(r)]);
  }
}

TEST_F(PreDispatchGpu, BytewiseEqualToCpuAcrossTheMatrix) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  struct Fmt {
    Format f;
    Fp8ScaleKind s;
  };
  const Fmt formats_under_test[] = {{Format::nvfp4, Fp8ScaleKind::f32},
                                    {Format::mxfp4, Fp8ScaleKind::f32},
                                    {Format::fp8, Fp8ScaleKind::f32},
                                    {Format::fp8, Fp8ScaleKind::ue8m0}};
  int index = 0;
  for (const Fmt& fmt : formats_under_test) {
    for (const std::int64_t h : {2048, 2176, 4096, 7168}) {
      for (const int k : {1, 6, 8}) {
        Case c;
        c.format = fmt.f;
        c.fp8_scale = fmt.s;
        c.hidden = h;
        c.top_k = k;
        c.num_ranks = (index % 3 == 2) ? 2 : 1;
        c.t_max = 200 + static_cast<std::int64_t>(rng() % 120);
        // T = T_max, T = 1 and random T in turn.
        const std::int64_t t =
            index % 3 == 0 ? c.t_max
            : index % 3 == 1
                ? 1
                : 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c.t_max));
        ++index;
        run_case(c, rng, t, /*hw_e4m3=*/true);
        // FP8 both ways: the integer recipe and the hardware conversion. FP4: the default layout
        // above, the CTA kernel and the row kernel with 1, 2 or 4 warps per row in turn.
        if (fmt.f == Format::fp8) run_case(c, rng, t, /*hw_e4m3=*/false);
        if (fmt.f != Format::fp8) {
          run_case(c, rng, t, /*hw_e4m3=*/true, /*cta_per_row=*/true);
          run_case(c, rng, t, /*hw_e4m3=*/true, /*cta_per_row=*/false, 1 << (index % 3));
        }
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Captured in a CUDA graph (two launches back to back, programmatic dependent launch between
// them): the replay writes what an eager call writes.
TEST_F(PreDispatchGpu, GraphCaptureWithPdlMatchesCpu) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Case c;
  c.format = Format::nvfp4;
  c.hidden = 4096;
  c.top_k = 8;
  c.t_max = 300;
  const std::int64_t t = 1 + static_cast<std::int64_t>(rng() % 300);
  std::uint32_t errors = 0;
  const HostInputs in = make_inputs(c, t, rng, false, true, &errors);
  const SymmBuffer b = get_symm_buffer_for_mega_moe(config_of(c));
  DeviceInputs d = to_device(c, in, 0);
  const cuda::Driver& drv = cuda::driver();
  runtime::Stream stream;
  const PreDispatchInputs views[] = {d.view};
  // Load the kernel before capture, as serving code does (megamoe precompile + a warm call).
  mega_moe_pre_dispatch(b, views, stream.get());
  stream.synchronize();
  poison(b, 0);

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  MEGAMOE_CU(drv.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  mega_moe_pre_dispatch(b, views, stream.get());
  mega_moe_pre_dispatch(b, views, stream.get());
  MEGAMOE_CU(drv.cuStreamEndCapture(stream.get(), &graph));
  MEGAMOE_CU(drv.cuGraphInstantiate(&exec, graph, 0));
  MEGAMOE_CU(drv.cuGraphLaunch(exec, stream.get()));
  stream.synchronize();
  // Two launches count the bad ids twice.
  check_rank(c, b, 0, in, 2 * errors);
  MEGAMOE_CU(drv.cuGraphExecDestroy(exec));
  MEGAMOE_CU(drv.cuGraphDestroy(graph));
}

// The public entry point on the legacy default stream (a plain launch there).
TEST_F(PreDispatchGpu, LegacyDefaultStream) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Case c;
  c.format = Format::mxfp4;
  c.hidden = 2048;
  c.top_k = 6;
  c.t_max = 100;
  const std::int64_t t = 1 + static_cast<std::int64_t>(rng() % 100);
  std::uint32_t errors = 0;
  const HostInputs in = make_inputs(c, t, rng, true, false, &errors);
  const SymmBuffer b = get_symm_buffer_for_mega_moe(config_of(c));
  DeviceInputs d = to_device(c, in, 0);
  poison(b, 0);
  const PreDispatchInputs views[] = {d.view};
  mega_moe_pre_dispatch(b, views, nullptr);
  MEGAMOE_CU(cuda::driver().cuCtxSynchronize());
  check_rank(c, b, 0, in, errors);
}

TEST_F(PreDispatchGpu, BadInputIsRejectedBeforeAnyLaunch) {
  Case c;
  const SymmBuffer b = get_symm_buffer_for_mega_moe(config_of(c));
  std::uint32_t errors = 0;
  std::mt19937_64 rng(1);
  const HostInputs in = make_inputs(c, 4, rng, false, false, &errors);
  DeviceInputs d = to_device(c, in, 0);
  PreDispatchInputs bad = d.view;
  bad.x.shape[1] = c.hidden - 128;  // wrong H
  const PreDispatchInputs views[] = {bad};
  EXPECT_THROW(mega_moe_pre_dispatch(b, views, nullptr), InvalidArgument);
}

}  // namespace
}  // namespace megamoe
