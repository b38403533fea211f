// `loom doctor`: options, the choice between agent, hostfile/local and
// attach modes, and printing the report.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "comm/launch_env.h"
#include "topology/topo_file.h"
#include "tools/commands.h"
#include "tools/doctor/agent.h"
#include "tools/doctor/attach.h"
#include "tools/doctor/gather.h"
#include "tools/doctor/options.h"

namespace loom::tools {
namespace {

constexpr const char* kUsage =
    "usage: loom doctor [--hosts FILE] [--json] [--expect RATE] [options]\n"
    "       loom doctor --attach HOST:PORT[+N][,...] [--json]\n"
    "\n"
    "Start one `loom doctor` per host with the job's launcher (loom run, mpirun, srun,\n"
    "torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or LOOM_RANK/LOOM_WORLD_SIZE/\n"
    "LOOM_ROOT): rank 0 coordinates over plain TCP on the rendezvous port and prints one\n"
    "PASS/WARN/FAIL line per check with the evidence and a fix. Without launcher variables\n"
    "it checks this host alone (and with --hosts, the hostfile as this host resolves it).\n"
    "Exit code: 0 all pass, 1 warnings, 2 failures.\n"
    "  --hosts FILE         hostfile whose names every host resolves (Open MPI, MPICH, DeepSpeed)\n"
    "  --json               the report as JSON (schema loom-doctor/1, docs/DOCTOR.md)\n"
    "  --expect RATE        bandwidth each host pair should reach: 100gbit, 800mbit, 25G\n"
    "  --probe-port P       port each agent listens on for probes and streams (rendezvous+1)\n"
    "  --timeout-ms MS      one TCP connect attempt (2000)\n"
    "  --wait S             seconds to wait for every agent / for the coordinator (30)\n"
    "  --stream-seconds S   timed stream per ordered host pair; 0 skips it (0.5)\n"
    "  --attach EPS         ask running ranks' status ports (LOOM_STATUS_PORT) what they do\n"
    "  --stall-s S          with --attach: an operation older than this is stalled (10)\n";

void Print(const doctor::Report& r, bool json) {
  if (json) {
    std::fputs(json::Dump(doctor::RenderJson(r)).c_str(), stdout);
  } else {
    std::fputs(doctor::RenderText(r).c_str(), stdout);
  }
  std::fflush(stdout);
}

int Attach(const doctor::DoctorOptions& o) {
  auto eps = doctor::ParseEndpoints(o.attach);
  if (!eps.ok()) {
    std::fprintf(stderr, "loom doctor: %s\n", eps.status().message().c_str());
    return 2;
  }
  std::vector<doctor::RankStatus> ranks;
  for (const std::string& ep : eps.value()) ranks.push_back(doctor::QueryStatus(ep, o.timeout_ms));
  doctor::Report r;
  r.mode = "attach";
  r.hosts = eps.value();
  r.findings = doctor::AnalyzeAttach(ranks, static_cast<int64_t>(o.stall_s * 1000));
  Print(r, o.json);
  return doctor::ExitCode(r.findings);
}

}  // namespace

int DoctorMain(int argc, char** argv) {
  auto parsed = doctor::ParseDoctorArgs(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "loom doctor: %s\n%s", parsed.status().message().c_str(), kUsage);
    return 2;
  }
  const doctor::DoctorOptions& o = parsed.value();
  if (o.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!o.attach.empty()) return Attach(o);

  std::vector<std::string> names;
  if (!o.hostfile.empty()) {
    auto text = topology::ReadWholeFile(o.hostfile);
    auto parsed_names = text.ok() ? doctor::ParseHostfile(text.value()) : Result<std::vector<std::string>>(text.status());
    if (!parsed_names.ok()) {
      std::fprintf(stderr, "loom doctor: %s\n", parsed_names.status().message().c_str());
      return 2;
    }
    names = std::move(parsed_names).value();
  }
  doctor::CheckOptions checks;
  checks.expect_gbps = o.expect_gbps;
  auto launch = ReadLaunchEnv([](const char* n) { return std::getenv(n); });
  if (!launch.ok()) {
    std::fprintf(stderr, "loom doctor: %s\n", launch.status().message().c_str());
    return 2;
  }
  if (!launch->has_value() || (*launch)->size == 1) {
    // One host: what it can tell alone. A hostfile naming several hosts
    // makes it a multi-host job all the same.
    checks.multi_host = names.size() > 1;
    const std::string root =
        launch->has_value() && (*launch)->root_port != 0
            ? (*launch)->root_host + ":" + std::to_string((*launch)->root_port)
            : "";
    const doctor::Report r = doctor::RunLocal(names, root, checks);
    Print(r, o.json);
    return doctor::ExitCode(r.findings);
  }
  doctor::AgentOptions a;
  a.launch = **launch;
  a.hostfile_names = names;
  a.probe_port = o.probe_port;
  a.connect_timeout_ms = o.timeout_ms;
  a.wait_ms = static_cast<int>(o.wait_s * 1000);
  a.stream_seconds = o.stream_seconds;
  a.checks = checks;
  a.print_report = [&o](const doctor::Report& r) { Print(r, o.json); };
  auto result = doctor::RunAgent(a);
  if (!result.ok()) {
    std::fprintf(stderr, "loom doctor: %s\n", result.status().message().c_str());
    return 2;
  }
  if (result->full_report) {
    if (!result->printed) Print(result->report, o.json);
  } else {
    std::fprintf(stderr, "%s\n", result->note.c_str());
  }
  return result->exit_code;
}

}  // namespace loom::tools
