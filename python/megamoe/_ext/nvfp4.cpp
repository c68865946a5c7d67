// NVFP4 MegaMoE (megamoe/nvfp4_mega_moe.hpp): weight and scale transforms and the fused layer.
// Weight sets are dicts or objects with the C++ struct's field names.
#include <vector>

#include "common.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"

namespace megamoe::python {
namespace {

Nvfp4CheckpointWeights checkpoint_of(nb::handle w, nb::handle sf_layout) {
  Nvfp4CheckpointWeights c;
  c.w13 = field_view(w, "w13", DType::e2m1x2);
  c.w13_sf = field_view(w, "w13_sf", DType::ue4m3);
  c.w13_global = field_view(w, "w13_global", DType::f32);
  c.w2 = field_view(w, "w2", DType::e2m1x2);
  c.w2_sf = field_view(w, "w2_sf", DType::ue4m3);
  c.w2_global = field_view(w, "w2_global", DType::f32);
  c.fc2_input_scale = field_view(w, "fc2_input_scale", DType::f32);
  if (!sf_layout.is_none()) {
    c.sf_layout = enum_arg<ScaleLayout>(sf_layout, "sf_layout");
  } else if (has_field(w, "sf_layout")) {
    c.sf_layout = enum_arg<ScaleLayout>(field(w, "sf_layout"), "sf_layout");
  }
  return c;
}

Nvfp4KernelWeights kernel_weights_of(nb::handle w, bool writable) {
  auto get = [&](const char* name, DType dtype) {
    return writable ? mutable_field_view(w, name, dtype) : field_view(w, name, dtype);
  };
  Nvfp4KernelWeights k;
  k.w13 = get("w13", DType::u8);
  k.w13_sf = get("w13_sf", DType::u8);
  k.w2 = get("w2", DType::u8);
  k.w2_sf = get("w2_sf", DType::u8);
  k.fc1_alpha = get("fc1_alpha", DType::f32);
  k.fc2_alpha = get("fc2_alpha", DType::f32);
  k.fc2_input_scale = get("fc2_input_scale", DType::f32);
  return k;
}

// Views of one rank's kernel-layout weights, made once from their arrays: megamoe.torch keeps one
// per weight dict, so that a layer call does not hand the seven tensors over by DLPack again
// (~1-2 us a tensor, bench/python_host_launch.py). It holds no reference to the arrays:
// its owner checks that they are alive and unmoved before each use, and every call validates the
// views against the configuration as it validates any.
struct Nvfp4KernelWeightViews {
  Nvfp4KernelWeights views;
};

Nvfp4KernelWeights weights_of(nb::handle w) {
  if (nb::isinstance<Nvfp4KernelWeightViews>(w)) {
    return nb::cast<const Nvfp4KernelWeightViews&>(w).views;
  }
  return kernel_weights_of(w, false);
}

void run_nvfp4(const SymmBuffer& buffer, nb::handle weights, nb::handle out, nb::handle rank,
               nb::handle stream, std::int64_t max_tokens_across_ranks) {
  const std::size_t n = is_sequence(out) ? nb::len(out) : 1;
  const auto outs = per_rank(out, n, "out");
  if (n > 1 && !is_sequence(weights)) {
    throw_invalid("weights", "must be a list with one weight set per output");
  }
  const auto ws = per_rank(weights, n, "weights");
  const auto ranks = ranks_arg(rank, n, buffer.memory->driven_ranks());
  std::vector<Nvfp4KernelWeights> w;
  std::vector<Nvfp4MoEOutputs> o;
  for (std::size_t i = 0; i < n; ++i) {
    w.push_back(weights_of(ws[i]));
    o.push_back(
        Nvfp4MoEOutputs{ranks[i], to_view(as_mutable_array(outs[i], "out"), "out", DType::bf16)});
  }
  void* s = stream_arg(stream);
  nb::gil_scoped_release release;
  nvfp4_mega_moe(buffer, w, o, s, max_tokens_across_ranks);
}

}  // namespace

void register_nvfp4(nb::module_& m) {
  nb::class_<Nvfp4KernelWeightViews>(
      m, "Nvfp4KernelWeightViews",
      "Views of one rank's kernel-layout weights, taken once; they do not keep the arrays alive")
      .def(
          "__init__",
          [](Nvfp4KernelWeightViews* self, nb::handle weights) {
            new (self) Nvfp4KernelWeightViews{kernel_weights_of(weights, false)};
          },
          nb::arg("weights"),
          "weights: {w13, w13_sf, w2, w2_sf, fc1_alpha, fc2_alpha, fc2_input_scale} (device "
          "arrays)");
  m.def(
      "nvfp4_kernel_weight_bytes",
      [](const MoEConfig& config) {
        const Nvfp4KernelWeightBytes b = nvfp4_kernel_weight_bytes(config);
        nb::dict d;
        d["w13"] = b.w13;
        d["w13_sf"] = b.w13_sf;
        d["w2"] = b.w2;
        d["w2_sf"] = b.w2_sf;
        return d;
      },
      nb::arg("config"), "byte sizes of the kernel-layout weights of one rank");
  m.def(
      "transform_weights_for_mega_moe",
      [](const MoEConfig& config, nb::handle checkpoint, nb::handle out, nb::handle sf_layout,
         nb::handle stream) {
        const Nvfp4CheckpointWeights in = checkpoint_of(checkpoint, sf_layout);
        const Nvfp4KernelWeights k = kernel_weights_of(out, true);
        void* s = stream_arg(stream);
        nb::gil_scoped_release release;
        transform_weights_for_mega_moe(config, in, k, s);
      },
      nb::arg("config"), nb::arg("checkpoint"), nb::arg("out"), nb::kw_only(),
      nb::arg("sf_layout") = nb::none(), nb::arg("stream") = nb::none(),
      "checkpoint {w13, w13_sf, w13_global, w2, w2_sf, w2_global, fc2_input_scale} -> out "
      "{w13, w13_sf, w2, w2_sf, fc1_alpha, fc2_alpha, fc2_input_scale} (device arrays)");
  m.def(
      "transform_ue4m3_sf_into_required_layout",
      [](const Array& sf, nb::handle from_layout, const MutableArray& out, nb::handle stream) {
        const TensorView in = to_view(sf, "sf", DType::ue4m3);
        const ScaleLayout from = enum_arg<ScaleLayout>(from_layout, "from_layout");
        const TensorView o = to_view(out, "out", DType::ue4m3);
        void* s = stream_arg(stream);
        nb::gil_scoped_release release;
        transform_ue4m3_sf_into_required_layout(in, from, o, s);
      },
      nb::arg("sf"), nb::arg("from_layout"), nb::arg("out"), nb::kw_only(),
      nb::arg("stream") = nb::none());
  m.def("nvfp4_mega_moe", &run_nvfp4, nb::arg("buffer"), nb::arg("weights"), nb::arg("out"),
        nb::kw_only(), nb::arg("rank") = nb::none(), nb::arg("stream") = nb::none(),
        nb::arg("max_tokens_across_ranks") = 0,
        "Runs the fused layer on the last pre-dispatch: out bf16 [T, H] (or lists, one per "
        "driven rank, with weights a list of kernel weight sets); max_tokens_across_ranks: the "
        "largest token count of any rank in this call where known (0: not known)");
}

}  // namespace megamoe::python
