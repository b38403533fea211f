// `loom plan`: the parallel layout for a model on a cluster (docs/PLAN.md).
#include <cstdio>

#include "tools/commands.h"
#include "tools/plan/options.h"
#include "tools/plan/plan.h"
#include "tools/plan/report.h"
#include "topology/json.h"

namespace loom::tools {

int PlanMain(int argc, char** argv) {
  auto parsed = plan::ParsePlanOptions(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "loom plan: %s\n", parsed.status().message().c_str());
    return 2;
  }
  const plan::PlanOptions& o = *parsed;
  if (o.help) {
    std::fputs(plan::kPlanUsage, stdout);
    return 0;
  }
  const plan::Plan p = plan::MakePlan(o.input);
  if (o.json) {
    std::fputs(json::Dump(plan::RenderPlanJson(o, p)).c_str(), stdout);
  } else {
    std::fputs(plan::RenderPlanText(o, p).c_str(), stdout);
  }
  return 0;
}

}  // namespace loom::tools
