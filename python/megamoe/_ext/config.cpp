// Enums, MoEConfig and the model presets. Enum arguments also accept their names as strings.
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include "common.hpp"
#include "megamoe/config.hpp"
#include "megamoe/presets.hpp"

namespace megamoe::python {
namespace {

nb::dict preset_dict(const Preset& p) {
  nb::dict d;
  d["name"] = std::string(p.name);
  d["hidden"] = p.shape.hidden;
  d["intermediate"] = p.shape.intermediate;
  d["num_experts"] = p.shape.num_experts;
  d["top_k"] = p.shape.top_k;
  d["formats"] = std::string(p.formats);
  d["origin"] = std::string(p.origin);
  return d;
}

// Keyword arguments of MoEConfig(...), all optional: enums accept names.
void init_config(MoEConfig* c, std::int64_t hidden, std::int64_t intermediate,
                 std::int64_t num_experts, int top_k, nb::handle weight_format,
                 nb::handle act_format, nb::handle fp8_scale, nb::handle activation, float clamp,
                 float oai_alpha, float oai_limit, int num_ranks, std::int64_t max_tokens_per_rank,
                 bool fp8_combine, bool side_lora, int lora_rank) {
  MoEConfig config;
  config.shape = MoEShape{hidden, intermediate, num_experts, top_k};
  config.weight_format = enum_arg<Format>(weight_format, "weight_format");
  config.act_format = enum_arg<Format>(act_format, "act_format");
  config.fp8_scale = enum_arg<Fp8ScaleKind>(fp8_scale, "fp8_scale");
  config.activation.kind = enum_arg<ActivationKind>(activation, "activation");
  config.activation.clamp = clamp;
  config.activation.oai_alpha = oai_alpha;
  config.activation.oai_limit = oai_limit;
  config.num_ranks = num_ranks;
  config.max_tokens_per_rank = max_tokens_per_rank;
  config.fp8_combine = fp8_combine;
  config.side_lora = side_lora;
  config.lora_rank = lora_rank;
  new (c) MoEConfig(config);
}

template <typename E>
void enum_property(nb::class_<MoEConfig>& cls, const char* name, E MoEConfig::*member) {
  cls.def_prop_rw(
      name, [member](const MoEConfig& c) { return c.*member; },
      [member, name](MoEConfig& c, nb::handle v) { c.*member = enum_arg<E>(v, name); });
}

}  // namespace

void register_config(nb::module_& m) {
  nb::enum_<DType>(m, "DType")
      .value("bf16", DType::bf16)
      .value("f16", DType::f16)
      .value("f32", DType::f32)
      .value("f64", DType::f64)
      .value("i32", DType::i32)
      .value("i64", DType::i64)
      .value("u8", DType::u8)
      .value("e4m3", DType::e4m3)
      .value("e2m1x2", DType::e2m1x2)
      .value("ue4m3", DType::ue4m3)
      .value("ue8m0", DType::ue8m0);
  nb::enum_<Format>(m, "Format")
      .value("bf16", Format::bf16)
      .value("fp8", Format::fp8)
      .value("mxfp4", Format::mxfp4)
      .value("nvfp4", Format::nvfp4);
  nb::enum_<Fp8ScaleKind>(m, "Fp8ScaleKind")
      .value("f32", Fp8ScaleKind::f32)
      .value("ue8m0", Fp8ScaleKind::ue8m0);
  nb::enum_<ScaleLayout>(m, "ScaleLayout")
      .value("row_major", ScaleLayout::row_major)
      .value("swizzled_128x4", ScaleLayout::swizzled_128x4);
  nb::enum_<ActivationKind>(m, "ActivationKind")
      .value("swiglu", ActivationKind::swiglu)
      .value("geglu", ActivationKind::geglu)
      .value("swiglu_oai", ActivationKind::swiglu_oai);

  m.def("dtype_size", &dtype_size, nb::arg("dtype"));

  nb::class_<MoEConfig> cls(m, "MoEConfig",
                            "Static description of one MoE layer (shapes, formats, ranks).");
  cls.def("__init__", &init_config, nb::kw_only(), nb::arg("hidden") = 0,
          nb::arg("intermediate") = 0, nb::arg("num_experts") = 0, nb::arg("top_k") = 0,
          nb::arg("weight_format") = Format::nvfp4, nb::arg("act_format") = Format::nvfp4,
          nb::arg("fp8_scale") = Fp8ScaleKind::f32, nb::arg("activation") = ActivationKind::swiglu,
          nb::arg("clamp") = 0.0f, nb::arg("oai_alpha") = 1.702f, nb::arg("oai_limit") = 7.0f,
          nb::arg("num_ranks") = 1, nb::arg("max_tokens_per_rank") = 0,
          nb::arg("fp8_combine") = false, nb::arg("side_lora") = false, nb::arg("lora_rank") = 128);
  cls.def_prop_rw(
      "hidden", [](const MoEConfig& c) { return c.shape.hidden; },
      [](MoEConfig& c, std::int64_t v) { c.shape.hidden = v; });
  cls.def_prop_rw(
      "intermediate", [](const MoEConfig& c) { return c.shape.intermediate; },
      [](MoEConfig& c, std::int64_t v) { c.shape.intermediate = v; });
  cls.def_prop_rw(
      "num_experts", [](const MoEConfig& c) { return c.shape.num_experts; },
      [](MoEConfig& c, std::int64_t v) { c.shape.num_experts = v; });
  cls.def_prop_rw(
      "top_k", [](const MoEConfig& c) { return c.shape.top_k; },
      [](MoEConfig& c, int v) { c.shape.top_k = v; });
  enum_property(cls, "weight_format", &MoEConfig::weight_format);
  enum_property(cls, "act_format", &MoEConfig::act_format);
  enum_property(cls, "fp8_scale", &MoEConfig::fp8_scale);
  cls.def_prop_rw(
      "activation", [](const MoEConfig& c) { return c.activation.kind; },
      [](MoEConfig& c, nb::handle v) {
        c.activation.kind = enum_arg<ActivationKind>(v, "activation");
      });
  cls.def_prop_rw(
      "clamp", [](const MoEConfig& c) { return c.activation.clamp; },
      [](MoEConfig& c, float v) { c.activation.clamp = v; });
  cls.def_prop_rw(
      "oai_alpha", [](const MoEConfig& c) { return c.activation.oai_alpha; },
      [](MoEConfig& c, float v) { c.activation.oai_alpha = v; });
  cls.def_prop_rw(
      "oai_limit", [](const MoEConfig& c) { return c.activation.oai_limit; },
      [](MoEConfig& c, float v) { c.activation.oai_limit = v; });
  cls.def_rw("num_ranks", &MoEConfig::num_ranks);
  cls.def_rw("max_tokens_per_rank", &MoEConfig::max_tokens_per_rank);
  cls.def_rw("fp8_combine", &MoEConfig::fp8_combine);
  cls.def_rw("side_lora", &MoEConfig::side_lora);
  cls.def_rw("lora_rank", &MoEConfig::lora_rank);
  cls.def_prop_ro("experts_per_rank", &MoEConfig::experts_per_rank);
  cls.def("__repr__", [](const MoEConfig& c) { return "MoEConfig(" + describe(c) + ")"; });
  cls.def("__copy__", [](const MoEConfig& c) { return MoEConfig(c); });
  cls.def("copy", [](const MoEConfig& c) { return MoEConfig(c); });

  m.def("describe", &describe, nb::arg("config"));
  m.def("presets", [] {
    nb::list out;
    for (const Preset& p : presets()) out.append(preset_dict(p));
    return out;
  });
  m.def(
      "find_preset", [](std::string_view name) { return preset_dict(find_preset(name)); },
      nb::arg("name"));
}

}  // namespace megamoe::python
