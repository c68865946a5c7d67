// Side-LoRA MegaMoE, the training family (megamoe/side_lora.hpp). Structs cross as dicts or
// objects with the C++ field names; every argument may be a list with one entry per rank.
#include <vector>

#include "common.hpp"
#include "megamoe/side_lora.hpp"

namespace megamoe::python {
namespace {

// bf16 base: w13/w2 bf16; mxfp4 base: e2m1x2 + ue8m0 scales. The scales say which.
SideLoraBaseWeights base_of(nb::handle b) {
  const bool mxfp4 = has_field(b, "w13_sf");
  const DType w = mxfp4 ? DType::e2m1x2 : DType::bf16;
  return SideLoraBaseWeights{field_view(b, "w13", w), optional_view(b, "w13_sf", DType::ue8m0),
                             field_view(b, "w2", w), optional_view(b, "w2_sf", DType::ue8m0)};
}

SideLoraAdapters adapters_of(nb::handle a) {
  SideLoraAdapters s;
  s.a1 = field_view(a, "a1", DType::bf16);
  s.a3 = optional_view(a, "a3", DType::bf16);
  s.b1 = field_view(a, "b1", DType::bf16);
  s.b3 = field_view(a, "b3", DType::bf16);
  s.a2 = field_view(a, "a2", DType::bf16);
  s.b2 = field_view(a, "b2", DType::bf16);
  if (has_field(a, "scale")) s.scale = nb::cast<float>(field(a, "scale"));
  if (has_field(a, "tied_a13")) s.tied_a13 = nb::cast<bool>(field(a, "tied_a13"));
  return s;
}

SideLoraSaved saved_of(nb::handle s) {
  return SideLoraSaved{mutable_field_view(s, "x_a", DType::f32),
                       mutable_field_view(s, "z", DType::f32),
                       mutable_field_view(s, "pool", DType::u8)};
}

SideLoraGrads grads_of(nb::handle g) {
  SideLoraGrads r;
  r.dx = mutable_field_view(g, "dx", DType::bf16);
  r.d_topk_weights = mutable_field_view(g, "d_topk_weights", DType::f32);
  r.da1 = mutable_field_view(g, "da1", DType::f32);
  r.da3 = optional_mutable_view(g, "da3", DType::f32);
  r.db1 = mutable_field_view(g, "db1", DType::f32);
  r.db3 = mutable_field_view(g, "db3", DType::f32);
  r.da2 = mutable_field_view(g, "da2", DType::f32);
  r.db2 = mutable_field_view(g, "db2", DType::f32);
  return r;
}

std::size_t count_of(nb::handle first) {
  return is_sequence(first) ? nb::len(first) : 1;
}

void forward(const SymmBuffer& buffer, nb::handle base, nb::handle adapters, nb::handle out_arg,
             nb::handle saved, nb::handle rank, nb::handle stream) {
  const std::size_t n = count_of(out_arg);
  const auto outs = per_rank(out_arg, n, "out");
  const auto bases = per_rank(base, n, "base");
  const auto ads = per_rank(adapters, n, "adapters");
  const auto sv = per_rank(saved, n, "saved");
  const auto ranks = ranks_arg(rank, n, buffer.memory->driven_ranks());
  std::vector<SideLoraForwardArgs> args(n);
  for (std::size_t i = 0; i < n; ++i) {
    args[i].rank = ranks[i];
    args[i].base = base_of(bases[i]);
    args[i].adapters = adapters_of(ads[i]);
    args[i].out = to_view(as_mutable_array(outs[i], "out"), "out", DType::bf16);
    args[i].saved = saved_of(sv[i]);
  }
  void* s = stream_arg(stream);
  nb::gil_scoped_release release;
  side_lora_mega_moe_forward(buffer, args, s);
}

void backward(const SymmBuffer& buffer, nb::handle x, nb::handle topk_idx, nb::handle topk_weights,
              nb::handle d_out, nb::handle base, nb::handle adapters, nb::handle saved,
              nb::handle scratch, nb::handle grads, nb::handle rank, nb::handle stream) {
  const std::size_t n = count_of(x);
  const auto xs = per_rank(x, n, "x");
  const auto idx = per_rank(topk_idx, n, "topk_idx");
  const auto w = per_rank(topk_weights, n, "topk_weights");
  const auto dout = per_rank(d_out, n, "d_out");
  const auto bases = per_rank(base, n, "base");
  const auto ads = per_rank(adapters, n, "adapters");
  const auto sv = per_rank(saved, n, "saved");
  const auto sc = per_rank(scratch, n, "scratch");
  const auto gs = per_rank(grads, n, "grads");
  const auto ranks = ranks_arg(rank, n, buffer.memory->driven_ranks());
  std::vector<SideLoraBackwardArgs> args(n);
  for (std::size_t i = 0; i < n; ++i) {
    args[i].rank = ranks[i];
    args[i].x = to_view(as_array(xs[i], "x"), "x", DType::bf16);
    args[i].topk_idx =
        to_view_of(as_array(idx[i], "topk_idx"), "topk_idx", {DType::i32, DType::i64});
    args[i].topk_weights = to_view(as_array(w[i], "topk_weights"), "topk_weights", DType::f32);
    args[i].d_out = to_view(as_array(dout[i], "d_out"), "d_out", DType::bf16);
    args[i].base = base_of(bases[i]);
    args[i].adapters = adapters_of(ads[i]);
    args[i].saved = saved_of(sv[i]);
    args[i].scratch = to_view(as_mutable_array(sc[i], "scratch"), "scratch", DType::u8);
    args[i].grads = grads_of(gs[i]);
  }
  void* s = stream_arg(stream);
  nb::gil_scoped_release release;
  side_lora_mega_moe_backward(buffer, args, s);
}

}  // namespace

void register_side_lora(nb::module_& m) {
  m.def("side_lora_saved_pool_bytes", &side_lora_saved_pool_bytes, nb::arg("plan"));
  m.def("side_lora_scratch_bytes", &side_lora_scratch_bytes, nb::arg("plan"));
  m.def("side_lora_mega_moe_forward", &forward, nb::arg("buffer"), nb::arg("base"),
        nb::arg("adapters"), nb::arg("out"), nb::arg("saved"), nb::kw_only(),
        nb::arg("rank") = nb::none(), nb::arg("stream") = nb::none(),
        "base {w13, w2[, w13_sf, w2_sf]}, adapters {a1, a3?, b1, b3, a2, b2, scale, tied_a13}, "
        "out bf16 [T, H], saved {x_a, z, pool} (written)");
  m.def("side_lora_mega_moe_backward", &backward, nb::arg("buffer"), nb::arg("x"),
        nb::arg("topk_idx"), nb::arg("topk_weights"), nb::arg("d_out"), nb::arg("base"),
        nb::arg("adapters"), nb::arg("saved"), nb::arg("scratch"), nb::arg("grads"), nb::kw_only(),
        nb::arg("rank") = nb::none(), nb::arg("stream") = nb::none(),
        "grads {dx, d_topk_weights, da1, da3?, db1, db3, da2, db2} (written)");
}

}  // namespace megamoe::python
