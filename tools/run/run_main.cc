// `loom run` entry point: parses the command line and hands it to Launch.
#include <cstdio>
#include <string>

#include "tools/commands.h"
#include "tools/run/launcher.h"

namespace loom::tools {

int RunMain(int argc, char** argv) {
  Result<LaunchOptions> options = ParseRunArgs(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "loom run: %s\n", options.status().message().c_str());
    std::fprintf(stderr, "usage: loom run -np N [options] [--] command [args...]  (see --help)\n");
    return kExitUsage;
  }
  if (options->show_help) {
    std::string usage(RunUsage());
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  return Launch(*options);
}

}  // namespace loom::tools
