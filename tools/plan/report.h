// What `loom plan` prints: the text report (ranked table, recommendation and
// its rule, the recommended layout's collectives, the ZeRO-3 traffic figure,
// infeasible layouts with why) and its JSON form (schema "loom-plan/1",
// docs/PLAN.md). Pure functions of the input and the plan.
#pragma once

#include <string>

#include "tools/plan/options.h"
#include "tools/plan/plan.h"
#include "topology/json.h"

namespace loom::tools::plan {

std::string RenderPlanText(const PlanOptions& o, const Plan& plan);
json::Value RenderPlanJson(const PlanOptions& o, const Plan& plan);

}  // namespace loom::tools::plan
