#include "megamoe/error.hpp"

namespace megamoe {
namespace {

std::string format_invalid(const std::string& argument, const std::string& rule,
                           const std::string& got) {
  std::string msg = "megamoe: argument '" + argument + "': " + rule;
  if (!got.empty()) msg += " (got " + got + ")";
  return msg;
}

}  // namespace

InvalidArgument::InvalidArgument(std::string argument, std::string rule, std::string got)
    : Error(format_invalid(argument, rule, got)),
      argument_(std::move(argument)),
      rule_(std::move(rule)) {}

void throw_invalid(std::string_view argument, std::string_view rule, std::string_view got) {
  throw InvalidArgument(std::string(argument), std::string(rule), std::string(got));
}

}  // namespace megamoe
