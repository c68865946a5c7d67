#include "options.hpp"

#include <algorithm>
#include <charconv>

#include "megamoe/error.hpp"

namespace megamoe::tool {
namespace {

std::int64_t parse_int(std::string_view option, std::string_view text) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw_invalid(option, "must be an integer", text);
  }
  return v;
}

}  // namespace

Options::Options(Args args, std::vector<std::string_view> valued,
                 std::vector<std::string_view> flags) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (!a.starts_with("--")) throw_invalid(a, "options start with '--'");
    const std::string_view name = a.substr(2);
    if (std::find(flags.begin(), flags.end(), name) != flags.end()) {
      values_[std::string(name)] = "1";
    } else if (std::find(valued.begin(), valued.end(), name) != valued.end()) {
      if (i + 1 >= args.size()) throw_invalid(a, "needs a value");
      values_[std::string(name)] = std::string(args[++i]);
    } else {
      std::string known;
      for (auto k : valued) known.append(" --").append(k).append(" VALUE");
      for (auto k : flags) known.append(" --").append(k);
      throw_invalid(a, "is not an option of this command; options:" + known);
    }
  }
}

bool Options::has(std::string_view name) const {
  return values_.find(name) != values_.end();
}

std::optional<std::string> Options::get(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Options::get_or(std::string_view name, std::string_view fallback) const {
  auto v = get(name);
  return v ? *v : std::string(fallback);
}

std::int64_t Options::get_int(std::string_view name, std::int64_t fallback) const {
  auto v = get(name);
  return v ? parse_int("--" + std::string(name), *v) : fallback;
}

std::vector<std::int64_t> Options::get_int_list(std::string_view name,
                                                std::vector<std::int64_t> fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  std::vector<std::int64_t> out;
  std::string_view rest = *v;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    out.push_back(parse_int("--" + std::string(name), rest.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

ActivationKind parse_activation(const std::string& text) {
  for (ActivationKind a :
       {ActivationKind::swiglu, ActivationKind::geglu, ActivationKind::swiglu_oai}) {
    if (activation_name(a) == text) return a;
  }
  throw_invalid("--activation", "must be swiglu, geglu or swiglu_oai", text);
}

}  // namespace megamoe::tool
