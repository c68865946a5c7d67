// Placeholder until its issue lands; replaced by the real command.
#include <cstdio>

#include "commands.hpp"

namespace megamoe::tool {

int cmd_precompile(Args) {
  std::fprintf(stderr, "megamoe precompile: not built yet\n");
  return 3;
}

}  // namespace megamoe::tool
