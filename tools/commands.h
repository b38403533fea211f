// The `loom` tool's subcommands: one entry point per subcommand, declared
// here and listed in the table in tools/main.cc.
#pragma once

namespace loom::tools {

// A subcommand's entry point. argv[0] is the subcommand's name ("run"), the
// rest are its arguments; argv[argc] is null. Returns the process exit code.
// Called once, on the main thread, with the process to itself.
using CommandMain = int (*)(int argc, char** argv);

struct Command {
  const char* name;  // what the user types: `loom <name>`
  const char* help;  // one line for `loom help`
  CommandMain main;
};

// `loom run -np N [options] [--] cmd args...`: starts N local ranks
// (tools/run/run_main.cc).
int RunMain(int argc, char** argv);

// `loom perf <collective> [flags]`: nccl-tests compatible bandwidth test
// (tools/perf/perf_main.cc).
int PerfMain(int argc, char** argv);

// `loom info [--params]`: version, build options, parameters (tools/info/info_main.cc).
int InfoMain(int argc, char** argv);

// `loom topo [--file F] [--json|--dot|--dump|--simulate]`: host topology,
// path matrix, NICs and algorithm choice (tools/topo/topo_main.cc).
int TopoMain(int argc, char** argv);

// `loom doctor [--hosts F] [--json] [--expect RATE] | --attach EPS`: why a
// multi-node job fails or is slow, one agent per host (tools/doctor/doctor_main.cc).
int DoctorMain(int argc, char** argv);

// `loom plan --params N --gpus N [...]`: DP x TP x PP x ZeRO layout, memory and
// traffic per GPU, recommended layout (tools/plan/plan_main.cc).
int PlanMain(int argc, char** argv);

}  // namespace loom::tools
