// Table, summary and JSON formatting of `loom perf` (nccl-tests layout).
#include "tools/perf/report.h"

#include <cmath>
#include <cstdio>

#include "base/strings.h"

namespace loom::perf {
namespace {

std::string FormatMeasurement(const Measurement& m, bool cputime) {
  std::string out = StrPrintf("  %7s  %6.2f  %6.2f",
                           FormatTime(cputime ? m.cpu_us : m.time_us).c_str(), m.algbw, m.busbw);
  if (m.wrong < 0) return out + StrPrintf("  %5s", "N/A");
  return out + StrPrintf("  %5lld", static_cast<long long>(m.wrong));
}

// JSON number: finite values as %.6g-ish, anything else as null.
std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return StrPrintf("%.9g", v);
}

std::string JsonMeasurement(const Row& row, const char* placement, const Measurement& m) {
  return StrPrintf(
      "{\"collective\": \"%s\", \"placement\": \"%s\", \"size\": %zu, \"count\": %zu, "
      "\"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, \"time_us\": %s, \"algbw_gbps\": %s, "
      "\"busbw_gbps\": %s, \"cputime_us\": %s, \"wrong\": %s}",
      std::string(Name(row.collective)).c_str(), placement, row.bytes, row.count,
      std::string(Name(row.type)).c_str(), row.redop.c_str(), row.root,
      JsonNumber(m.time_us).c_str(), JsonNumber(m.algbw).c_str(), JsonNumber(m.busbw).c_str(),
      JsonNumber(m.cpu_us).c_str(), m.wrong < 0 ? "null" : std::to_string(m.wrong).c_str());
}

}  // namespace

std::string FormatTime(double us) {
  if (us >= 10000.0) return StrPrintf("%7.0f", us);
  if (us >= 100.0) return StrPrintf("%7.1f", us);
  return StrPrintf("%7.2f", us);
}

std::string FormatTimestamp(std::time_t when) {
  std::tm local{};
  localtime_r(&when, &local);
  char text[32];
  const size_t n = std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &local);
  return std::string(text, n);
}

std::string FormatRunHeader(const PerfOptions& o, const std::vector<RankInfo>& ranks) {
  const bool factor = o.step_factor > 1;
  std::string out = StrPrintf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "agg iters: %d validation: %d graph: 0\n",
      o.min_bytes, o.max_bytes, factor ? o.step_factor : o.step_bytes, factor ? "factor" : "bytes",
      o.warmup_iters, o.iters, o.agg_iters, o.check);
  switch (o.blocking) {
    case 1:
      out += "# Blocking Enabled: wait for completion and barrier after each collective \n";
      break;
    case 2:
      out += "# Blocking Enabled: wait for completion after each collective, no barrier\n";
      break;
    case 3:
      out +=
          "# Blocking Enabled: wait for completion and barrier after each iteration; "
          "the barrier is not timed\n";
      break;
    default:
      break;
  }
  if (o.report_cputime) {
    out +=
        "# Report CPU time: the time columns show how long rank 0's thread took to issue "
        "the calls\n";
  }
  if (o.timeout_s > 0) {
    out += StrPrintf("# Timeout: %d s per operation, then the run is aborted\n", o.timeout_s);
  }
  if (o.run_cycles != 1) {
    out += o.run_cycles == 0 ? std::string("# Run cycles: until stopped\n")
                             : StrPrintf("# Run cycles: %d\n", o.run_cycles);
  }
  if (o.unalign > 0) {
    out += StrPrintf("# Unaligned: buffers start %d element(s) past their alignment\n", o.unalign);
  }
  for (const std::string& note : o.notes) out += "# " + note + "\n";
  if (o.back_to_back) {
    out += "# Back-to-back: every iteration one blocking call, no barrier between\n";
  }
  if (o.warmup_per_size) {
    out += "# Warm-up per size: the warm-up iterations run before every size\n";
  }
  if (o.rewrite_inputs) {
    out += "# Rewrite inputs: every cache line of each call's input written before the call\n";
  }
  if (o.parallel_init) {
    out += "# Parallel Init: accepted and ignored (one rank per process)\n";
  }
  out += "#\n# Using devices\n";
  for (const RankInfo& r : ranks) {
    // nccl-tests names the GPU here; loom perf measures host buffers.
    out += StrPrintf("#  Rank %2d Group  0 Pid %6d on %10s device  - [host] host memory\n", r.rank,
                  r.pid, r.host.c_str());
  }
  out += "#\n";
  return out;
}

std::string FormatTableHeader(Collective c, bool cputime, bool timestamps) {
  const char* time = cputime ? "cputime" : "time";
  // nccl-tests' timestamp title and its format as the unit.
  const std::string ts = timestamps ? StrPrintf(" %19s", "timestamp") : "";
  const std::string ts_unit = timestamps ? StrPrintf(" %19s", "%Y-%m-%d %H:%M:%S") : "";
  std::string out = StrPrintf("# Collective test starting: %s_perf\n", std::string(Name(c)).c_str());
  out += StrPrintf(
      "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
      "\n",
      "", "", "", "", "");
  out += StrPrintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s%s\n", "size",
                "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", time, "algbw",
                "busbw", "#wrong", ts.c_str());
  out += StrPrintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s%s\n", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)", "", ts_unit.c_str());
  return out;
}

std::string FormatRow(const Row& row, bool cputime) {
  std::string out = StrPrintf("%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count,
                           std::string(Name(row.type)).c_str(), row.redop.c_str(), row.root) +
                    FormatMeasurement(row.out_of_place, cputime) +
                    FormatMeasurement(row.in_place, cputime);
  if (!row.timestamp.empty()) out += StrPrintf("%21s", row.timestamp.c_str());
  return out + "\n";
}

Summary Summarize(const std::vector<Row>& rows, int nranks) {
  Summary s;
  double total = 0;
  size_t measurements = 0;
  for (const Row& row : rows) {
    for (const bool in_place : {false, true}) {
      const Measurement& m = in_place ? row.in_place : row.out_of_place;
      // nccl-tests sums its per-process error counters over all processes.
      if (m.wrong > 0) s.out_of_bounds += nranks;
      total += m.busbw;
      ++measurements;
      Summary::Peak* peak = nullptr;
      for (Summary::Peak& p : s.peaks) {
        if (p.collective == row.collective) peak = &p;
      }
      if (peak == nullptr) {
        s.peaks.push_back({row.collective, m.busbw, row.bytes, in_place});
      } else if (m.busbw > peak->busbw) {
        *peak = {row.collective, m.busbw, row.bytes, in_place};
      }
    }
  }
  s.avg_busbw = measurements ? total / static_cast<double>(measurements) : 0;
  return s;
}

std::string FormatSummary(const Summary& s) {
  std::string out =
      StrPrintf("# Out of bounds values : %lld %s\n", static_cast<long long>(s.out_of_bounds),
             s.out_of_bounds ? "FAILED" : "OK");
  out += StrPrintf("# Avg bus bandwidth    : %g \n", s.avg_busbw);
  out += "#\n";
  for (const Summary::Peak& p : s.peaks) {
    out +=
        StrPrintf("# Peak bus bandwidth   : %.2f GB/s at %zu (%s, %s)\n", p.busbw, p.bytes,
               std::string(Name(p.collective)).c_str(), p.in_place ? "in-place" : "out-of-place");
  }
  return out;
}

std::string FormatJson(const PerfOptions& o, int nranks, const std::vector<Row>& rows,
                       const Summary& s) {
  std::string out = "{\n";
  out += StrPrintf("  \"nranks\": %d,\n", nranks);
  out += StrPrintf(
      "  \"options\": {\"minbytes\": %zu, \"maxbytes\": %zu, \"stepbytes\": %zu, "
      "\"stepfactor\": %zu, \"iters\": %d, \"warmup_iters\": %d, \"agg_iters\": %d, "
      "\"check\": %d, \"blocking\": %d, \"back_to_back\": %d, \"warmup_per_size\": %d, "
      "\"average\": %d, \"report_cputime\": %d, \"unalign\": %d},\n",
      o.min_bytes, o.max_bytes, o.step_bytes, o.step_factor, o.iters, o.warmup_iters, o.agg_iters,
      o.check, o.blocking, o.back_to_back ? 1 : 0, o.warmup_per_size ? 1 : 0, o.average,
      o.report_cputime ? 1 : 0, o.unalign);
  out += "  \"rows\": [";
  const char* sep = "\n    ";
  for (const Row& row : rows) {
    out += sep + JsonMeasurement(row, "out-of-place", row.out_of_place);
    sep = ",\n    ";
    out += sep + JsonMeasurement(row, "in-place", row.in_place);
  }
  out += rows.empty() ? "],\n" : "\n  ],\n";
  out += StrPrintf("  \"out_of_bounds\": %lld,\n  \"avg_busbw_gbps\": %s,\n  \"peaks\": [",
                static_cast<long long>(s.out_of_bounds), JsonNumber(s.avg_busbw).c_str());
  sep = "";
  for (const Summary::Peak& p : s.peaks) {
    out += sep;
    out += StrPrintf(
        "{\"collective\": \"%s\", \"busbw_gbps\": %s, \"size\": %zu, "
        "\"placement\": \"%s\"}",
        std::string(Name(p.collective)).c_str(), JsonNumber(p.busbw).c_str(), p.bytes,
        p.in_place ? "in-place" : "out-of-place");
    sep = ", ";
  }
  out += "]\n}\n";
  return out;
}

}  // namespace loom::perf
