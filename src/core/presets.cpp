#include "megamoe/presets.hpp"

#include <string>

#include "megamoe/error.hpp"

namespace megamoe {
namespace {

// hidden, intermediate, experts, top-k.
constexpr Preset kPresets[] = {
    {"h6144-e256-k8", {6144, 3072, 256, 8}, "nvfp4", "NVFP4 decode shape of the SM100 reference"},
    {"dsv4-flash", {4096, 2048, 256, 6}, "nvfp4 mxfp4 fp8 bf16", "DeepSeek V4 Flash"},
    {"dsv3", {7168, 2048, 256, 8}, "fp8 nvfp4", "DeepSeek V3"},
    {"qwen3-235b", {4096, 1536, 128, 8}, "any", "Qwen3-235B-A22B"},
};

}  // namespace

std::span<const Preset> presets() {
  return kPresets;
}

const Preset& find_preset(std::string_view name, std::string_view argument) {
  for (const Preset& p : kPresets) {
    if (p.name == name) return p;
  }
  std::string known;
  for (const Preset& p : kPresets) {
    if (!known.empty()) known += ", ";
    known += p.name;
  }
  throw_invalid(argument, "must name a known preset: " + known, std::string(name));
}

}  // namespace megamoe
