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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tools/run/binding.h"
#include "tools/run/options.h"

namespace loom::tools {

// Exit codes of the launcher itself (beyond those of the ranks).
inline constexpr int kExitUsage = 2;            // bad command line
inline constexpr int kExitTimeout = 124;        // --timeout expired (like timeout(1))
inline constexpr int kExitNotExecutable = 126;  // found but cannot be executed
inline constexpr int kExitNotFound = 127;       // command not found
inline constexpr int kExitLaunchError = 1;      // any other failure to start the job

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

// Where a command runs from, as execvp would find it: a name with '/' is
// returned as is; otherwise the first executable regular file named `name`
// in the ':'-separated `path` (an empty entry is the current directory).
// Returns nullopt when none is found.
std::optional<std::string> FindInPath(std::string_view name, std::string_view path);

// "host:port", with an IPv6 literal bracketed: "[::1]:port".
std::string FormatRootAddress(std::string_view host, int port);

}  // namespace loom::tools
