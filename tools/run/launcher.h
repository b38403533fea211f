// `loom run`: a one-host launcher like `mpirun -np N`. Parses the options,
// starts N ranks with the LOOM_* environment the bootstrap reads, relays
// their output and signals, and tears the whole job down when one rank fails.
//
// Process model (why each rank gets its own process group):
// - Every rank is the leader of a new process group, so a Ctrl-C typed in
//   the terminal reaches only the launcher (and whatever else sits in the
//   terminal's foreground group), never the ranks directly. The launcher then
//   forwards SIGINT/SIGTERM/SIGHUP to each rank's group: exactly one signal
//   per process, including the rank's own children (an `sh -c` wrapper and
//   what it started), with no double delivery from the terminal.
// - Because ranks are not in the foreground group, only rank 0 gets the
//   launcher's stdin, and only when stdin is not a terminal (a background
//   group reading the terminal would be stopped by SIGTTIN); every other rank
//   reads /dev/null. Interactive programs (a debugger on the tty) are not
//   supported, nor is a terminal set to `stty tostop` (ranks writing to it
//   would be stopped); run those outside the launcher.
// - A signal the launcher inherited as ignored (nohup's SIGHUP, SIGINT in a
//   script's `&` job) stays ignored and is not forwarded.
// - Each rank has PR_SET_PDEATHSIG(SIGKILL), so even a launcher killed by
//   SIGKILL leaves no rank behind; on every other path the launcher signals
//   every still-running rank's process group before it returns.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comm/base/status.h"

namespace loom::tools {

// Upper bound on -np: a guard against typos such as `-np 40000000`, far
// above any one-host job.
inline constexpr int kMaxLocalRanks = 4096;

// Exit codes of the launcher itself (beyond those of the ranks).
inline constexpr int kExitUsage = 2;            // bad command line
inline constexpr int kExitTimeout = 124;        // --timeout expired (like timeout(1))
inline constexpr int kExitNotExecutable = 126;  // found but cannot be executed
inline constexpr int kExitNotFound = 127;       // command not found
inline constexpr int kExitLaunchError = 1;      // any other failure to start the job

// --bind-to, as mpirun spells it: a core per rank, or no binding (the default:
// bound, a rank's communicator thread shares its core, which made the
// non-blocking 2-rank 32 KiB all-gather 3-5x slower; docs/TOOLS.md).
enum class BindTo { kNone, kCore };

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
  BindTo bind_to = BindTo::kNone;       // --bind-to
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

// Runs the job to completion and returns the launcher's exit code: 0 when
// every rank exited 0; else the first failing rank's exit code (128+signal
// when it was killed); 128+signal when the launcher itself was signalled;
// kExitTimeout on --timeout; 126/127 when the command cannot be executed;
// kExitLaunchError when the job could not be set up. Prints one line per
// problem to stderr, prefixed "loom run: ".
// Blocks until every rank has been reaped. Must be called from a
// single-threaded process (it forks, blocks signals for the whole process
// and reaps every child); restores the signal mask and dispositions it
// changed before returning.
int Launch(const LaunchOptions& options);

// ---- Pieces of Launch, exposed for unit tests -----------------------------

// The CPUs of each core in `allowed` (this process's affinity), in the order
// of their first CPU; `core_of(cpu)` names a CPU's core (sysfs
// core_cpus_list in Launch; any key that is equal for CPUs of one core).
std::vector<std::vector<int>> CoresOf(const std::vector<int>& allowed,
                                      const std::function<std::string(int)>& core_of);

// The CPUs each rank is bound to (empty: not bound): with kCore rank r gets
// core r, and fewer cores than ranks is an error naming both counts.
Result<std::vector<std::vector<int>>> Bindings(BindTo bind_to, int num_ranks,
                                               const std::vector<std::vector<int>>& cores);

// Splits a byte stream into whole lines, each prefixed; the last partial line
// comes out of Flush with a '\n' appended. Not thread-safe; one per stream.
class LineTagger {
 public:
  explicit LineTagger(std::string prefix) : prefix_(std::move(prefix)) {}

  // Appends `data` and returns the complete lines it finished, prefixed, in
  // one string ready to write (empty when no line ended).
  std::string Feed(std::string_view data);
  // Returns the pending partial line, prefixed and newline-terminated, or ""
  // when nothing is pending. Call at EOF.
  std::string Flush();

 private:
  std::string prefix_;
  std::string pending_;  // bytes after the last '\n' seen
};

// "exited with code 3", "killed by signal 9 (Killed)", "... (core dumped)".
std::string DescribeWaitStatus(int wait_status);
// The exit code a shell would report for a wait status: the code, or 128+signal.
int ExitCodeOf(int wait_status);

// The complete environment of one rank, as NAME=value strings: `base`
// (normally environ) without any LOOM_* variable the launcher sets, then the
// -x variables (a later one overrides an earlier one or an inherited one of
// the same name), then LOOM_RANK, LOOM_WORLD_SIZE, LOOM_LOCAL_RANK,
// LOOM_LOCAL_SIZE, LOOM_ROOT=`root` and LOOM_JOB_ID=`job_id`.
std::vector<std::string> RankEnvironment(const LaunchOptions& options, int rank,
                                         std::string_view root, std::string_view job_id,
                                         const char* const* base);

// Where a command runs from, as execvp would find it: a name with '/' is
// returned as is; otherwise the first executable regular file named `name`
// in the ':'-separated `path` (an empty entry is the current directory).
// Returns nullopt when none is found.
std::optional<std::string> FindInPath(std::string_view name, std::string_view path);

// "host:port", with an IPv6 literal bracketed: "[::1]:port".
std::string FormatRootAddress(std::string_view host, int port);

}  // namespace loom::tools
