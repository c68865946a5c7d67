// `megamoe precompile`: compile every kernel a configuration needs into the disk cache, so that
// serving never compiles on the hot path and ranks do not JIT at different times. Needs NVRTC,
// not a GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.hpp"
#include "jit/compiler.hpp"
#include "megamoe/error.hpp"
#include "megamoe/presets.hpp"
#include "options.hpp"
#include "runtime/kernel_registry.hpp"

namespace megamoe::tool {
namespace {

// The MoE families of docs/design.md §1 as (weight, activation) formats plus side-LoRA.
struct MoeFamily {
  std::string_view name;
  Format weights;
  Format activations;
  bool side_lora;
};

constexpr MoeFamily kMoeFamilies[] = {
    {"nvfp4", Format::nvfp4, Format::nvfp4, false},
    {"mxfp4", Format::mxfp4, Format::mxfp4, false},
    {"mxfp4-fp8", Format::mxfp4, Format::fp8, false},
    {"mxfp4-bf16", Format::mxfp4, Format::bf16, false},
    {"fp8", Format::fp8, Format::fp8, false},
    {"bf16", Format::bf16, Format::bf16, false},
    {"lora", Format::bf16, Format::bf16, true},
    {"lora-mxfp4", Format::mxfp4, Format::bf16, true},
};

std::string family_names() {
  std::string s;
  for (const MoeFamily& f : kMoeFamilies) s += (s.empty() ? "" : ", ") + std::string(f.name);
  return s;
}

const MoeFamily& find_family(std::string_view name) {
  for (const MoeFamily& f : kMoeFamilies) {
    if (f.name == name) return f;
  }
  throw_invalid("--family", "must list MoE families among: " + family_names(), name);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    if (comma > begin) out.push_back(text.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return out;
}

// Families a preset ships in: the words of its `formats` that name a family ("any": all).
std::vector<std::string> default_families(const Preset& preset) {
  std::vector<std::string> out;
  std::string_view formats = preset.formats;
  if (formats == "any") {
    for (const MoeFamily& f : kMoeFamilies) out.emplace_back(f.name);
    return out;
  }
  for (const std::string& word : split_list(std::string(formats))) {
    std::size_t begin = 0;
    while (begin < word.size()) {
      const std::size_t space = std::min(word.find(' ', begin), word.size());
      if (space > begin) out.push_back(word.substr(begin, space - begin));
      begin = space + 1;
    }
  }
  return out;
}

void usage() {
  std::printf(
      "usage: megamoe precompile --preset NAME [--family F,...] [--ranks R] [--max-tokens T]\n"
      "                          [--hidden H --intermediate I --experts E --topk K]\n"
      "                          [--activation swiglu|geglu|swiglu_oai] [--fp8-combine]\n"
      "                          [--kernels KF,...] [--list]\n\n"
      "Compiles every kernel the configuration needs into the kernel cache (MEGAMOE_CACHE_DIR,\n"
      "default ~/.cache/megamoe). Needs NVRTC, not a GPU.\n"
      "  --family    MoE families (default: the formats the preset ships in): %s\n"
      "  --ranks     expert-parallel ranks (default 1)\n"
      "  --max-tokens  tokens per rank (default 256)\n"
      "  --hidden/--intermediate/--experts/--topk  override the preset's shape, or give a\n"
      "              shape without --preset\n"
      "  --activation  the config's activation kind (default swiglu; each kind is its own\n"
      "              kernel, a clamp is not)\n"
      "  --fp8-combine  config.fp8_combine: the kernels that write FP8 combine slots\n"
      "  --kernels   only these kernel families of the registry\n"
      "  --list      print the kernels without compiling\n",
      family_names().c_str());
}

}  // namespace

int cmd_precompile(Args args) {
  const Options o(args,
                  {"preset", "family", "ranks", "max-tokens", "hidden", "intermediate", "experts",
                   "topk", "kernels", "activation"},
                  {"list", "help", "fp8-combine"});
  if (o.has("help")) {
    usage();
    return 0;
  }
  MoEConfig base;
  std::vector<std::string> families;
  if (const auto name = o.get("preset")) {
    const Preset& preset = find_preset(*name, "--preset");
    base.shape = preset.shape;
    families = default_families(preset);
  } else if (!o.has("hidden")) {
    throw_invalid("--preset",
                  "is required unless the shape is given with --hidden, "
                  "--intermediate, --experts and --topk");
  }
  base.shape.hidden = o.get_int("hidden", base.shape.hidden);
  base.shape.intermediate = o.get_int("intermediate", base.shape.intermediate);
  base.shape.num_experts = o.get_int("experts", base.shape.num_experts);
  base.shape.top_k = static_cast<int>(o.get_int("topk", base.shape.top_k));
  if (base.shape.hidden <= 0)
    throw_invalid("--hidden", "must be > 0", std::to_string(base.shape.hidden));
  if (base.shape.intermediate <= 0) {
    throw_invalid("--intermediate", "must be > 0", std::to_string(base.shape.intermediate));
  }
  if (base.shape.num_experts <= 0) {
    throw_invalid("--experts", "must be > 0", std::to_string(base.shape.num_experts));
  }
  if (base.shape.top_k <= 0 || base.shape.top_k > base.shape.num_experts) {
    throw_invalid("--topk", "must be in [1, experts]", std::to_string(base.shape.top_k));
  }
  const std::int64_t ranks = o.get_int("ranks", 1);
  if (ranks < 1 || base.shape.num_experts % ranks != 0) {
    throw_invalid(
        "--ranks",
        "must be >= 1 and divide the expert count " + std::to_string(base.shape.num_experts),
        std::to_string(ranks));
  }
  base.num_ranks = static_cast<int>(ranks);
  base.max_tokens_per_rank = o.get_int("max-tokens", 256);
  if (base.max_tokens_per_rank < 1) {
    throw_invalid("--max-tokens", "must be >= 1", std::to_string(base.max_tokens_per_rank));
  }
  base.activation.kind = parse_activation(o.get_or("activation", "swiglu"));
  base.fp8_combine = o.has("fp8-combine");
  if (const auto list = o.get("family")) families = split_list(*list);
  if (families.empty()) families = {"bf16"};
  const std::vector<std::string> kernel_families =
      o.has("kernels") ? split_list(*o.get("kernels")) : std::vector<std::string>{};

  for (const std::string& name : kernel_families) {
    const auto known = runtime::kernel_families();
    if (std::none_of(known.begin(), known.end(),
                     [&](const runtime::KernelFamily& f) { return f.name == name; })) {
      std::string names;
      for (const auto& f : known) names += (names.empty() ? "" : ", ") + f.name;
      throw_invalid("--kernels", "must list kernel families among: " + names, name);
    }
  }
  // Collect first, so that a bad option fails before any compile starts.
  std::vector<jit::KernelRequest> requests;
  std::vector<std::string> seen;
  for (const std::string& name : families) {
    const MoeFamily& f = find_family(name);
    MoEConfig config = base;
    config.weight_format = f.weights;
    config.act_format = f.activations;
    config.side_lora = f.side_lora;
    for (jit::KernelRequest& r : runtime::kernels_for(config, kernel_families)) {
      std::string key = jit::cache_key(r);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(std::move(key));
      requests.push_back(std::move(r));
    }
  }

  if (o.has("list")) {
    for (const jit::KernelRequest& r : requests) {
      std::printf("%s %s (%s)\n", r.name.c_str(), r.arch.c_str(), r.arguments.c_str());
    }
    return 0;
  }

  const auto start = std::chrono::steady_clock::now();
  int compiled = 0, cached = 0, failed = 0, flagged = 0;
  for (const jit::KernelRequest& r : requests) {
    try {
      const auto k = jit::compile(r);
      const std::string time =
          k->from_cache ? "" : ", " + std::to_string(static_cast<int>(k->compile_ms)) + " ms";
      std::printf("%-8s %s %s (%s): %d registers%s\n", k->from_cache ? "cached" : "compiled",
                  r.name.c_str(), r.arch.c_str(), r.arguments.c_str(), k->registers, time.c_str());
      (k->from_cache ? cached : compiled)++;
      if (!jit::resource_problems(*k).empty()) ++flagged;
    } catch (const Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      ++failed;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto dir = jit::cache_directory();
  std::printf(
      "%zu kernels: %d compiled, %d already cached, %d failed, %d with spills or local "
      "memory; %.1f s; cache %s\n",
      requests.size(), compiled, cached, failed, flagged, seconds,
      dir.empty() ? "disabled (nothing kept)" : dir.c_str());
  return failed == 0 ? 0 : 1;
}

}  // namespace megamoe::tool
