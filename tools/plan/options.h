// `loom plan`'s command line: the model, the training settings and the
// cluster, parsed into a PlanInput. Pure apart from --topo, which reads a file.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tools/plan/plan.h"

namespace loom::tools::plan {

// A link rate read from `loom perf --json` or `loom doctor --json` (--rates).
struct MeasuredRate {
  LinkClass link = LinkClass::kIntra;
  double gbs = 0;    // GB/s (1e9 bytes per second)
  std::string what;  // where in the file it came from, for the report
};

struct PlanOptions {
  PlanInput input;
  bool json = false;
  bool all = false;  // every layout, not the first rows
  int top = 10;      // feasible rows shown
  bool help = false;
  bool tflops_given = false;
  std::string topo_file;  // where the intra/inter link costs came from, when given
  std::vector<MeasuredRate> rates;  // --rates, in the order given (applied last)
  bool layout_given = false;        // --layout: evaluate this one layout, no search
  Layout layout;
  bool trainer = false;  // --model loom-train: trainer_model decides the model and training
  TrainerModel trainer_model;
  std::string check_trainer;  // --check-trainer FILE: loom-train --report-bytes output
};

// "65B", "1.3b", "175e9", "6700M" -> parameters. InvalidArgument otherwise.
Result<double> ParseCount(std::string_view text);
// "80G", "80GB", "80GiB", "1.5T", "512M" -> bytes (G = 1e9, GiB = 2^30).
Result<double> ParseBytes(std::string_view text);
// A link rate: "10gbit", "400Gb/s", "400gbps" (bits), "300GB/s", "25GBps"
// (bytes) -> GB/s (1e9 bytes per second).
Result<double> ParseRate(std::string_view text);

// "dp=2,tp=2,pp=1,zero=1[,recompute=on][,offload=on]"; a degree left out is 1.
Result<Layout> ParseLayout(std::string_view text);

// The rate in one `loom perf --json` or `loom doctor --json` document.
// perf: the peak bus bandwidth of all_reduce (of any collective without
// one), a link inside a node unless `link` says "inter" (a run across
// hosts); doctor: the slowest stream its bandwidth check measured between
// hosts, the inter-node network. link: "", "intra" or "inter".
Result<MeasuredRate> ParseRatesJson(std::string_view text, std::string_view link);

// Parses argv[1..]; an error is one line naming the flag, what was wrong
// and what is accepted (the caller prints it and exits 2).
Result<PlanOptions> ParsePlanOptions(int argc, const char* const* argv);

extern const char kPlanUsage[];

}  // namespace loom::tools::plan
