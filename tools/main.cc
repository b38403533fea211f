// The `loom` command-line tool: `loom <subcommand> [args]` dispatches to the
// subcommands listed in kCommands.
#include <cstdio>
#include <cstring>
#include <span>
#include <string_view>

#include "loom/loom.hpp"
#include "tools/commands.h"

namespace {

using loom::tools::Command;

// Adding a subcommand: one line here plus its declaration in commands.h.
constexpr Command kCommands[] = {
    {"run", "start N ranks of a program on this host, like mpirun -np N", loom::tools::RunMain},
    {"perf", "collective bandwidth test, nccl-tests flags and columns", loom::tools::PerfMain},
    {"info", "version, build options and every parameter with its value", loom::tools::InfoMain},
    {"topo", "host topology, GPU/NIC path matrix and algorithm choice", loom::tools::TopoMain},
    {"doctor", "why a multi-node job fails or is slow: per-host checks, cause, fix", loom::tools::DoctorMain},
    {"plan", "parallel layout for a model on a cluster: memory, traffic, step time", loom::tools::PlanMain},
};

const Command* FindCommand(std::string_view name) {
  for (const Command& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

void PrintHelp(FILE* out) {
  std::fprintf(out, "usage: loom <command> [args...]\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.help);
  std::fprintf(out,
               "  %-10s %s\n\n"
               "'loom help <command>' or 'loom <command> --help' shows a command's options;\n"
               "'loom --version' prints the version.\n",
               "help", "this list");
}

}  // namespace

int main(int argc, char** argv) {
  std::span<char*> args(argv, static_cast<size_t>(argc));
  if (args.size() < 2) {
    PrintHelp(stdout);
    return 0;
  }
  std::string_view first = args[1];
  if (first == "--version" || first == "version") {
    std::printf("loom %s\n", loom::Version());
    return 0;
  }
  if (first == "help" || first == "--help" || first == "-h") {
    if (args.size() < 3) {
      PrintHelp(stdout);
      return 0;
    }
    const Command* c = FindCommand(args[2]);
    if (c == nullptr) {
      std::fprintf(stderr, "loom: unknown command '%s'\n", args[2]);
      PrintHelp(stderr);
      return 2;
    }
    char help_flag[] = "--help";
    char* sub_argv[] = {args[2], help_flag, nullptr};
    return c->main(2, sub_argv);
  }
  const Command* c = FindCommand(first);
  if (c == nullptr) {
    std::fprintf(stderr, "loom: unknown command '%s' (see 'loom help')\n", args[1]);
    return 2;
  }
  // The subcommand sees its own name as argv[0].
  return c->main(argc - 1, argv + 1);
}
