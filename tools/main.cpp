// The `megamoe` command: info, demo, plan, precompile, bench.
#include <cstdio>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "megamoe/error.hpp"

namespace {

struct Command {
  std::string_view name;
  int (*run)(megamoe::tool::Args);
  std::string_view help;
};

constexpr Command kCommands[] = {
    {"info", megamoe::tool::cmd_info, "GPU, architecture, SM count, driver and runtime versions"},
    {"demo", megamoe::tool::cmd_demo, "run the flagship layer on a default preset and check it"},
    {"plan", megamoe::tool::cmd_plan, "print the symmetric buffer layout of a configuration"},
    {"precompile", megamoe::tool::cmd_precompile, "compile every kernel a configuration needs"},
    {"bench", megamoe::tool::cmd_bench, "multi-GPU launcher: one process per GPU over NCCL"},
};

void usage() {
  std::printf("usage: megamoe <command> [options]\n\ncommands:\n");
  for (const Command& c : kCommands) {
    std::printf("  %-11.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(),
                static_cast<int>(c.help.size()), c.help.data());
  }
  std::printf("\n`megamoe <command> --help` describes a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage();
    return 2;
  }
  const std::string_view name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    usage();
    return 0;
  }
  std::vector<std::string_view> args(argv + 2, argv + argc);
  for (const Command& c : kCommands) {
    if (c.name != name) continue;
    try {
      return c.run(args);
    } catch (const megamoe::Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "megamoe: unknown command '%s'\n", argv[1]);
  usage();
  return 2;
}
