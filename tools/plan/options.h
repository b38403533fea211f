// `loom plan`'s command line: the model, the training settings and the
// cluster, parsed into a PlanInput. Pure apart from --topo, which reads a file.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "tools/plan/plan.h"

namespace loom::tools::plan {

struct PlanOptions {
  PlanInput input;
  bool json = false;
  bool all = false;  // every layout, not the first rows
  int top = 10;      // feasible rows shown
  bool help = false;
  bool tflops_given = false;
  std::string topo_file;  // where the intra/inter link costs came from, when given
};

// "65B", "1.3b", "175e9", "6700M" -> parameters. InvalidArgument otherwise.
Result<double> ParseCount(std::string_view text);
// "80G", "80GB", "80GiB", "1.5T", "512M" -> bytes (G = 1e9, GiB = 2^30).
Result<double> ParseBytes(std::string_view text);
// A link rate: "10gbit", "400Gb/s", "400gbps" (bits), "300GB/s", "25GBps"
// (bytes) -> GB/s (1e9 bytes per second).
Result<double> ParseRate(std::string_view text);

// Parses argv[1..]; an error is one line naming the flag, what was wrong
// and what is accepted (the caller prints it and exits 2).
Result<PlanOptions> ParsePlanOptions(int argc, const char* const* argv);

extern const char kPlanUsage[];

}  // namespace loom::tools::plan
