// The MegaMoE families beside NVFP4 (megamoe/mega_moe.hpp): FP8, MXFP4, BF16. Same calling
// convention as nvfp4_mega_moe: weights and out for one rank, or lists with one entry per rank.
#include <vector>

#include "common.hpp"
#include "megamoe/mega_moe.hpp"

namespace megamoe::python {
namespace {

// FP8 block scales are f32 or UE8M0 bytes; the dtype of the array says which.
TensorView fp8_scales(nb::handle obj, const char* name) {
  Array a = as_array(field(obj, name), name);
  return dtype_of(a, name) == DType::f32 ? to_view(a, name, DType::f32)
                                         : to_view(a, name, DType::ue8m0);
}

Fp8ExpertWeights fp8_weights(nb::handle w) {
  return Fp8ExpertWeights{field_view(w, "w13", DType::e4m3), fp8_scales(w, "w13_sf"),
                          field_view(w, "w2", DType::e4m3), fp8_scales(w, "w2_sf")};
}

Mxfp4ExpertWeights mxfp4_weights(nb::handle w) {
  return Mxfp4ExpertWeights{
      field_view(w, "w13", DType::e2m1x2), field_view(w, "w13_sf", DType::ue8m0),
      field_view(w, "w2", DType::e2m1x2), field_view(w, "w2_sf", DType::ue8m0)};
}

Bf16ExpertWeights bf16_weights(nb::handle w) {
  return Bf16ExpertWeights{field_view(w, "w13", DType::bf16), field_view(w, "w2", DType::bf16)};
}

template <typename Weights, typename Convert, typename Run>
void run_family(const SymmBuffer& buffer, nb::handle weights, nb::handle out, nb::handle rank,
                nb::handle stream, Convert convert, Run run) {
  const std::size_t n = is_sequence(out) ? nb::len(out) : 1;
  if (n > 1 && !is_sequence(weights)) {
    throw_invalid("weights", "must be a list with one weight set per output");
  }
  const auto outs = per_rank(out, n, "out");
  const auto ws = per_rank(weights, n, "weights");
  const auto ranks = ranks_arg(rank, n, buffer.memory->driven_ranks());
  std::vector<Weights> w;
  std::vector<MoEOutputs> o;
  for (std::size_t i = 0; i < n; ++i) {
    w.push_back(convert(ws[i]));
    o.push_back(
        MoEOutputs{ranks[i], to_view(as_mutable_array(outs[i], "out"), "out", DType::bf16)});
  }
  void* s = stream_arg(stream);
  nb::gil_scoped_release release;
  run(buffer, std::span<const Weights>(w), std::span<const MoEOutputs>(o), s);
}

template <typename Weights, typename Convert, typename Run>
void def_family(nb::module_& m, const char* name, Convert convert, Run run, const char* doc) {
  m.def(
      name,
      [convert, run](const SymmBuffer& buffer, nb::handle weights, nb::handle out, nb::handle rank,
                     nb::handle stream) {
        run_family<Weights>(buffer, weights, out, rank, stream, convert, run);
      },
      nb::arg("buffer"), nb::arg("weights"), nb::arg("out"), nb::kw_only(),
      nb::arg("rank") = nb::none(), nb::arg("stream") = nb::none(), doc);
}

}  // namespace

void register_families(nb::module_& m) {
  def_family<Fp8ExpertWeights>(m, "fp8_mega_moe", fp8_weights, &fp8_mega_moe,
                               "FP8 x FP8 layer: weights {w13, w13_sf, w2, w2_sf} (e4m3 with "
                               "128x128 f32 or ue8m0 scales), out bf16 [T, H]");
  def_family<Mxfp4ExpertWeights>(m, "mxfp4_mega_moe", mxfp4_weights, &mxfp4_mega_moe,
                                 "MXFP4 weights {w13, w13_sf, w2, w2_sf} x MXFP4/FP8/BF16 "
                                 "activations, out bf16 [T, H]");
  def_family<Bf16ExpertWeights>(m, "bf16_mega_moe", bf16_weights, &bf16_mega_moe,
                                "BF16 x BF16 layer: weights {w13, w2}, out bf16 [T, H]");
}

}  // namespace megamoe::python
