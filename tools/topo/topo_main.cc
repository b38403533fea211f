// `loom topo`: prints the detected or loaded host topology, its path
// matrix, NICs and the all-reduce algorithm per size that a communicator of
// the given job shape would select (NCCL_ALGO and LOOM_TUNE applied).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/params.h"
#include "tools/commands.h"
#include "tools/topo/render.h"
#include "topology/discover.h"
#include "topology/topo_file.h"

namespace loom::tools {
namespace {

constexpr const char* kUsage =
    "usage: loom topo [--file PATH] [--hosts N] [--ranks-per-host P]\n"
    "                 [--json | --dot | --dump | --simulate]\n"
    "\n"
    "Without --file, the topology comes from LOOM_TOPO_FILE / NCCL_TOPO_FILE when set,\n"
    "else from live discovery (hwloc, /sys/class/net, verbs, NVML).\n"
    "  --file PATH          read a loom topology (JSON) or an NCCL topology (XML)\n"
    "  --hosts N            job shape for the algorithm table: N hosts like this one (1)\n"
    "  --ranks-per-host P   ranks per host (default: the number of GPUs, or of cores\n"
    "                       on a host without GPUs)\n"
    "  --json               the report as JSON (schema loom-topo/1, docs/TOPOLOGY.md)\n"
    "  --dot                Graphviz of nodes and links\n"
    "  --dump               the topology itself, as a loom topology file\n"
    "  --simulate           algorithm choice and ring/tree crossover for 8..4096 ranks\n"
    "\n"
    "The algorithm table is the runtime selector's, with NCCL_ALGO and LOOM_TUNE applied.\n";

bool ParsePositive(const char* s, int* out) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 1 || v > 1000000) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

int TopoMain(int argc, char** argv) {
  std::string file;
  std::string mode = "text";
  int hosts = 1;
  int ranks_per_host = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--file" && has_value) {
      file = argv[++i];
    } else if (a == "--hosts" && has_value) {
      if (!ParsePositive(argv[++i], &hosts)) {
        std::fprintf(stderr, "loom topo: --hosts needs a positive integer, not '%s'\n", argv[i]);
        return 2;
      }
    } else if (a == "--ranks-per-host" && has_value) {
      if (!ParsePositive(argv[++i], &ranks_per_host)) {
        std::fprintf(stderr, "loom topo: --ranks-per-host needs a positive integer, not '%s'\n",
                     argv[i]);
        return 2;
      }
    } else if (a == "--json" || a == "--dot" || a == "--dump" || a == "--simulate") {
      mode = std::string(a.substr(2));
    } else {
      std::fprintf(stderr, "loom topo: unknown or incomplete option '%s'\n%s", argv[i], kUsage);
      return 2;
    }
  }

  Result<topology::Topology> t =
      file.empty() ? topology::LocalTopology() : topology::LoadTopologyFile(file);
  if (!t.ok()) {
    std::fprintf(stderr, "loom topo: %s\n", t.status().ToString().c_str());
    return 1;
  }
  const std::string source = !file.empty() ? file
                             : !params::kTopoFile.Lookup().value.empty()
                                 ? params::kTopoFile.Lookup().source
                                 : "detected";
  // The same knobs, parsed the same way, as Communicator setup.
  Result<JobSpec> job =
      MakeJobSpec(*t, hosts, ranks_per_host, params::kAlgo.Get(), params::kTune.Get());
  if (!job.ok()) {
    std::fprintf(stderr, "loom topo: %s\n", job.status().ToString().c_str());
    return 1;
  }
  std::string out;
  if (mode == "json") {
    out = json::Dump(RenderJson(*t, *job));
  } else if (mode == "dot") {
    out = RenderDot(*t);
  } else if (mode == "dump") {
    out = topology::DumpTopologyJson(*t);
  } else if (mode == "simulate") {
    out = RenderSimulation(*t, *job);
  } else {
    out = RenderText(*t, source, *job);
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace loom::tools
