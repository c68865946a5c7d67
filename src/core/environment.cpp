#include "core/environment.hpp"

#include <cstring>

extern char** environ;

namespace megamoe {

std::string megamoe_environment() {
  static constexpr char kPrefix[] = "MEGAMOE_";
  std::string out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if ((*e)[0] != 'M' || std::strncmp(*e, kPrefix, sizeof kPrefix - 1) != 0) continue;
    out += *e;
    out += '\n';
  }
  return out;
}

}  // namespace megamoe
