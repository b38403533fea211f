// Output of `loom perf`: the nccl-tests table (same columns, widths and
// summary lines, so existing parsers read it), loom's extra summary lines,
// and the JSON form of every row. Pure string formatting, no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "loom/types.hpp"
#include "tools/perf/collective.h"
#include "tools/perf/options.h"

namespace loom::perf {

// One timed placement (out-of-place or in-place) of one row.
struct Measurement {
  double time_us = 0;  // per iteration, after the -a reduction across ranks
  double algbw = 0;    // GB/s
  double busbw = 0;    // GB/s
  int64_t wrong = -1;  // wrong elements summed over ranks; -1 = not checked ("N/A")
  double cpu_us = 0;   // -C: this rank's time to issue the loop, per iteration (not reduced)
};

// One line of the table.
struct Row {
  Collective collective = Collective::kAllReduce;
  size_t bytes = 0;  // "size" column
  size_t count = 0;  // "count" column (the count argument of the call)
  DataType type = DataType::kFloat32;
  std::string redop;  // "sum", ..., or "none"
  int root = -1;
  Measurement out_of_place;
  Measurement in_place;
  std::string timestamp;  // -S: FormatTimestamp of when the row finished; "" = none
};

// Who ran: one entry per rank, in rank order.
struct RankInfo {
  int rank = 0;
  int pid = 0;
  std::string host;
};

// nccl-tests' time format: 2 decimals below 100 us, 1 below 10 ms, else 0;
// 7 characters wide.
std::string FormatTime(double us);

// nccl-tests' -S timestamp, local time: "YYYY-MM-DD hh:mm:ss".
std::string FormatTimestamp(std::time_t when);

// "# nThread 1 nGpus 1 minBytes ..." line, the mode notes (-z, -C, -T, and
// one "# " line per options.notes entry), and the "# Using devices" block
// with one "#  Rank ..." line per rank. Ends with "#\n".
std::string FormatRunHeader(const PerfOptions& options, const std::vector<RankInfo>& ranks);

// "# Collective test starting: <name>_perf" and the three column-title lines;
// with -C the time columns are titled "cputime", with -S a "timestamp"
// column ends them.
std::string FormatTableHeader(Collective c, bool cputime = false, bool timestamps = false);

// One table line with its newline: the time column shows cpu_us under -C;
// a non-empty row.timestamp ends the line.
std::string FormatRow(const Row& row, bool cputime = false);

// Totals over a run, as nccl-tests prints them at the end.
struct Summary {
  int64_t out_of_bounds = 0;  // nccl-tests' count: failing results, counted once per rank
  double avg_busbw = 0;       // mean busbw over every measurement
  struct Peak {
    Collective collective;
    double busbw;
    size_t bytes;
    bool in_place;
  };
  std::vector<Peak> peaks;  // per collective, in order of first appearance
};
Summary Summarize(const std::vector<Row>& rows, int nranks);

// "# Out of bounds values : N OK|FAILED", "# Avg bus bandwidth    : X",
// "#", then one "# Peak bus bandwidth   : X GB/s at SIZE (coll, placement)" per collective.
std::string FormatSummary(const Summary& summary);

// The whole run as one JSON object: nranks, the options, every row (one
// object per placement) and the summary. Ends with a newline.
std::string FormatJson(const PerfOptions& options, int nranks, const std::vector<Row>& rows,
                       const Summary& summary);

}  // namespace loom::perf
