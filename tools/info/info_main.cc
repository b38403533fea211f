// `loom info`: version, build options, transports, and every parameter with
// its effective value, where that value came from, and its doc.
#include <cstdio>
#include <cstring>
#include <string>

#include "base/params.h"
#include "comm/device_path.h"
#include "comm/fingerprint.h"
#include "loom/loom.hpp"
#include "loom/nccl.h"
#include "tools/commands.h"

namespace loom::tools {

namespace {

const char* TypeName(ParamType t) {
  switch (t) {
    case ParamType::kInt: return "int";
    case ParamType::kBool: return "bool";
    case ParamType::kString: return "string";
  }
  return "?";
}

void PrintParams() {
  std::printf("parameters (LOOM_X first, then NCCL_X where marked, then config files):\n");
  for (const Param* p : params::All()) {
    Param::Raw raw = p->Lookup();
    std::string names = std::string("LOOM_") + p->name();
    if (p->nccl_twin()) names += " / NCCL_" + std::string(p->name());
    std::printf("  %-40s %-6s = %-12s (%s; default '%s')\n      %s\n", names.c_str(),
                TypeName(p->type()), raw.value.empty() ? "''" : raw.value.c_str(),
                raw.source.c_str(), p->default_value(), p->doc());
  }
}

}  // namespace

int InfoMain(int argc, char** argv) {
  bool params_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--params") == 0) {
      params_only = true;
    } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: loom info [--params]\n"
                  "  version, build options, transports and every parameter with its value\n"
                  "  --params  only the parameters\n");
      return 0;
    } else {
      std::fprintf(stderr, "loom info: unknown option '%s' (see --help)\n", argv[i]);
      return 2;
    }
  }
  if (!params_only) {
    std::printf("loom %s (NCCL %d.%d.%d API: loom/nccl.h, libloom_nccl.so.2, also installed as "
                "libnccl.so.2 in <libdir>/loom/nccl)\n",
                Version(), NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    std::printf("build:\n");
    for (auto& [k, v] : BuildOptions()) std::printf("  %-16s %s\n", k.c_str(), v.empty() ? "-" : v.c_str());
    std::printf("transports: shm (same host, POSIX shared memory), tcp (sockets)\n");
    std::printf("gpus: %s\n\n", GpuSummary().c_str());
  }
  PrintParams();
  return 0;
}

}  // namespace loom::tools
