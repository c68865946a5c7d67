// Placeholder until its issue lands; replaced by the real command.
#include <cstdio>

#include "commands.hpp"

namespace megamoe::tool {

int cmd_demo(Args) {
  std::fprintf(stderr, "megamoe demo: not built yet\n");
  return 3;
}

}  // namespace megamoe::tool
