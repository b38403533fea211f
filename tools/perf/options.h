// Command-line options of `loom perf`: nccl-tests flags and spellings, parsed
// into a plain struct, plus the message sizes a run visits.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/status.hpp"
#include "loom/types.hpp"
#include "tools/perf/collective.h"

namespace loom::perf {

// Everything `loom perf` was asked to do. Defaults are nccl-tests' defaults.
struct PerfOptions {
  std::vector<Collective> collectives;   // one, or every collective for "all"
  size_t min_bytes = 32u << 20;          // -b
  size_t max_bytes = 32u << 20;          // -e
  size_t step_bytes = 1u << 20;          // -i, used when step_factor <= 1
  size_t step_factor = 1;                // -f
  int iters = 20;                        // -n
  int warmup_iters = 5;                  // -w
  int agg_iters = 1;                     // -m: collectives per group in a timed iteration
  int check = 1;                         // -c: checked calls per measurement, 0 = no data check
  std::vector<PerfOp> ops{RedOp::kSum};  // -o (several for "all")
  std::vector<DataType> types{DataType::kFloat32};  // -d (several for "all")
  int root = 0;                                     // -r; -1 = every rank in turn
  // -z: 0 issue all, then wait; 1 wait and barrier after each call; 2 wait
  // after each call; 3 wait after each iteration, barrier untimed.
  int blocking = 0;
  int average = 1;                     // -a: 0 rank 0, 1 avg, 2 min, 3 max
  int parallel_init = 0;               // -p: accepted, no effect (one rank per process)
  int run_cycles = 1;                  // -N: times the size sweep runs; 0 = until stopped
  int timeout_s = 0;                   // -T: abort when one operation takes longer; 0 = off
  int cudagraph = 0;                   // -G: accepted; host buffers have no CUDA graphs
  bool report_cputime = false;         // -C 1: the time column is the issuing thread's time
  bool report_timestamps = false;      // -S 1: a timestamp after each row
  bool memory_report = false;          // -M 1: buffer memory and peak RSS after the run
  int unalign = 0;                     // -u: buffers start this many elements past alignment
  std::string json_path;               // --json / -J FILE, "-" = stdout, "" = none
  std::string plot_path;               // --plot FILE.svg
  std::vector<std::string> plot_from;  // --from A.json (repeatable): plot saved runs
  bool help = false;                   // -h / --help: print Usage() and exit 0
  bool corrupt_for_test = false;       // hidden: flip one output element before checking
  bool fixed_buffers = false;    // --fixed-buffers: no walk through the buffers (see bench.cc)
  int local_register = 0;        // -R 1/2: buffers in shareable memory (loom::AllocShared)
  bool back_to_back = false;     // --back-to-back 1: blocking calls, no barrier between
  bool warmup_per_size = false;  // --warmup-per-size 1: -w untimed calls before every size
  bool rewrite_inputs = false;   // --rewrite-inputs 1: dirty every input line before each call
  // One line per nccl-tests flag that was accepted but changes nothing here
  // (device-only flags), in the order given; the header prints each with "# ".
  std::vector<std::string> notes;
};

// Parses argv[first..argc) (the collective name, then flags in any order).
// With --from the collective may be left out: the run is a plot of saved files.
// The collective may come as "all_reduce", "all_reduce_perf", "allreduce" or
// "all". Flags take their value as the next word or glued on ("-b8", "-b=8",
// "--minbytes=8"). Fails with kInvalidArgument naming the offending word.
// Pure: no I/O, no global state.
Result<PerfOptions> ParseOptions(int argc, const char* const* argv, int first);

// "8", "1K", "1.5M", "2g" -> bytes (K/M/G are powers of 1024, as nccl-tests).
// Fails on an empty string, a negative value, an unknown suffix or trailing junk.
Result<size_t> ParseSize(std::string_view text);

// The sizes nccl-tests visits: min, then min*factor (factor > 1) or
// min+step, while <= max. Never empty when min <= max. ParseOptions rejects
// option sets that would not end (factor > 1 with min 0, step 0 without factor).
std::vector<size_t> SizeSequence(const PerfOptions& options);

// The --help text ("USAGE: loom perf <collective> [flags]" and one line per flag).
std::string Usage();

}  // namespace loom::perf
