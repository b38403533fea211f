// `loom perf --plot`: bus bandwidth and time against message size as a
// self-contained SVG picture, for the run just made or for saved --json
// runs (one line per collective per run). Pure functions except
// ReadPlotRun, which reads one file.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/status.hpp"
#include "tools/perf/report.h"

namespace loom::perf {

// One measured point of a run.
struct PlotSample {
  std::string collective;  // "all_reduce", ...
  std::string variant;     // "float sum root 0": what else tells rows of one collective apart
  bool in_place = false;
  double bytes = 0;  // the "size" column
  double busbw_gbps = 0;
  double time_us = 0;
};

// A run to draw: its label ("" for the live run), rank count and samples.
struct PlotRun {
  std::string label;
  int nranks = 0;
  std::vector<PlotSample> samples;
};

// The rows of the run just made.
PlotRun PlotRunFromRows(std::string label, int nranks, const std::vector<Row>& rows);

// Parses what `loom perf --json` wrote. kInvalidArgument, naming `label`,
// for text that is not JSON or has no "rows" array of that form.
Result<PlotRun> ParsePlotRun(std::string_view json_text, std::string label);

// Reads a --json file; the label is its name without directory and ".json".
Result<PlotRun> ReadPlotRun(const std::string& path);

// One line of the picture: out-of-place samples of one collective (and
// variant) of one run, sorted by size; repeated sizes (-N) averaged; sizes
// of 0 bytes left out (the x axis is logarithmic).
struct PlotPoint {
  double bytes = 0;
  double busbw_gbps = 0;
  double time_us = 0;
};
struct PlotSeries {
  std::string label;  // "[run ]collective[ variant]": the variant only where a run has several
  std::vector<PlotPoint> points;
};
std::vector<PlotSeries> BuildSeries(const std::vector<PlotRun>& runs);

// Tick values base^k for the integers k with lo <= base^k <= hi, every
// stride-th power so that at most max_ticks remain (the first tick is kept).
// lo > 0, hi >= lo, base > 1, max_ticks >= 1.
std::vector<double> LogTicks(double lo, double hi, double base, int max_ticks);

// A byte count as a tick label: 8, 512, 1K, 64K, 1M, 2G (powers of 1024).
std::string FormatBytesLabel(double bytes);

// The picture: two panels over one logarithmic size axis, bus bandwidth
// (GB/s, linear) above time (us, logarithmic), one coloured line with
// markers per series, and a legend. Self-contained SVG 1.1: no scripts, no
// external fonts or images. An empty series list draws empty axes.
std::string RenderSvg(const std::vector<PlotSeries>& series, const std::string& title);

// RenderSvg(BuildSeries(runs), a title naming the rank counts).
std::string RenderPlot(const std::vector<PlotRun>& runs);

}  // namespace loom::perf
