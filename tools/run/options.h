// `loom run`'s options: what the command line asks for (LaunchOptions), its
// parser and help text, and the environment each rank is started with.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tools/run/binding.h"

namespace loom::tools {

// Upper bound on -np: a guard against typos such as `-np 40000000`, far
// above any one-host job.
inline constexpr int kMaxLocalRanks = 4096;

// What `loom run` was asked to do. A plain value; ParseRunArgs fills it.
struct LaunchOptions {
  bool show_help = false;               // --help: print RunUsage() and start nothing
  int num_ranks = 0;                    // -np / -n
  std::vector<std::string> command;     // program and its arguments; never empty after parsing
  bool tag_output = false;              // --tag-output: prefix lines with "[rank] "
  std::string output_dir;               // --output-dir: DIR/rank.R.{out,err}; empty = inherit
  std::vector<std::string> extra_env;   // -x NAME=value, in command-line order
  std::string root_host = "127.0.0.1";  // --root-host
  int root_port = 0;                    // --root-port; 0 = pick a free port
  int kill_grace_ms = 3000;             // --kill-grace-ms: SIGTERM -> SIGKILL delay
  double timeout_s = 0;                 // --timeout; 0 = no limit
  BindTo bind_to = BindTo::kAuto;       // --bind-to
};

// Parses `run [options] [--] cmd args...`; argv[0] is the subcommand name
// and is skipped. Options end at "--" or at the first argument that does not
// start with '-'. Long options take `--opt value` or `--opt=value`.
// Returns kInvalidArgument naming the offending argument on any error (bad
// number, missing value, unknown option, no command, both --tag-output and
// --output-dir, -x of a variable the launcher sets). Pure: reads no
// environment and touches no file.
Result<LaunchOptions> ParseRunArgs(int argc, char** argv);

// The `loom run --help` text.
std::string_view RunUsage();

// The complete environment of one rank, as NAME=value strings: `base`
// (normally environ) without any LOOM_* variable the launcher sets, then the
// -x variables (a later one overrides an earlier one or an inherited one of
// the same name), then LOOM_RANK, LOOM_WORLD_SIZE, LOOM_LOCAL_RANK,
// LOOM_LOCAL_SIZE, LOOM_ROOT=`root` and LOOM_JOB_ID=`job_id`.
std::vector<std::string> RankEnvironment(const LaunchOptions& options, int rank,
                                         std::string_view root, std::string_view job_id,
                                         const char* const* base);

}  // namespace loom::tools
