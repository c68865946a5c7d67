// The CPU oracle (megamoe/reference.hpp) over NumPy: stacked rank-major inputs in, dicts of
// arrays out. Quantized weights and LoRA adapters are classes whose fields read and write as
// shaped NumPy arrays (copies: the oracle owns its memory).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>

#include "common.hpp"
#include "megamoe/reference.hpp"

namespace megamoe::python {
namespace {

namespace ref = megamoe::reference;

// ---- shaped vector fields -------------------------------------------------------------------
template <typename T>
nb::object shaped(const std::vector<T>& v, std::vector<std::size_t> shape) {
  if (v.empty()) return nb::none();
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  if (n != v.size()) shape = {v.size()};  // inconsistent dims: show the data flat
  return to_numpy(std::vector<T>(v), std::move(shape));
}

std::size_t product(const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

// Copies `a` into `v` after checking its element count against `shape`. None clears.
template <typename T>
void assign(std::vector<T>& v, nb::handle value, const char* name,
            const std::vector<std::size_t>& shape) {
  if (value.is_none()) {
    v.clear();
    return;
  }
  Array a = as_array(value, name);
  if (a.size() != product(shape)) {
    std::string want;
    for (std::size_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
    throw_invalid(name, "must have shape [" + want + "]", std::to_string(a.size()) + " elements");
  }
  if constexpr (std::is_same_v<T, float>) {
    v = read_floats(a, name);
  } else if constexpr (std::is_same_v<T, std::uint8_t>) {
    v = read_bytes(a, name);
  } else {
    std::vector<std::int64_t> ints = read_ints(a, name);
    v.assign(ints.begin(), ints.end());
  }
}

std::size_t sz(std::int64_t v) {
  return static_cast<std::size_t>(v);
}

std::vector<std::size_t> packed_shape(const ref::QuantizedMatrix& m) {
  const std::int64_t cols = m.format == Format::fp8 ? m.cols : m.cols / 2;
  return {sz(m.experts), sz(m.rows), sz(cols)};
}

std::vector<std::size_t> scales_shape(const ref::QuantizedMatrix& m) {
  switch (m.format) {
    case Format::nvfp4:
      return {sz(m.experts), sz(m.rows), sz(m.cols / 16)};
    case Format::mxfp4:
      return {sz(m.experts), sz(m.rows), sz(m.cols / 32)};
    case Format::fp8:
      return {sz(m.experts), sz((m.rows + 127) / 128), sz(m.cols / 128)};
    default:
      return {0};
  }
}

// Adapters with the dimensions they were made for, so fields read back shaped.
struct PyLora {
  ref::LoraWeights w;
  std::int64_t hidden = 0, rank = 0, experts = 0, inter = 0;

  static PyLora zeros(const MoEConfig& c, float scale, bool tied) {
    PyLora p;
    p.hidden = c.shape.hidden;
    p.rank = c.lora_rank;
    p.experts = c.shape.num_experts;
    p.inter = c.shape.intermediate;
    p.w.scale = scale;
    p.w.tied = tied;
    p.w.a1.assign(sz(p.hidden * p.rank), 0.0f);
    if (!tied) p.w.a3.assign(sz(p.hidden * p.rank), 0.0f);
    p.w.b1.assign(sz(p.experts * p.rank * p.inter), 0.0f);
    p.w.b3.assign(sz(p.experts * p.rank * p.inter), 0.0f);
    p.w.a2.assign(sz(p.experts * p.inter * p.rank), 0.0f);
    p.w.b2.assign(sz(p.rank * p.hidden), 0.0f);
    return p;
  }
  std::vector<std::size_t> hr() const { return {sz(hidden), sz(rank)}; }
  std::vector<std::size_t> eri() const { return {sz(experts), sz(rank), sz(inter)}; }
  std::vector<std::size_t> eir() const { return {sz(experts), sz(inter), sz(rank)}; }
  std::vector<std::size_t> rh() const { return {sz(rank), sz(hidden)}; }
};

// ---- inputs -------------------------------------------------------------------------------
ref::MoEInputs make_inputs(const MoEConfig& c, const Array& x, const Array& topk_idx,
                           const Array& topk_weights, const std::optional<Array>& rank_tokens) {
  const auto xs = expect_host(x, "x", {-1, c.shape.hidden});
  expect_host(topk_idx, "topk_idx", {xs[0], c.shape.top_k});
  expect_host(topk_weights, "topk_weights", {xs[0], c.shape.top_k});
  ref::MoEInputs in;
  in.x = read_floats(x, "x");
  in.topk_idx = read_ints(topk_idx, "topk_idx");
  in.topk_weights = read_floats(topk_weights, "topk_weights");
  if (rank_tokens) {
    expect_host(*rank_tokens, "rank_tokens", {c.num_ranks});
    in.rank_tokens = read_ints(*rank_tokens, "rank_tokens");
  }
  return in;
}

std::int64_t tokens_of(const ref::MoEInputs& in, const MoEConfig& c) {
  return c.shape.hidden > 0 ? static_cast<std::int64_t>(in.x.size()) / c.shape.hidden : 0;
}

ref::Precision precision_arg(nb::handle h) {
  return enum_arg<ref::Precision>(h, "precision");
}

nb::dict outputs_dict(const ref::MoEOutputs& o, std::int64_t n, std::int64_t h) {
  nb::dict d;
  d["out"] = to_numpy(std::vector<double>(o.out), dims({n, h}));
  d["out_bf16"] = shaped(o.out_bf16, dims({n, h}));
  d["invalid_routes"] = o.invalid_routes;
  return d;
}

nb::dict moe_forward(const MoEConfig& c, const Array& x, const Array& topk_idx,
                     const Array& topk_weights, const ref::QuantizedWeights& weights,
                     const std::optional<Array>& rank_tokens, nb::handle precision,
                     const std::optional<Array>& fc2_input_scale) {
  ref::MoEInputs in = make_inputs(c, x, topk_idx, topk_weights, rank_tokens);
  ref::ForwardOptions options;
  options.precision = precision_arg(precision);
  if (fc2_input_scale) {
    expect_host(*fc2_input_scale, "fc2_input_scale", {c.shape.num_experts});
    options.fc2_input_scale = read_floats(*fc2_input_scale, "fc2_input_scale");
  }
  ref::MoEOutputs o;
  {
    nb::gil_scoped_release release;
    o = ref::moe_forward(c, in, weights, options);
  }
  return outputs_dict(o, tokens_of(in, c), c.shape.hidden);
}

nb::object calibrate(const MoEConfig& c, const Array& x, const Array& topk_idx,
                     const Array& topk_weights, const ref::QuantizedWeights& weights,
                     const std::optional<Array>& rank_tokens) {
  ref::MoEInputs in = make_inputs(c, x, topk_idx, topk_weights, rank_tokens);
  std::vector<float> s = ref::calibrate_fc2_input_scales(c, in, weights);
  const auto n = static_cast<std::int64_t>(s.size());
  return to_numpy(std::move(s), dims({n}));
}

nb::dict lora_forward(const MoEConfig& c, const Array& x, const Array& topk_idx,
                      const Array& topk_weights, const ref::QuantizedWeights& weights,
                      const PyLora& lora, const std::optional<Array>& rank_tokens,
                      nb::handle precision) {
  ref::MoEInputs in = make_inputs(c, x, topk_idx, topk_weights, rank_tokens);
  const ref::Precision p = precision_arg(precision);
  ref::MoEOutputs o;
  {
    nb::gil_scoped_release release;
    o = ref::side_lora_forward(c, in, weights, lora.w, p);
  }
  return outputs_dict(o, tokens_of(in, c), c.shape.hidden);
}

nb::dict lora_backward(const MoEConfig& c, const Array& x, const Array& topk_idx,
                       const Array& topk_weights, const ref::QuantizedWeights& weights,
                       const PyLora& lora, const Array& dout,
                       const std::optional<Array>& rank_tokens, nb::handle precision) {
  ref::MoEInputs in = make_inputs(c, x, topk_idx, topk_weights, rank_tokens);
  const std::int64_t n = tokens_of(in, c);
  expect_host(dout, "dout", {n, c.shape.hidden});
  const std::vector<float> d = read_floats(dout, "dout");
  const ref::Precision p = precision_arg(precision);
  ref::LoraGradients g;
  {
    nb::gil_scoped_release release;
    g = ref::side_lora_backward(c, in, weights, lora.w, d, p);
  }
  nb::dict out;
  out["dx"] = shaped(g.dx, dims({n, c.shape.hidden}));
  out["dtopk_weights"] = shaped(g.dtopk_weights, dims({n, c.shape.top_k}));
  out["da1"] = shaped(g.da1, lora.hr());
  out["da3"] = shaped(g.da3, lora.hr());
  out["db1"] = shaped(g.db1, lora.eri());
  out["db3"] = shaped(g.db3, lora.eri());
  out["da2"] = shaped(g.da2, lora.eir());
  out["db2"] = shaped(g.db2, lora.rh());
  out["invalid_routes"] = g.invalid_routes;
  return out;
}

ref::RoutingOptions routing_options(nb::handle skew, double zipf_exponent, double masked_fraction) {
  ref::RoutingOptions r;
  r.skew = enum_arg<ref::RoutingSkew>(skew, "skew");
  r.zipf_exponent = zipf_exponent;
  r.masked_fraction = masked_fraction;
  return r;
}

nb::dict inputs_dict(const ref::MoEInputs& in, const MoEConfig& c) {
  const std::int64_t n = tokens_of(in, c);
  nb::dict d;
  d["x"] = to_numpy(std::vector<float>(in.x), dims({n, c.shape.hidden}));
  d["topk_idx"] = to_numpy(std::vector<std::int64_t>(in.topk_idx), dims({n, c.shape.top_k}));
  d["topk_weights"] = to_numpy(std::vector<float>(in.topk_weights), dims({n, c.shape.top_k}));
  std::vector<std::int64_t> ranks = in.rank_tokens;
  if (ranks.empty() && c.num_ranks > 0) ranks.assign(sz(c.num_ranks), n / c.num_ranks);
  const auto r = static_cast<std::int64_t>(ranks.size());
  d["rank_tokens"] = to_numpy(std::move(ranks), dims({r}));
  return d;
}

void bind_quantized_matrix(nb::module_& m) {
  using QM = ref::QuantizedMatrix;
  nb::class_<QM>(m, "QuantizedMatrix",
                 "E stacked matrices [rows, cols] in one format, plain layout (see reference.hpp)")
      .def(nb::init<>())
      .def_rw("format", &QM::format)
      .def_rw("fp8_scale", &QM::fp8_scale)
      .def_rw("experts", &QM::experts)
      .def_rw("rows", &QM::rows)
      .def_rw("cols", &QM::cols)
      .def_prop_rw(
          "packed", [](const QM& q) { return shaped(q.packed, packed_shape(q)); },
          [](QM& q, nb::handle v) { assign(q.packed, v, "packed", packed_shape(q)); })
      .def_prop_rw(
          "scales", [](const QM& q) { return shaped(q.scales, scales_shape(q)); },
          [](QM& q, nb::handle v) { assign(q.scales, v, "scales", scales_shape(q)); })
      .def_prop_rw(
          "scales_f32", [](const QM& q) { return shaped(q.scales_f32, scales_shape(q)); },
          [](QM& q, nb::handle v) { assign(q.scales_f32, v, "scales_f32", scales_shape(q)); })
      .def_prop_rw(
          "global_scales", [](const QM& q) { return shaped(q.global_scales, {sz(q.experts)}); },
          [](QM& q, nb::handle v) { assign(q.global_scales, v, "global_scales", {sz(q.experts)}); })
      .def_prop_rw(
          "bf16",
          [](const QM& q) {
            return shaped(q.bf16, {sz(q.experts), sz(q.rows), sz(q.cols)});
          },
          [](QM& q, nb::handle v) {
            assign(q.bf16, v, "bf16", {sz(q.experts), sz(q.rows), sz(q.cols)});
          })
      .def("__repr__", [](const QM& q) {
        return "QuantizedMatrix(" + std::string(format_name(q.format)) +
               ", experts=" + std::to_string(q.experts) + ", rows=" + std::to_string(q.rows) +
               ", cols=" + std::to_string(q.cols) + ")";
      });
  nb::class_<ref::QuantizedWeights>(m, "QuantizedWeights")
      .def(nb::init<>())
      .def_rw("w13", &ref::QuantizedWeights::w13)
      .def_rw("w2", &ref::QuantizedWeights::w2);
}

void bind_lora(nb::module_& m) {
  nb::class_<PyLora>(m, "LoraWeights", "Side-LoRA adapters (bf16 values held as float32)")
      .def(
          "__init__",
          [](PyLora* p, const MoEConfig& c, float scale, bool tied) {
            new (p) PyLora(PyLora::zeros(c, scale, tied));
          },
          nb::arg("config"), nb::arg("scale") = 1.0f, nb::arg("tied") = false)
      .def_prop_rw(
          "scale", [](const PyLora& p) { return p.w.scale; },
          [](PyLora& p, float v) { p.w.scale = v; })
      .def_prop_ro("tied", [](const PyLora& p) { return p.w.tied; })
      .def_prop_rw(
          "a1", [](const PyLora& p) { return shaped(p.w.a1, p.hr()); },
          [](PyLora& p, nb::handle v) { assign(p.w.a1, v, "a1", p.hr()); })
      .def_prop_rw(
          "a3", [](const PyLora& p) { return shaped(p.w.a3, p.hr()); },
          [](PyLora& p, nb::handle v) {
            if (p.w.tied && !v.is_none()) throw_invalid("a3", "must be None when tied");
            assign(p.w.a3, v, "a3", p.hr());
          })
      .def_prop_rw(
          "b1", [](const PyLora& p) { return shaped(p.w.b1, p.eri()); },
          [](PyLora& p, nb::handle v) { assign(p.w.b1, v, "b1", p.eri()); })
      .def_prop_rw(
          "b3", [](const PyLora& p) { return shaped(p.w.b3, p.eri()); },
          [](PyLora& p, nb::handle v) { assign(p.w.b3, v, "b3", p.eri()); })
      .def_prop_rw(
          "a2", [](const PyLora& p) { return shaped(p.w.a2, p.eir()); },
          [](PyLora& p, nb::handle v) { assign(p.w.a2, v, "a2", p.eir()); })
      .def_prop_rw(
          "b2", [](const PyLora& p) { return shaped(p.w.b2, p.rh()); },
          [](PyLora& p, nb::handle v) { assign(p.w.b2, v, "b2", p.rh()); });
}

}  // namespace

void register_reference(nb::module_& root) {
  nb::module_ m = root.def_submodule("reference", "The CPU oracle (NumPy in, NumPy out).");
  nb::enum_<ref::Precision>(m, "Precision")
      .value("kernel", ref::Precision::kernel)
      .value("fp64", ref::Precision::fp64)
      .value("exact", ref::Precision::exact);
  nb::enum_<ref::RoutingSkew>(m, "RoutingSkew")
      .value("uniform", ref::RoutingSkew::uniform)
      .value("zipf", ref::RoutingSkew::zipf)
      .value("zipf_by_id", ref::RoutingSkew::zipf_by_id);
  nb::enum_<ref::WeightInit>(m, "WeightInit")
      .value("gaussian", ref::WeightInit::gaussian)
      .value("random_codes", ref::WeightInit::random_codes);
  bind_quantized_matrix(m);
  bind_lora(m);

  m.def("moe_forward", &moe_forward, nb::arg("config"), nb::arg("x"), nb::arg("topk_idx"),
        nb::arg("topk_weights"), nb::arg("weights"), nb::kw_only(),
        nb::arg("rank_tokens") = nb::none(), nb::arg("precision") = "kernel",
        nb::arg("fc2_input_scale") = nb::none(),
        "-> {'out': float64 [N, H], 'out_bf16': uint16 [N, H] or None, 'invalid_routes': int}");
  m.def("calibrate_fc2_input_scales", &calibrate, nb::arg("config"), nb::arg("x"),
        nb::arg("topk_idx"), nb::arg("topk_weights"), nb::arg("weights"), nb::kw_only(),
        nb::arg("rank_tokens") = nb::none());
  m.def("side_lora_forward", &lora_forward, nb::arg("config"), nb::arg("x"), nb::arg("topk_idx"),
        nb::arg("topk_weights"), nb::arg("weights"), nb::arg("lora"), nb::kw_only(),
        nb::arg("rank_tokens") = nb::none(), nb::arg("precision") = "kernel");
  m.def("side_lora_backward", &lora_backward, nb::arg("config"), nb::arg("x"), nb::arg("topk_idx"),
        nb::arg("topk_weights"), nb::arg("weights"), nb::arg("lora"), nb::arg("dout"),
        nb::kw_only(), nb::arg("rank_tokens") = nb::none(), nb::arg("precision") = "kernel");

  m.def(
      "random_inputs",
      [](const MoEConfig& c, std::int64_t tokens_per_rank, std::uint64_t seed, nb::handle skew,
         double zipf_exponent, double masked_fraction) {
        return inputs_dict(
            ref::random_inputs(c, tokens_per_rank,
                               routing_options(skew, zipf_exponent, masked_fraction), seed),
            c);
      },
      nb::arg("config"), nb::arg("tokens_per_rank"), nb::arg("seed"), nb::kw_only(),
      nb::arg("skew") = "uniform", nb::arg("zipf_exponent") = 1.2, nb::arg("masked_fraction") = 0.0,
      "-> {'x', 'topk_idx', 'topk_weights', 'rank_tokens'} for num_ranks * tokens_per_rank tokens");
  m.def(
      "random_routing",
      [](const MoEConfig& c, std::int64_t num_tokens, std::uint64_t seed, nb::handle skew,
         double zipf_exponent, double masked_fraction) {
        ref::MoEInputs in;
        ref::random_routing(c, num_tokens, routing_options(skew, zipf_exponent, masked_fraction),
                            seed, in);
        return nb::make_tuple(
            to_numpy(std::move(in.topk_idx), dims({num_tokens, c.shape.top_k})),
            to_numpy(std::move(in.topk_weights), dims({num_tokens, c.shape.top_k})));
      },
      nb::arg("config"), nb::arg("num_tokens"), nb::arg("seed"), nb::kw_only(),
      nb::arg("skew") = "uniform", nb::arg("zipf_exponent") = 1.2, nb::arg("masked_fraction") = 0.0,
      "-> (topk_idx int64 [N, K], topk_weights float32 [N, K])");
  m.def(
      "random_bf16",
      [](std::int64_t rows, std::int64_t cols, float stddev, std::uint64_t seed) {
        return to_numpy(ref::random_bf16(rows, cols, stddev, seed), dims({rows, cols}));
      },
      nb::arg("rows"), nb::arg("cols"), nb::arg("stddev"), nb::arg("seed"));
  m.def(
      "quantize_matrix",
      [](nb::handle format, const Array& w, nb::handle fp8_scale) {
        const auto s = expect_host(w, "w", {-1, -1, -1});
        std::vector<float> values = read_floats(w, "w");
        return ref::quantize_matrix(enum_arg<Format>(format, "format"),
                                    enum_arg<Fp8ScaleKind>(fp8_scale, "fp8_scale"), s[0], s[1],
                                    s[2], values);
      },
      nb::arg("format"), nb::arg("w"), nb::arg("fp8_scale") = "f32",
      "w float [E, rows, cols] -> QuantizedMatrix by the recipe of `format`");
  m.def(
      "random_weights",
      [](const MoEConfig& c, std::uint64_t seed, nb::handle init) {
        return ref::random_weights(c, seed, enum_arg<ref::WeightInit>(init, "init"));
      },
      nb::arg("config"), nb::arg("seed"), nb::arg("init") = "gaussian");
  m.def(
      "random_lora",
      [](const MoEConfig& c, float scale, bool tied, std::uint64_t seed) {
        PyLora p = PyLora::zeros(c, scale, tied);
        p.w = ref::random_lora(c, scale, tied, seed);
        return p;
      },
      nb::arg("config"), nb::arg("scale"), nb::arg("tied"), nb::arg("seed"));
  m.def(
      "dequantize_expert",
      [](const ref::QuantizedMatrix& q, std::int64_t expert) {
        if (expert < 0 || expert >= q.experts) {
          throw_invalid("expert", "must be in [0, experts)", std::to_string(expert));
        }
        return to_numpy(ref::dequantize_expert(q, expert), dims({q.rows, q.cols}));
      },
      nb::arg("matrix"), nb::arg("expert"));
}

}  // namespace megamoe::python
