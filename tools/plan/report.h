// What `loom plan` prints: the text report (ranked table, recommendation and
// its rule, the recommended layout's collectives, the ZeRO-3 traffic figure,
// infeasible layouts with why) and its JSON form (schema "loom-plan/1",
// docs/PLAN.md). Pure functions of the input and the plan.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tools/plan/options.h"
#include "tools/plan/plan.h"
#include "topology/json.h"

namespace loom::tools::plan {

std::string RenderPlanText(const PlanOptions& o, const Plan& plan);
json::Value RenderPlanJson(const PlanOptions& o, const Plan& plan);

// The lines `loom-train --report-bytes` prints (schema loom-train-bytes/1),
// found in any text: a launcher's prefix before the '{' and other lines are
// skipped. Ranks in rank order. InvalidArgument when none is there, a rank
// repeats, or a rank's steps did not all move the same bytes.
Result<std::vector<TrainerRank>> ParseTrainerReport(std::string_view text);

// One line per difference between predicted and measured ranks (operations
// and bytes per group, model-state bytes); empty when they are equal.
std::vector<std::string> CompareTrainer(const std::vector<TrainerRank>& predicted,
                                        const std::vector<TrainerRank>& measured);

// loom-train's exact traffic and memory per rank; with measured (may be
// null), the measured figure beside each and the differences.
std::string RenderTrainerText(const std::vector<TrainerRank>& predicted, const std::vector<TrainerRank>* measured,
                              const std::vector<std::string>& differences);
json::Value RenderTrainerJson(const std::vector<TrainerRank>& predicted, const std::vector<TrainerRank>* measured,
                              const std::vector<std::string>& differences);

}  // namespace loom::tools::plan
