// `loom plan`: the parallel layout for a model on a cluster (docs/PLAN.md).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/commands.h"
#include "tools/plan/options.h"
#include "tools/plan/plan.h"
#include "tools/plan/report.h"
#include "topology/json.h"

namespace loom::tools {
namespace {

// --layout: the one layout, evaluated, as a plan of one row (loom-train's
// own refusal first, under --model loom-train).
plan::Plan GivenLayout(const plan::PlanOptions& o) {
  plan::Plan p;
  plan::Estimate e = plan::Evaluate(o.input, o.layout);
  if (o.trainer) {
    if (std::string why = plan::TrainerProblem(o.trainer_model, o.layout); !why.empty()) e.infeasible = why;
  }
  if (!e.infeasible.empty()) {
    p.rule = "the layout given by --layout cannot run: " + e.infeasible;
    p.infeasible.push_back(std::move(e));
    return p;
  }
  p.feasible.push_back(std::move(e));
  p.recommended = 0;
  p.rule = "given by --layout (no search)";
  return p;
}

}  // namespace

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
  const plan::Plan p = o.layout_given ? GivenLayout(o) : plan::MakePlan(o.input);
  if (!o.trainer || !o.layout_given) {
    std::fputs(o.json ? json::Dump(plan::RenderPlanJson(o, p)).c_str() : plan::RenderPlanText(o, p).c_str(), stdout);
    return 0;
  }
  // loom-train's exact figures for the layout, against its own counters
  // when --check-trainer gives them. A layout it refuses has none (the
  // plan's rule says why).
  if (!plan::TrainerProblem(o.trainer_model, o.layout).empty()) {
    std::fputs(o.json ? json::Dump(plan::RenderPlanJson(o, p)).c_str() : plan::RenderPlanText(o, p).c_str(), stdout);
    return o.check_trainer.empty() ? 0 : 1;
  }
  const std::vector<plan::TrainerRank> predicted = plan::PredictTrainer(o.trainer_model, o.layout);
  std::vector<plan::TrainerRank> measured;
  std::vector<std::string> differences;
  if (!o.check_trainer.empty()) {
    std::ifstream in(o.check_trainer);
    std::ostringstream text;
    text << in.rdbuf();
    auto parsed = in ? plan::ParseTrainerReport(text.str()) : Result<std::vector<plan::TrainerRank>>(
                                                                   InvalidArgument("cannot read the file"));
    if (!parsed.ok()) {
      std::fprintf(stderr, "loom plan: --check-trainer '%s': %s\n", o.check_trainer.c_str(),
                   parsed.status().message().c_str());
      return 2;
    }
    measured = std::move(parsed).value();
    differences = plan::CompareTrainer(predicted, measured);
  }
  const std::vector<plan::TrainerRank>* m = o.check_trainer.empty() ? nullptr : &measured;
  if (o.json) {
    json::Value doc = plan::RenderPlanJson(o, p);
    doc.object().emplace_back("trainer", plan::RenderTrainerJson(predicted, m, differences));
    std::fputs(json::Dump(doc).c_str(), stdout);
  } else {
    std::fputs((plan::RenderPlanText(o, p) + plan::RenderTrainerText(predicted, m, differences)).c_str(), stdout);
  }
  return differences.empty() ? 0 : 1;
}

}  // namespace loom::tools
