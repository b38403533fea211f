// The doctor's agent model: one `loom doctor` per host, started by the job's
// launcher; rank 0 also runs a tiny coordinator on the rendezvous port.
//
// Protocol (length-prefixed JSON over plain TCP, net.h; every wait bounded):
//   agent -> coord  {"type":"hello", "facts":{...}}          facts.h, no probes yet
//   coord -> agent  {"type":"peers", "hosts":[facts...]}     everyone who said hello
//   agent -> coord  {"type":"probes", "probes":[...]}        N x N connects to peer candidates
//   coord -> agent  {"type":"stream", "to_rank", "address", "port", "seconds"}   zero or more,
//   agent -> coord  {"type":"stream_result", "stream":{...}} one at a time
//   coord -> agent  {"type":"done", "exit_code", "verdict", "cause"}
// Agents also run a ProbeListener on the probe port for the others' probes
// and streams. An agent that cannot reach the coordinator reports on its
// own (its local checks plus the rendezvous failure); the coordinator names
// agents that never said hello.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "comm/launch_env.h"
#include "tools/doctor/checks.h"
#include "tools/doctor/report.h"

namespace loom::doctor {

struct AgentOptions {
  LaunchEnv launch;                        // rank, size, root_host:root_port (comm/launch_env.h)
  std::vector<std::string> hostfile_names;  // --hosts entries every agent resolves
  int probe_port = 0;                      // 0: root_port + 1
  int connect_timeout_ms = 2000;           // one probe; a DROP shows as this long a wait
  int wait_ms = 30000;                     // for all agents to say hello / for the coordinator
  double stream_seconds = 0.5;             // per ordered host pair; 0 skips check 6
  int64_t stream_max_bytes = int64_t{4} << 30;
  CheckOptions checks;
  // Prints the coordinator's report before the agents hear the verdict, so
  // that a launcher which stops the job when one of them exits non-zero
  // cannot stop rank 0 before its report is out.
  std::function<void(const Report&)> print_report;
};

// What an agent ends with: the report it should print (the full one on
// rank 0; on other ranks only findings of its own, e.g. when it could not
// reach the coordinator) and the exit code (the job's verdict, sent by the
// coordinator, or the agent's own).
struct AgentResult {
  Report report;
  int exit_code = 0;
  bool full_report = false;  // true on rank 0, or when an agent had to report alone
  bool printed = false;      // the report went out through AgentOptions::print_report
  std::string note;          // for the non-reporting ranks: "report printed by rank 0 on h1: FAIL"
};

// Runs this host's agent (and on rank 0 the coordinator). Blocks for the
// whole exchange: about wait_ms at most for the hellos, plus probes and
// streams. Errors only for bad options; every network problem becomes a
// finding.
Result<AgentResult> RunAgent(const AgentOptions& opt);

// One host alone: its facts, no probes, checks over them (`loom doctor`
// without a launcher, or `--hosts F` to check a hostfile from here).
Report RunLocal(const std::vector<std::string>& hostfile_names, const std::string& root,
                const CheckOptions& checks);

}  // namespace loom::doctor
