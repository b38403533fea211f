// Verdict, most likely cause and the two renderings of a doctor report.
#include "tools/doctor/report.h"

#include <algorithm>
#include <utility>

namespace loom::doctor {

namespace {

// Lower is more likely the root cause (see MostLikelyCause).
int CauseRank(Check c) {
  static constexpr Check kOrder[] = {Check::kNames,       Check::kInterfaces, Check::kAgents,
                                     Check::kReachability, Check::kFingerprint, Check::kFabric,
                                     Check::kLimits,      Check::kMtuRoutes,  Check::kAttach,
                                     Check::kBandwidth,   Check::kGpu,        Check::kTransportPlan};
  for (size_t i = 0; i < std::size(kOrder); ++i) {
    if (kOrder[i] == c) return static_cast<int>(i);
  }
  return static_cast<int>(std::size(kOrder));
}

json::Value FindingJson(const Finding& f) {
  return json::Value::Object{{"check", Name(f.check)},
                             {"number", static_cast<int>(f.check)},
                             {"status", Name(f.severity)},
                             {"host", f.host},
                             {"summary", f.summary},
                             {"fix", f.fix}};
}

}  // namespace

const char* Name(Severity s) {
  switch (s) {
    case Severity::kPass: return "PASS";
    case Severity::kWarn: return "WARN";
    case Severity::kFail: return "FAIL";
  }
  return "FAIL";
}

const char* Name(Check c) {
  switch (c) {
    case Check::kAgents: return "agents";
    case Check::kNames: return "names";
    case Check::kInterfaces: return "interfaces";
    case Check::kReachability: return "reachability";
    case Check::kFingerprint: return "fingerprint";
    case Check::kFabric: return "fabric";
    case Check::kBandwidth: return "bandwidth";
    case Check::kMtuRoutes: return "mtu_routes";
    case Check::kLimits: return "limits";
    case Check::kGpu: return "gpu";
    case Check::kTransportPlan: return "transport_plan";
    case Check::kAttach: return "attach";
  }
  return "agents";
}

Finding Pass(Check c, std::string summary, std::string host) {
  return {c, Severity::kPass, std::move(host), std::move(summary), ""};
}
Finding Warn(Check c, std::string host, std::string summary, std::string fix) {
  return {c, Severity::kWarn, std::move(host), std::move(summary), std::move(fix)};
}
Finding Fail(Check c, std::string host, std::string summary, std::string fix) {
  return {c, Severity::kFail, std::move(host), std::move(summary), std::move(fix)};
}

Severity Verdict(const std::vector<Finding>& findings) {
  Severity worst = Severity::kPass;
  for (const Finding& f : findings) worst = std::max(worst, f.severity);
  return worst;
}

int ExitCode(const std::vector<Finding>& findings) { return static_cast<int>(Verdict(findings)); }

const Finding* MostLikelyCause(const std::vector<Finding>& findings) {
  const Finding* best = nullptr;
  for (const Finding& f : findings) {
    if (f.severity == Severity::kPass) continue;
    if (best == nullptr || f.severity > best->severity ||
        (f.severity == best->severity && CauseRank(f.check) < CauseRank(best->check))) {
      best = &f;
    }
  }
  return best;
}

std::string RenderText(const Report& r) {
  std::string out;
  for (const Finding& f : r.findings) {
    out += std::string(Name(f.severity)) + "  " + Name(f.check) + "  ";
    if (!f.host.empty()) out += f.host + ": ";
    out += f.summary + "\n";
    if (!f.fix.empty()) out += "      fix: " + f.fix + "\n";
  }
  const Finding* cause = MostLikelyCause(r.findings);
  out += "\n";
  if (cause == nullptr) {
    out += "All checks passed on " + std::to_string(r.hosts.size()) + " host(s).\n";
  } else {
    out += "Most likely cause (" + std::string(Name(cause->check)) + (cause->host.empty() ? "" : ", " + cause->host) +
           "): " + cause->summary + "\n";
    if (!cause->fix.empty()) out += "Fix: " + cause->fix + "\n";
  }
  return out;
}

json::Value RenderJson(const Report& r) {
  json::Value::Array hosts(r.hosts.begin(), r.hosts.end());
  json::Value::Array findings;
  for (const Finding& f : r.findings) findings.push_back(FindingJson(f));
  const Finding* cause = MostLikelyCause(r.findings);
  return json::Value::Object{{"format", "loom-doctor"},
                             {"version", 1},
                             {"mode", r.mode},
                             {"hosts", hosts},
                             {"verdict", Name(Verdict(r.findings))},
                             {"exit_code", ExitCode(r.findings)},
                             {"cause", cause ? FindingJson(*cause) : json::Value()},
                             {"findings", findings}};
}

}  // namespace loom::doctor
