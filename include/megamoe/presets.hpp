#pragma once
// Model shapes of ../shared/BENCHMARKS.md, as one data table (src/core/presets.cpp).
#include <span>
#include <string_view>

#include "megamoe/config.hpp"

namespace megamoe {

struct Preset {
  std::string_view name;
  MoEShape shape;
  std::string_view formats;  // weight formats the model ships in, for help text
  std::string_view origin;
};

std::span<const Preset> presets();
// Throws InvalidArgument naming `argument` and listing the known presets when not found.
const Preset& find_preset(std::string_view name, std::string_view argument = "preset");

}  // namespace megamoe
