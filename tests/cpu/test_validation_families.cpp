// Rules of fp8_mega_moe, mxfp4_mega_moe and bf16_mega_moe, and their honest refusal: full
// validation, then Unsupported (no sm90 kernel yet) instead of a silent no-op.
#include <gtest/gtest.h>

#include "core/validate.hpp"
#include "megamoe/mega_moe.hpp"
#include "validation_test_support.hpp"

namespace megamoe {
namespace {

using test::FakeAllocator;
using test::kGpu0;
using validate::buffer_facts;

MoEConfig config(Format w, Format a) {
  MoEConfig c;
  c.shape = {512, 256, 8, 2};
  c.weight_format = w;
  c.act_format = a;
  c.num_ranks = 2;
  c.max_tokens_per_rank = 16;
  return c;
}

// One family's call: buffer, outputs for both ranks, weights from `make`.
template <typename Weights>
struct Call {
  test::Seeded seeded;
  MoEConfig cfg;
  SymmBuffer buffer;
  FakeAllocator alloc;
  std::vector<Weights> weights;
  std::vector<MoEOutputs> outputs;
  template <typename Make>
  Call(MoEConfig c, Make make) : cfg(c), buffer(test::fake_buffer(c)) {
    for (int r = 0; r < c.num_ranks; ++r) {
      weights.push_back(make(alloc, cfg));
      outputs.push_back({r, alloc.tensor(DType::bf16, {seeded.uniform(1, 16), 512})});
    }
  }
};

Fp8ExpertWeights fp8_weights(FakeAllocator& a, const MoEConfig& c) {
  const DType sf = c.fp8_scale == Fp8ScaleKind::f32 ? DType::f32 : DType::ue8m0;
  return {a.tensor(DType::e4m3, {4, 512, 512}), a.tensor(sf, {4, 4, 4}),
          a.tensor(DType::e4m3, {4, 512, 256}), a.tensor(sf, {4, 4, 2})};
}

Mxfp4ExpertWeights mxfp4_weights(FakeAllocator& a, const MoEConfig&) {
  return {a.tensor(DType::e2m1x2, {4, 512, 256}), a.tensor(DType::ue8m0, {4, 512, 16}),
          a.tensor(DType::u8, {4, 512, 128}), a.tensor(DType::u8, {4, 512, 8})};
}

Bf16ExpertWeights bf16_weights(FakeAllocator& a, const MoEConfig&) {
  return {a.tensor(DType::bf16, {4, 512, 512}), a.tensor(DType::bf16, {4, 512, 256})};
}

using Fp8Call = Call<Fp8ExpertWeights>;
using Mxfp4Call = Call<Mxfp4ExpertWeights>;
using Bf16Call = Call<Bf16ExpertWeights>;

void run(const Fp8Call& c) {
  validate::validate_fp8_mega_moe(buffer_facts(c.buffer, kGpu0), c.weights, c.outputs);
}
void run(const Mxfp4Call& c) {
  validate::validate_mxfp4_mega_moe(buffer_facts(c.buffer, kGpu0), c.weights, c.outputs);
}
void run(const Bf16Call& c) {
  validate::validate_bf16_mega_moe(buffer_facts(c.buffer, kGpu0), c.weights, c.outputs);
}

template <typename F>
void expect_unsupported(F&& f, std::string_view function) {
  try {
    f();
    ADD_FAILURE() << function << " returned instead of refusing";
  } catch (const Unsupported& e) {
    EXPECT_NE(
        std::string(e.what()).find(std::string(function) + ": no sm90 kernel for this family yet"),
        std::string::npos)
        << e.what();
  }
}

TEST(ValidationFamilies, ValidCallsValidateThenRefuse) {
  Fp8Call f(config(Format::fp8, Format::fp8), fp8_weights);
  EXPECT_NO_THROW(run(f));
  expect_unsupported([&] { fp8_mega_moe(f.buffer, f.weights, f.outputs, nullptr); },
                     "fp8_mega_moe");
  for (Format acts : {Format::mxfp4, Format::fp8, Format::bf16}) {
    Mxfp4Call m(config(Format::mxfp4, acts), mxfp4_weights);
    EXPECT_NO_THROW(run(m));
    expect_unsupported([&] { mxfp4_mega_moe(m.buffer, m.weights, m.outputs, nullptr); },
                       "mxfp4_mega_moe");
  }
  Bf16Call b(config(Format::bf16, Format::bf16), bf16_weights);
  EXPECT_NO_THROW(run(b));
  expect_unsupported([&] { bf16_mega_moe(b.buffer, b.weights, b.outputs, nullptr); },
                     "bf16_mega_moe");
}

TEST(ValidationFamilies, PendingEntryPointsValidateFirst) {
  Bf16Call b(config(Format::bf16, Format::bf16), bf16_weights);
  b.weights[1].w2.dtype = DType::f16;
  EXPECT_INVALID(bf16_mega_moe(b.buffer, b.weights, b.outputs, nullptr), "weights[1].w2",
                 "dtype must be bf16");
  Fp8Call f(config(Format::fp8, Format::fp8), fp8_weights);
  f.outputs[1].out.device = {DeviceKind::cuda, 1};  // the buffer and the others are on cuda:0
  EXPECT_INVALID(fp8_mega_moe(f.buffer, f.weights, f.outputs, nullptr), "outputs[1].out",
                 "must be on the buffer's GPU cuda:0");
}

TEST(ValidationFamilies, WrongFamilyBuffer) {
  Fp8Call f(config(Format::fp8, Format::fp8), fp8_weights);
  f.buffer = test::fake_buffer(config(Format::bf16, Format::bf16));
  EXPECT_INVALID(run(f), "buffer", "fp8_mega_moe needs a buffer planned for fp8 x fp8");
  Mxfp4Call m(config(Format::mxfp4, Format::mxfp4), mxfp4_weights);
  m.buffer = test::fake_buffer(config(Format::nvfp4, Format::nvfp4));
  EXPECT_INVALID(run(m), "buffer", "mxfp4_mega_moe needs a buffer planned for mxfp4 x");
  Bf16Call b(config(Format::bf16, Format::bf16), bf16_weights);
  b.buffer = test::fake_buffer(config(Format::mxfp4, Format::bf16));
  EXPECT_INVALID(run(b), "buffer", "bf16_mega_moe needs a buffer planned for bf16 x bf16");
}

TEST(ValidationFamilies, WeightsPerOutput) {
  Mxfp4Call m(config(Format::mxfp4, Format::mxfp4), mxfp4_weights);
  m.weights.push_back(m.weights.front());
  EXPECT_INVALID(run(m), "weights", "must have one entry per entry of outputs (2)");
}

TEST(ValidationFamilies, Fp8ScaleDtypeFollowsConfig) {
  MoEConfig c = config(Format::fp8, Format::fp8);
  Fp8Call f(c, fp8_weights);
  f.weights[0].w13_sf.dtype = DType::ue8m0;
  EXPECT_INVALID(run(f), "weights[0].w13_sf", "dtype must be f32");
  c.fp8_scale = Fp8ScaleKind::ue8m0;
  Fp8Call g(c, fp8_weights);
  EXPECT_NO_THROW(run(g));
  g.weights[1].w2_sf.dtype = DType::f32;
  EXPECT_INVALID(run(g), "weights[1].w2_sf", "dtype must be ue8m0 or u8");
}

TEST(ValidationFamilies, Fp8BlockScaleShape) {
  Fp8Call f(config(Format::fp8, Format::fp8), fp8_weights);
  f.weights[1].w2_sf = f.alloc.tensor(DType::f32, {4, 4, 4});
  EXPECT_INVALID(run(f), "weights[1].w2_sf", "dim 2 must equal intermediate / 128 = 2");
}

TEST(ValidationFamilies, Fp8WeightShapeAndDtype) {
  Fp8Call f(config(Format::fp8, Format::fp8), fp8_weights);
  f.weights[0].w13 = f.alloc.tensor(DType::e4m3, {4, 256, 512});
  EXPECT_INVALID(run(f), "weights[0].w13", "dim 1 must equal 2 * intermediate = 512");
  Fp8Call g(config(Format::fp8, Format::fp8), fp8_weights);
  g.weights[0].w2.dtype = DType::u8;
  EXPECT_INVALID(run(g), "weights[0].w2", "dtype must be e4m3");
}

TEST(ValidationFamilies, Mxfp4ScaleShape) {
  Mxfp4Call m(config(Format::mxfp4, Format::fp8), mxfp4_weights);
  m.weights[0].w13_sf = m.alloc.tensor(DType::ue8m0, {4, 512, 32});  // per 16 instead of 32
  EXPECT_INVALID(run(m), "weights[0].w13_sf", "dim 2 must equal hidden / 32 = 16");
  Mxfp4Call n(config(Format::mxfp4, Format::fp8), mxfp4_weights);
  n.weights[1].w2_sf.dtype = DType::ue4m3;
  EXPECT_INVALID(run(n), "weights[1].w2_sf", "dtype must be ue8m0 or u8");
}

TEST(ValidationFamilies, Mxfp4PackedShape) {
  Mxfp4Call m(config(Format::mxfp4, Format::bf16), mxfp4_weights);
  m.weights[1].w2 = m.alloc.tensor(DType::u8, {4, 512, 256});  // unpacked
  EXPECT_INVALID(run(m), "weights[1].w2", "dim 2 must equal intermediate / 2 = 128");
}

TEST(ValidationFamilies, Bf16WeightNdim) {
  Bf16Call b(config(Format::bf16, Format::bf16), bf16_weights);
  b.weights[0].w13 = b.alloc.tensor(DType::bf16, {4 * 512, 512});
  EXPECT_INVALID(run(b), "weights[0].w13", "must have 3 dimensions");
}

TEST(ValidationFamilies, Bf16WeightContiguous) {
  Bf16Call b(config(Format::bf16, Format::bf16), bf16_weights);
  b.weights[1].w13.strides[1] = 1024;
  EXPECT_INVALID(run(b), "weights[1].w13", "must be contiguous");
}

TEST(ValidationFamilies, OutputRows) {
  Bf16Call b(config(Format::bf16, Format::bf16), bf16_weights);
  b.outputs[0].out = b.alloc.tensor(DType::bf16, {17, 512});
  EXPECT_INVALID(run(b), "outputs[0].out", "dim 0 must be in [0, max_tokens_per_rank = 16]");
}

}  // namespace
}  // namespace megamoe
