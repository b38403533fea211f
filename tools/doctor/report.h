// Findings (one PASS/WARN/FAIL line with evidence and one fix), the
// "most likely cause" pick, the exit code, and the text and JSON renderings
// of a doctor report (JSON schema loom-doctor/1, docs/DOCTOR.md).
#pragma once

#include <string>
#include <vector>

#include "topology/json.h"

namespace loom::doctor {

// Ordered: a report's verdict is its worst finding.
enum class Severity { kPass, kWarn, kFail };
const char* Name(Severity s);  // "PASS", "WARN", "FAIL"

// The checks, numbered as in issue 6 / docs/DOCTOR.md. kAgents covers the
// doctor's own plumbing (an agent that never reported); kAttach the running
// job view.
enum class Check {
  kAgents = 0,
  kNames = 1,
  kInterfaces = 2,
  kReachability = 3,
  kFingerprint = 4,
  kFabric = 5,
  kBandwidth = 6,
  kMtuRoutes = 7,
  kLimits = 8,
  kGpu = 9,
  kTransportPlan = 10,
  kAttach = 11,
};
const char* Name(Check c);  // "agents", "names", "interfaces", ... as in the JSON "check" member

// One line of a report. A plain value.
struct Finding {
  Check check = Check::kAgents;
  Severity severity = Severity::kPass;
  std::string host;     // the host it is about (its label); "" when job-wide
  std::string summary;  // what was seen, with the numbers, interface, peer and port
  std::string fix;      // one concrete thing to do; "" for PASS
};

Finding Pass(Check c, std::string summary, std::string host = "");
Finding Warn(Check c, std::string host, std::string summary, std::string fix);
Finding Fail(Check c, std::string host, std::string summary, std::string fix);

struct Report {
  std::string mode;                // "agents", "hostfile", "local" or "attach"
  std::vector<std::string> hosts;  // labels of the hosts that reported
  std::vector<Finding> findings;   // in check order
};

Severity Verdict(const std::vector<Finding>& findings);  // kPass when empty
int ExitCode(const std::vector<Finding>& findings);      // 0 pass, 1 warnings, 2 failures

// The finding most likely to be the root cause: the first failure in cause
// order (names, interfaces, agents, reachability, fingerprint, fabric,
// limits, MTU/routes, attach, bandwidth, GPU, plan: a wrong name or interface
// explains the unreachable port that follows from it), else the first
// warning in that order; nullptr when everything passed.
const Finding* MostLikelyCause(const std::vector<Finding>& findings);

// The human form: one "PASS|WARN|FAIL  check  host: summary" line per
// finding, an indented "fix:" line under each that has one, and a final
// "most likely cause" paragraph. Pure.
std::string RenderText(const Report& r);

// The JSON form, schema loom-doctor/1:
//   {"format": "loom-doctor", "version": 1, "mode": ..., "hosts": [...],
//    "verdict": "PASS"|"WARN"|"FAIL", "exit_code": 0|1|2,
//    "cause": null | {"check", "number", "status", "host", "summary", "fix"},
//    "findings": [{"check", "number", "status", "host", "summary", "fix"}, ...]}
json::Value RenderJson(const Report& r);

}  // namespace loom::doctor
