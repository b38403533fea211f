// `loom run`'s command line (ParseRunArgs, RunUsage) and the environment
// each rank starts with.
#include "tools/run/options.h"

#include <charconv>
#include <cmath>
#include <optional>

namespace loom::tools {
namespace {

// Variables the launcher sets per rank; -x may not set them.
constexpr std::string_view kLauncherVars[] = {"LOOM_RANK",       "LOOM_WORLD_SIZE",
                                              "LOOM_LOCAL_RANK", "LOOM_LOCAL_SIZE",
                                              "LOOM_ROOT",       "LOOM_JOB_ID"};

bool IsLauncherVar(std::string_view name) {
  for (std::string_view v : kLauncherVars) {
    if (v == name) return true;
  }
  return false;
}

std::string_view EnvName(std::string_view entry) {
  return entry.substr(0, entry.find('='));
}

bool IsValidEnvName(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    bool ok =
        c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

Result<int> ParseInt(std::string_view flag, std::string_view text, int lo, int hi) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) {
    return InvalidArgument(std::string(flag) + ": expected an integer in [" + std::to_string(lo) +
                           ", " + std::to_string(hi) + "], got '" + std::string(text) + "'");
  }
  return v;
}

// Seconds as a decimal number, like timeout(1); at most 30 days.
Result<double> ParseSeconds(std::string_view flag, std::string_view text) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v < 0 ||
      v > 30.0 * 86400) {
    return InvalidArgument(std::string(flag) + ": expected seconds in [0, 2592000], got '" +
                           std::string(text) + "'");
  }
  return v;
}

}  // namespace

Result<LaunchOptions> ParseRunArgs(int argc, char** argv) {
  LaunchOptions o;
  bool have_np = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the command starts here
    std::string_view name = arg;
    std::optional<std::string_view> inline_value;
    if (arg.starts_with("--")) {
      if (size_t eq = arg.find('='); eq != std::string_view::npos) {
        name = arg.substr(0, eq);
        inline_value = arg.substr(eq + 1);
      }
    }
    auto value = [&]() -> Result<std::string_view> {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) return InvalidArgument(std::string(name) + " needs a value");
      return std::string_view(argv[++i]);
    };
    if (name == "--help" || name == "-h") {
      o.show_help = true;
      return o;
    } else if (name == "--tag-output") {
      if (inline_value) return InvalidArgument("--tag-output takes no value");
      o.tag_output = true;
    } else if (name == "-np" || name == "-n" || name == "--np") {
      LOOM_ASSIGN_OR_RETURN(std::string_view v, value());
      LOOM_ASSIGN_OR_RETURN(o.num_ranks, ParseInt(name, v, 1, kMaxLocalRanks));
      have_np = true;
    } else if (name == "-x") {
      LOOM_ASSIGN_OR_RETURN(std::string_view v, value());
      std::string_view var = EnvName(v);
      if (!IsValidEnvName(var)) {
        return InvalidArgument("-x: expected NAME=value, got '" + std::string(v) + "'");
      }
      if (IsLauncherVar(var)) {
        return InvalidArgument("-x " + std::string(var) + ": the launcher sets it for each rank");
      }
      // A bare NAME (mpirun's "export my value") is already inherited here.
      if (var.size() != v.size()) o.extra_env.emplace_back(v);
    } else if (name == "--output-dir") {
      LOOM_ASSIGN_OR_RETURN(std::string_view v, value());
      if (v.empty()) return InvalidArgument("--output-dir: empty directory name");
      o.output_dir = v;
    } else if (name == "--root-host") {
      LOOM_ASSIGN_OR_RETURN(std::string_view v, value());
      if (v.empty()) return InvalidArgument("--root-host: empty host");
      o.root_host = v;
    } else if (name == "--root-port") {
      LOOM_ASSIGN_OR_RETURN(std::string_view v, value());
      LOOM_ASSIGN_OR_RETURN(o.root_port, ParseInt(name, v, 0, 65535));
    } else if (name == "--kill-grace-ms") {
      LOOM_ASSIGN_OR_RETURN(std::string_view v, value());
      LOOM_ASSIGN_OR_RETURN(o.kill_grace_ms, ParseInt(name, v, 0, 3600 * 1000));
    } else if (name == "--bind-to") {
      LOOM_ASSIGN_OR_RETURN(std::string_view v, value());
      if (v == "auto") {
        o.bind_to = BindTo::kAuto;
      } else if (v == "core") {
        o.bind_to = BindTo::kCore;
      } else if (v == "none") {
        o.bind_to = BindTo::kNone;
      } else {
        return InvalidArgument("--bind-to: expected auto, core or none, got '" + std::string(v) +
                               "'");
      }
    } else if (name == "--timeout") {
      LOOM_ASSIGN_OR_RETURN(std::string_view v, value());
      LOOM_ASSIGN_OR_RETURN(o.timeout_s, ParseSeconds(name, v));
    } else {
      return InvalidArgument("unknown option '" + std::string(arg) + "' (see 'loom run --help')");
    }
  }
  if (!have_np) return InvalidArgument("missing -np N, the number of ranks to start");
  if (i >= argc) return InvalidArgument("missing the command to run after the options");
  if (o.tag_output && !o.output_dir.empty()) {
    return InvalidArgument("--tag-output and --output-dir cannot be combined");
  }
  o.command.assign(argv + i, argv + argc);
  return o;
}

std::string_view RunUsage() {
  return R"(usage: loom run -np N [options] [--] command [args...]

Starts N ranks of `command` on this host, each with LOOM_RANK, LOOM_WORLD_SIZE,
LOOM_LOCAL_RANK, LOOM_LOCAL_SIZE, LOOM_ROOT (host:port where rank 0 serves the
rendezvous store) and LOOM_JOB_ID (random, shared by the job).

options:
  -np N, -n N          number of ranks (1..4096)
  -x NAME=value        extra environment variable for every rank (repeatable)
  --tag-output         prefix each line of output with "[rank] "
  --output-dir DIR     write rank R's stdout/stderr to DIR/rank.R.out and .err
  --timeout SECONDS    kill the job after this wall time (exit 124)
  --kill-grace-ms MS   wait between SIGTERM and SIGKILL (default 3000)
  --bind-to auto|core|none
                       auto (default): rank r on the r-th core (all its hardware
                       threads) when the ranks fit the cores, else on a NUMA
                       node's CPUs; core: a core each or fail; none: unbound
  --root-host HOST     host in LOOM_ROOT (default 127.0.0.1)
  --root-port PORT     port in LOOM_ROOT (default: a free port)
  -h, --help           this text

When a rank fails (non-zero exit or a signal) the others get SIGTERM, then
SIGKILL after the grace period, and loom run exits with the first failing
rank's code (128+signal if it was killed). SIGINT, SIGTERM and SIGHUP sent to
loom run are forwarded once to every rank (each rank runs in its own process
group). Only rank 0 reads stdin, and only when it is not a terminal.
)";
}

std::vector<std::string> RankEnvironment(const LaunchOptions& options, int rank,
                                         std::string_view root, std::string_view job_id,
                                         const char* const* base) {
  auto set_by_x = [&](std::string_view name) {
    for (const std::string& e : options.extra_env) {
      if (EnvName(e) == name) return true;
    }
    return false;
  };
  std::vector<std::string> env;
  for (const char* const* p = base; p != nullptr && *p != nullptr; ++p) {
    std::string_view name = EnvName(*p);
    if (!IsLauncherVar(name) && !set_by_x(name)) env.emplace_back(*p);
  }
  // The last -x of a name wins, as when the shell assigns twice.
  for (size_t i = 0; i < options.extra_env.size(); ++i) {
    std::string_view name = EnvName(options.extra_env[i]);
    bool overridden = false;
    for (size_t j = i + 1; j < options.extra_env.size(); ++j) {
      overridden = overridden || EnvName(options.extra_env[j]) == name;
    }
    if (!overridden) env.push_back(options.extra_env[i]);
  }
  env.push_back("LOOM_RANK=" + std::to_string(rank));
  env.push_back("LOOM_WORLD_SIZE=" + std::to_string(options.num_ranks));
  env.push_back("LOOM_LOCAL_RANK=" + std::to_string(rank));
  env.push_back("LOOM_LOCAL_SIZE=" + std::to_string(options.num_ranks));
  env.push_back("LOOM_ROOT=" + std::string(root));
  env.push_back("LOOM_JOB_ID=" + std::string(job_id));
  return env;
}

}  // namespace loom::tools
