// `megamoe plan`: the symmetric buffer layout of a configuration, region by region.
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "megamoe/buffer.hpp"
#include "megamoe/error.hpp"
#include "megamoe/heuristics.hpp"
#include "megamoe/presets.hpp"
#include "options.hpp"

namespace megamoe::tool {
namespace {

constexpr const char* kUsage =
    "usage: megamoe plan (--preset NAME | --hidden H --intermediate I --experts E --topk K)\n"
    "                    [--ranks R] [--max-tokens T] [--weights nvfp4|mxfp4|fp8|bf16]\n"
    "                    [--acts nvfp4|mxfp4|fp8|bf16] [--fp8-scale f32|ue8m0]\n"
    "                    [--activation swiglu|geglu|swiglu_oai] [--fp8-combine]\n"
    "                    [--side-lora] [--lora-rank r]\n\n"
    "Prints every region of one rank's symmetric buffer (offset, bytes, alignment, rows, row\n"
    "pitch), the fields of the sync region and the total. Defaults: --ranks 1, --max-tokens\n"
    "128, --weights nvfp4, --acts = --weights (bf16 with --side-lora), --activation swiglu.\n";

Format parse_format(const std::string& text, std::string_view option) {
  for (Format f : {Format::bf16, Format::fp8, Format::mxfp4, Format::nvfp4}) {
    if (format_name(f) == text) return f;
  }
  throw_invalid(option, "must be nvfp4, mxfp4, fp8 or bf16", text);
}

int to_int(std::int64_t v, std::string_view option) {
  if (v < -2147483647 || v > 2147483647)
    throw_invalid(option, "is out of range", std::to_string(v));
  return static_cast<int>(v);
}

MoEConfig config_from(const Options& o) {
  MoEConfig c;
  const bool explicit_shape =
      o.has("hidden") || o.has("intermediate") || o.has("experts") || o.has("topk");
  if (o.has("preset")) {
    if (explicit_shape) {
      throw_invalid("--preset", "cannot be combined with --hidden/--intermediate/--experts/--topk");
    }
    c.shape = find_preset(*o.get("preset"), "--preset").shape;
  } else {
    for (const char* need : {"hidden", "intermediate", "experts", "topk"}) {
      if (!o.has(need)) {
        throw_invalid(std::string("--") + need, "is required without --preset");
      }
    }
    c.shape.hidden = o.get_int("hidden", 0);
    c.shape.intermediate = o.get_int("intermediate", 0);
    c.shape.num_experts = o.get_int("experts", 0);
    c.shape.top_k = to_int(o.get_int("topk", 0), "--topk");
  }
  c.num_ranks = to_int(o.get_int("ranks", 1), "--ranks");
  c.max_tokens_per_rank = o.get_int("max-tokens", 128);
  c.side_lora = o.has("side-lora");
  c.lora_rank = to_int(o.get_int("lora-rank", 128), "--lora-rank");
  c.fp8_combine = o.has("fp8-combine");
  c.weight_format = parse_format(o.get_or("weights", "nvfp4"), "--weights");
  const std::string default_acts = c.side_lora ? "bf16" : std::string(format_name(c.weight_format));
  c.act_format = parse_format(o.get_or("acts", default_acts), "--acts");
  const std::string scale = o.get_or("fp8-scale", "f32");
  if (scale != "f32" && scale != "ue8m0")
    throw_invalid("--fp8-scale", "must be f32 or ue8m0", scale);
  c.fp8_scale = scale == "f32" ? Fp8ScaleKind::f32 : Fp8ScaleKind::ue8m0;
  c.activation.kind = parse_activation(o.get_or("activation", "swiglu"));
  return c;
}

double mib(std::size_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

void print_row(const std::string& name, const BufferRegion& r) {
  std::printf("%-24s %14zu %14zu %10.3f %6zu %10zu %8zu\n", name.c_str(), r.offset, r.bytes,
              mib(r.bytes), r.alignment, r.rows, r.row_pitch);
}

}  // namespace

int cmd_plan(Args args) {
  const Options o(args,
                  {"preset", "hidden", "intermediate", "experts", "topk", "ranks", "max-tokens",
                   "weights", "acts", "fp8-scale", "activation", "lora-rank"},
                  {"help", "fp8-combine", "side-lora"});
  if (o.has("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  const MoEConfig config = config_from(o);
  const SymmBufferPlan plan = plan_symm_buffer(config);

  std::printf("config: %s\n", describe(config).c_str());
  std::printf("BLOCK_M by token count:");
  for (std::int64_t t : block_m_regime_ends(config)) {
    std::printf(" t<=%lld: %d", static_cast<long long>(t), get_block_m_for_mega_moe(config, t));
    if (t != config.max_tokens_per_rank) std::printf(",");
  }
  std::printf("\nexpert pool rows: %lld (experts per rank %lld)\n\n",
              static_cast<long long>(plan.pool_rows),
              static_cast<long long>(config.experts_per_rank()));
  std::printf("%-24s %14s %14s %10s %6s %10s %8s\n", "region", "offset", "bytes", "MiB", "align",
              "rows", "pitch");
  for (const BufferRegion& r : plan.regions) {
    print_row(r.name, r);
    if (r.name != "sync") continue;
    for (const BufferRegion& f : plan.sync_fields) {
      BufferRegion abs = f;
      abs.offset += r.offset;
      print_row("  sync." + f.name, abs);
    }
  }
  std::printf("\ntotal: %zu bytes (%.3f MiB) per rank, %.3f MiB for %d ranks\n", plan.total_bytes,
              mib(plan.total_bytes), mib(plan.total_bytes) * config.num_ranks, config.num_ranks);
  return 0;
}

}  // namespace megamoe::tool
