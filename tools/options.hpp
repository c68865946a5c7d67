#pragma once
// A small `--name value` / `--flag` parser shared by the subcommands. Unknown options and
// malformed numbers raise InvalidArgument naming the option.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "megamoe/types.hpp"

namespace megamoe::tool {

class Options {
 public:
  // `valued` options take a value; `flags` take none. Anything else is rejected.
  Options(Args args, std::vector<std::string_view> valued, std::vector<std::string_view> flags);

  bool has(std::string_view name) const;
  std::optional<std::string> get(std::string_view name) const;
  std::string get_or(std::string_view name, std::string_view fallback) const;
  std::int64_t get_int(std::string_view name, std::int64_t fallback) const;
  // Comma-separated integers, e.g. "--tokens 1,16,128".
  std::vector<std::int64_t> get_int_list(std::string_view name,
                                         std::vector<std::int64_t> fallback) const;

 private:
  std::map<std::string, std::string, std::less<>> values_;
};

// `--activation swiglu|geglu|swiglu_oai` (plan, precompile); anything else raises
// InvalidArgument naming the option.
ActivationKind parse_activation(const std::string& text);

}  // namespace megamoe::tool
