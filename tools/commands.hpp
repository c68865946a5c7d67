#pragma once
// Subcommands of the `megamoe` tool; each lives in its own tools/cmd_<name>.cpp.
#include <span>
#include <string_view>

namespace megamoe::tool {

using Args = std::span<const std::string_view>;  // arguments after the subcommand name

int cmd_info(Args args);
int cmd_demo(Args args);
int cmd_plan(Args args);
int cmd_precompile(Args args);
int cmd_bench(Args args);

}  // namespace megamoe::tool
