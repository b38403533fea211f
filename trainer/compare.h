// Comparing runs: per-step losses (JSON written by --losses) and step-0
// gradients (files written by --dump-grads), exactly or within a tolerance.
#pragma once

#include <string>
#include <vector>

#include "loom/status.hpp"

namespace loom::train {

// The "losses" array of a --losses file.
Result<std::vector<double>> ReadLosses(const std::string& path);

// OK when both runs have the same number of steps and every |a - b| <= tol
// (tol 0: identical values). *report says the largest difference.
Status CompareLosses(const std::vector<double>& a, const std::vector<double>& b, double tol,
                     std::string* report);

// Gradient records from --dump-grads files (any number, e.g. one per rank).
// Every reference element must appear in some candidate file, and every
// candidate value must be within tol * (largest |reference| of its tensor)
// (tol 0: identical). *report names the worst tensor.
Status CompareGrads(const std::vector<std::string>& ref_files,
                    const std::vector<std::string>& cand_files, double tol, std::string* report);

}  // namespace loom::train
