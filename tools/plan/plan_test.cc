// `loom plan`: the reference figures of issue 49 reproduced, the rules as
// scenarios, the 3D-vs-ZeRO-3 crossover, and the command line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/plan/options.h"
#include "tools/plan/plan.h"
#include "tools/plan/report.h"

namespace loom::tools::plan {
namespace {

Result<PlanOptions> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "plan");
  return ParsePlanOptions(static_cast<int>(args.size()), args.data());
}

PlanOptions MustParse(std::vector<const char*> args) {
  auto r = Parse(std::move(args));
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : PlanOptions{};
}

const Layout& Recommended(const Plan& p) {
  static const Layout kNone{0, 0, 0, 0, false, false};
  return p.recommended < 0 ? kNone : p.feasible[static_cast<size_t>(p.recommended)].layout;
}

// --- The seed figures ------------------------------------------------------

TEST(PlanFigures, Gpt3FullFp32AdamIs2Point8TB) {
  PlanOptions o = MustParse({"--params", "175B", "--dtype", "fp32", "--gpus", "1", "--recompute", "on"});
  const Estimate e = Evaluate(o.input, Layout{1, 1, 1, 0, true, false});
  EXPECT_DOUBLE_EQ(e.mem.params, 700e9);
  EXPECT_DOUBLE_EQ(e.mem.grads, 700e9);
  EXPECT_DOUBLE_EQ(e.mem.optimizer, 1400e9);
  EXPECT_DOUBLE_EQ(e.mem.params + e.mem.grads + e.mem.optimizer, 2.8e12);
  EXPECT_NE(e.infeasible.find("over memory"), std::string::npos);
}

TEST(PlanFigures, FineTuneRuleIs20BytesPerParameter) {
  // bf16 weights 2 + bf16 gradients 2 + fp32 gradients 4 + fp32 master 4 +
  // Adam 8 = 20n GB for an n-billion model.
  PlanOptions o = MustParse({"--params", "7B", "--gpus", "1"});
  const Estimate e = Evaluate(o.input, Layout{1, 1, 1, 0, false, false});
  EXPECT_DOUBLE_EQ(e.mem.params + e.mem.grads + e.mem.optimizer, 140e9);
  const StateBytes b = BytesPerParam(o.input.train);
  EXPECT_EQ(b.params + b.grads + b.optimizer, 20);
  // Without the fp32 gradient copy: the ZeRO paper's 16 bytes (2 + 2 + 12).
  o.input.train.fp32_grads = false;
  const StateBytes z = BytesPerParam(o.input.train);
  EXPECT_EQ(z.params + z.grads + z.optimizer, 16);
}

TEST(PlanFigures, Zero3TrafficOf65BOn10Gbit) {
  const Zero3Figure z = Zero3Traffic(65e9, 10e9 / 8);
  EXPECT_DOUBLE_EQ(z.quoted_bytes, 195e9);
  EXPECT_DOUBLE_EQ(z.quoted_bytes * 8, 1560e9);  // bits
  EXPECT_DOUBLE_EQ(z.quoted_s, 156);
  EXPECT_DOUBLE_EQ(z.bf16_bytes, 390e9);
  EXPECT_DOUBLE_EQ(z.bf16_s, 312);
  EXPECT_DOUBLE_EQ(z.fp32_bytes, 780e9);
  EXPECT_DOUBLE_EQ(z.fp32_s, 624);
}

TEST(PlanFigures, Zero3LayoutMovesThreeTimesTheParametersPerMicroBatch) {
  // One micro-batch per step: 2 all-gathers + 1 reduce-scatter, each
  // (DP-1)/DP of the bf16 parameters (gradients reduced in bf16 here).
  PlanOptions o = MustParse({"--params", "65B", "--gpus", "64", "--net", "10gbit", "--global-batch", "64",
                             "--fp32-grads", "off"});
  const Estimate e = Evaluate(o.input, Layout{64, 1, 1, 3, true, false});
  ASSERT_EQ(e.micro_batches, 1);
  EXPECT_NEAR(e.inter_bytes, 3 * 65e9 * 2 * 63.0 / 64, 1e3);
}

TEST(PlanFigures, TextShowsQuotedAndCorrectedZero3Figures) {
  PlanOptions o = MustParse({"--params", "65B", "--gpus", "64", "--gpus-per-node", "8", "--gpu-mem", "80G", "--net",
                             "10gbit"});
  const std::string text = RenderPlanText(o, MakePlan(o.input));
  EXPECT_NE(text.find("195 GB = 1560 Gb -> 156 s"), std::string::npos) << text;
  EXPECT_NE(text.find("390 GB -> 312 s"), std::string::npos) << text;
  EXPECT_NE(text.find("780 GB -> 624 s"), std::string::npos) << text;
  EXPECT_NE(text.find("recommended: "), std::string::npos);
  EXPECT_NE(text.find("rule: "), std::string::npos);
}

// BLOOM's measured runs (bigscience tr11-176B-ml chronicles-prequel, bf16,
// 80 GB A100, max memory of the GPUs with the embedding): the shapes of
// those runs, sequence 2048, micro-batch 1, global batch 2048,
// recomputation on, ZeRO-1 over DP.
struct BloomRow {
  const char* name;
  int layers;
  int heads;
  int gpus, dp, tp, pp;
  double measured_gb;
};

class BloomRows : public ::testing::TestWithParam<BloomRow> {};

TEST_P(BloomRows, MemoryWithin15Percent) {
  const BloomRow& r = GetParam();
  const std::string layers = std::to_string(r.layers), heads = std::to_string(r.heads),
                    gpus = std::to_string(r.gpus);
  PlanOptions o = MustParse({"--layers", layers.c_str(), "--hidden", "14400", "--heads", heads.c_str(), "--vocab",
                             "250880", "--seq", "2048", "--global-batch", "2048", "--micro-batch", "1", "--gpus",
                             gpus.c_str(), "--gpu-mem", "80G", "--dtype", "bf16", "--recompute", "on"});
  const Estimate e = Evaluate(o.input, Layout{r.dp, r.tp, r.pp, r.dp > 1 ? 1 : 0, true, false});
  ASSERT_EQ(e.infeasible, "");
  const double predicted = e.mem.total() / kGB;
  std::printf("%s: predicted %.1f GB (params %.1f, grads %.1f, optimizer %.1f, activations %.1f, other %.1f), "
              "measured %.0f GB, %+.1f%%\n",
              r.name, predicted, e.mem.params / kGB, e.mem.grads / kGB, e.mem.optimizer / kGB,
              e.mem.activations / kGB, (e.mem.buffers + e.mem.reserve) / kGB, r.measured_gb,
              100 * (predicted - r.measured_gb) / r.measured_gb);
  EXPECT_NEAR(predicted, r.measured_gb, 0.15 * r.measured_gb) << r.name << ": predicted " << predicted;
}

INSTANTIATE_TEST_SUITE_P(Bloom, BloomRows,
                         ::testing::Values(BloomRow{"20B_8gpu_tp8", 8, 32, 8, 1, 8, 1, 68},
                                           BloomRow{"200B_80gpu_tp8_pp10", 80, 96, 80, 1, 8, 10, 75},
                                           BloomRow{"200B_160gpu_dp2_tp8_pp10", 80, 96, 160, 2, 8, 10, 53}),
                         [](const auto& info) { return std::string(info.param.name); });

// --- The rules as scenarios ---------------------------------------------

Plan PlanFor(std::vector<const char*> args) {
  return MakePlan(MustParse(std::move(args)).input);
}

TEST(PlanRules, TensorParallelismNeverCrossesNodes) {
  const Plan p = PlanFor({"--params", "175B", "--gpus", "64", "--net", "ib:400gbit"});
  for (const Estimate& e : p.feasible) EXPECT_LE(e.layout.tp, 8) << Describe(e.layout);
  bool refused = false;
  for (const Estimate& e : p.infeasible) refused |= e.infeasible.find("TP=16 crosses nodes") != std::string::npos;
  EXPECT_TRUE(refused);
}

TEST(PlanRules, TrueLargeModelTakesTp8ThenPpThenDp) {
  const Plan p = PlanFor({"--params", "175B", "--gpus", "64", "--net", "ib:400gbit"});
  const Layout& l = Recommended(p);
  EXPECT_EQ(l.tp, 8);
  EXPECT_GT(l.pp, 1);
  EXPECT_FALSE(l.offload);
  EXPECT_NE(p.rule.find("TP=8 inside the NVLink node first, then PP="), std::string::npos) << p.rule;
}

TEST(PlanRules, WithoutNvlinkPipelineReplacesTensorParallelism) {
  const Plan p = PlanFor({"--params", "13B", "--gpus", "64", "--intra", "pcie:32GB/s", "--net", "100gbit"});
  const Layout& l = Recommended(p);
  EXPECT_EQ(l.tp, 1);
  EXPECT_GT(l.pp, 1);
  EXPECT_NE(p.rule.find("without NVLink"), std::string::npos) << p.rule;
  // The same model with NVLink takes TP.
  const Plan nv = PlanFor({"--params", "13B", "--gpus", "64", "--net", "100gbit"});
  EXPECT_GT(Recommended(nv).tp, 1) << nv.rule;
}

TEST(PlanRules, ModelThatFitsOneGpuUsesDdp) {
  const Plan p = PlanFor({"--params", "1.3B", "--gpus", "8"});
  const Layout& l = Recommended(p);
  EXPECT_EQ(l.tp, 1);
  EXPECT_EQ(l.pp, 1);
  EXPECT_LE(l.zero, 1);  // DDP, or ZeRO-1 at the same traffic
  EXPECT_NE(p.rule.find("the model fits one GPU"), std::string::npos) << p.rule;
}

TEST(PlanRules, SevenBillionNeedsZeroNot3d) {
  // A fine-tune on one 8-GPU node with activation checkpointing.
  const Plan p = PlanFor({"--params", "7B", "--gpus", "8", "--global-batch", "64", "--micro-batch", "8",
                          "--recompute", "on"});
  const Layout& l = Recommended(p);
  EXPECT_EQ(l.tp, 1);
  EXPECT_EQ(l.pp, 1);
  EXPECT_GE(l.zero, 1);
  EXPECT_NE(p.rule.find("shards them over DP=8"), std::string::npos) << p.rule;
}

TEST(PlanRules, FastNetworkAllowsZero3SlowNetworkDoesNot) {
  const Plan fast = PlanFor({"--params", "65B", "--gpus", "64", "--net", "ib:8x400gbit", "--global-batch", "512",
                             "--micro-batch", "8"});
  EXPECT_EQ(Recommended(fast).zero, 3) << fast.rule;
  EXPECT_EQ(Recommended(fast).tp, 1);
  const Plan slow = PlanFor({"--params", "65B", "--gpus", "64", "--net", "10gbit", "--global-batch", "512",
                             "--micro-batch", "8"});
  EXPECT_NE(Recommended(slow).zero, 3) << slow.rule;
  EXPECT_GT(Recommended(slow).tp, 1) << slow.rule;
}

TEST(PlanRules, SlowNetworkLittleMemoryTakesDpPpTpZero1) {
  const Plan p = PlanFor({"--params", "65B", "--gpus", "128", "--gpu-mem", "40G", "--net", "10gbit"});
  const Layout& l = Recommended(p);
  EXPECT_GT(l.dp, 1);
  EXPECT_EQ(l.tp, 8);
  EXPECT_GT(l.pp, 1);
  EXPECT_EQ(l.zero, 1);
  EXPECT_NE(p.rule.find("with ZeRO-1"), std::string::npos) << p.rule;
}

TEST(PlanRules, OneGpuTooSmallOffloads) {
  const Plan p = PlanFor({"--params", "7B", "--gpus", "1"});
  EXPECT_TRUE(Recommended(p).offload);
  EXPECT_NE(p.rule.find("ZeRO-Offload"), std::string::npos) << p.rule;
  // Offload is not recommended where the GPUs alone suffice.
  EXPECT_FALSE(Recommended(PlanFor({"--params", "7B", "--gpus", "8"})).offload);
}

TEST(PlanRules, InfeasibleLayoutsSayWhy) {
  const Plan p = PlanFor({"--params", "65B", "--gpus", "64", "--net", "10gbit"});
  std::vector<std::string> reasons = {"over memory by", "crosses nodes", "does not divide the 80 layers",
                                      "not combined with PP"};
  for (const std::string& r : reasons) {
    bool seen = false;
    for (const Estimate& e : p.infeasible) seen |= e.infeasible.find(r) != std::string::npos;
    EXPECT_TRUE(seen) << r;
  }
  const Plan deep = PlanFor({"--layers", "4", "--hidden", "1024", "--heads", "16", "--gpus", "8"});
  bool too_deep = false;
  for (const Estimate& e : deep.infeasible) too_deep |= e.infeasible == "PP=8 is deeper than the 4 layers";
  EXPECT_TRUE(too_deep);
}

// At a fixed global batch, ZeRO-3 gathers the parameters for every
// micro-batch while its compute per GPU shrinks with the GPU count; 3D
// parallelism's traffic per GPU shrinks with it. Each at its best
// micro-batch. In this model ZeRO-3 is never ahead (it pays either the
// recomputation or one gather per micro-batch) but 3D's lead grows with the
// GPU count, to more than 2x at 4096 GPUs.
TEST(PlanRules, ThreeDPullsAwayFromZero3AsGpusGrow) {
  auto best = [](int gpus, bool zero3) {
    double best_tokens = 0;
    for (int mb = 1; mb * gpus <= 8192; mb *= 2) {
      const std::string g = std::to_string(gpus), m = std::to_string(mb);
      const Plan p = PlanFor({"--params", "7B", "--gpus", g.c_str(), "--net", "ib:8x200gbit", "--global-batch",
                              "8192", "--micro-batch", m.c_str(), "--tflops", "150"});
      for (const Estimate& e : p.feasible) {
        const Layout& l = e.layout;
        const bool is_zero3 = l.zero == 3 && l.tp == 1 && l.pp == 1 && !l.offload;
        const bool is_3d = l.tp > 1 && l.pp > 1 && !l.offload;
        if (zero3 ? is_zero3 : is_3d) best_tokens = std::max(best_tokens, e.tokens_per_gpu_s);
      }
    }
    return best_tokens;
  };
  std::vector<double> ratio;
  for (int gpus : {64, 256, 1024, 4096}) {
    const double z3 = best(gpus, true), d3 = best(gpus, false);
    ASSERT_GT(d3, 0) << gpus;
    ASSERT_GT(z3, 0) << gpus;
    ratio.push_back(d3 / z3);
    std::printf("%5d GPUs: tokens/s per GPU, 3D %.0f, ZeRO-3 %.0f, ratio %.2f\n", gpus, d3, z3, d3 / z3);
  }
  EXPECT_LT(ratio.front(), 1.3);  // close at 64 GPUs
  EXPECT_GT(ratio.back(), 2.0);   // 3D far ahead at 4096
  for (size_t i = 1; i < ratio.size(); ++i) EXPECT_GE(ratio[i], ratio[i - 1]);
}

// --- Command line ----------------------------------------------------------

TEST(PlanOptions, UnitsAndGrammar) {
  EXPECT_DOUBLE_EQ(*ParseCount("65B"), 65e9);
  EXPECT_DOUBLE_EQ(*ParseCount("1.3b"), 1.3e9);
  EXPECT_DOUBLE_EQ(*ParseCount("6700M"), 6.7e9);
  EXPECT_DOUBLE_EQ(*ParseCount("175e9"), 175e9);
  EXPECT_DOUBLE_EQ(*ParseBytes("80G"), 80e9);
  EXPECT_DOUBLE_EQ(*ParseBytes("24GiB"), 24.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(*ParseRate("10gbit"), 1.25);
  EXPECT_DOUBLE_EQ(*ParseRate("400Gb/s"), 50);
  EXPECT_DOUBLE_EQ(*ParseRate("300GB/s"), 300);
  EXPECT_FALSE(ParseRate("10").ok());
  PlanOptions o = MustParse({"--params", "7B", "--gpus", "16", "--net", "eth:2x100gbit", "--intra", "pcie:16GB/s"});
  EXPECT_DOUBLE_EQ(o.input.cluster.links.inter.bandwidth_gbs, 25);
  EXPECT_DOUBLE_EQ(o.input.cluster.links.inter.latency_us, 20);
  EXPECT_DOUBLE_EQ(o.input.cluster.links.intra.bandwidth_gbs, 16);
  EXPECT_FALSE(o.input.cluster.nvlink);
}

TEST(PlanOptions, BadInputNamesTheFlagAndWhatIsAccepted) {
  struct Case {
    std::vector<const char*> args;
    const char* expect;
  };
  const Case cases[] = {
      {{"--params", "65X", "--gpus", "8"}, "--params '65X': not a parameter count; accepted:"},
      {{"--params", "65B", "--gpus", "8", "--gpu-mem", "lots"}, "--gpu-mem 'lots': not a size; accepted:"},
      {{"--params", "65B", "--gpus", "8", "--net", "fast"}, "--net 'fast': accepted:"},
      {{"--params", "65B", "--gpus", "8", "--intra", "infiniband"}, "--intra 'infiniband': accepted:"},
      {{"--params", "65B", "--gpus", "0"}, "--gpus '0': not a whole number"},
      {{"--params", "65B", "--gpus", "12", "--gpus-per-node", "8"}, "--gpus 12: not a multiple of --gpus-per-node 8"},
      {{"--params", "65B", "--gpus", "8", "--dtype", "int8"}, "--dtype 'int8': accepted: fp32, bf16 or fp16"},
      {{"--gpus", "8"}, "no model"},
      {{"--params", "65B"}, "--gpus is required"},
      {{"--layers", "4", "--params", "1B", "--gpus", "8"}, "--layers, --hidden and --heads go together"},
      {{"--params", "65B", "--gpus", "8", "--bogus", "1"}, "unknown flag --bogus"},
  };
  for (const Case& c : cases) {
    auto r = Parse(c.args);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace loom::tools::plan
