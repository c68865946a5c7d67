// Placeholder until its issue lands; replaced by the real command.
#include <cstdio>

#include "commands.hpp"

namespace megamoe::tool {

int cmd_plan(Args) {
  std::fprintf(stderr, "megamoe plan: not built yet\n");
  return 3;
}

}  // namespace megamoe::tool
