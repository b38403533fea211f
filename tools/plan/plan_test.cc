// `loom plan`: the reference figures of issue 49 reproduced, the rules as
// scenarios, the 3D-vs-ZeRO-3 crossover, and the command line.
#include <gtest/gtest.h>

#include <fstream>
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

// At a fixed global batch, ZeRO-3's compute per GPU shrinks with the GPU
// count while each of its per-layer gathers and reductions spans every GPU
// (ring latency grows with the ranks): hidden behind compute at tens of
// GPUs, the step's critical path at thousands. 3D keeps its collectives in
// groups of a node or a few. Each at its best micro-batch.
TEST(PlanRules, ThreeDOvertakesZero3AsGpusGrow) {
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
    ratio.push_back(z3 / d3);
    std::printf("%5d GPUs: tokens/s per GPU, ZeRO-3 %.0f, 3D %.0f, ZeRO-3 / 3D %.2f\n", gpus, z3,
                d3, z3 / d3);
  }
  EXPECT_GE(ratio.front(), 1.0);  // ZeRO-3 at least even at 64 GPUs
  EXPECT_LT(ratio.back(), 1.0);   // 3D ahead at 4096
}

// ZeRO-3's traffic overlaps its compute but for one layer's gather and
// reduction per micro-batch; past the compute it is the step. A pipeline's
// data-parallel reduction waits for the flush.
TEST(PlanRules, Zero3HidesItsTrafficBehindCompute) {
  const std::vector<const char*> args = {
      "--params", "7B", "--gpus", "64", "--global-batch", "8192", "--micro-batch", "2", "--net"};
  auto with_net = [&](const char* net) {
    std::vector<const char*> a = args;
    a.push_back(net);
    return MustParse(a).input;
  };
  const Estimate fast = Evaluate(with_net("ib:8x200gbit"), Layout{64, 1, 1, 3, false, false});
  ASSERT_EQ(fast.infeasible, "");
  EXPECT_LT(fast.comm_s, fast.compute_s);
  EXPECT_GT(fast.hidden_s, 0.9 * fast.comm_s);
  EXPECT_DOUBLE_EQ(fast.step_s, fast.compute_s + fast.comm_s - fast.hidden_s);
  const Estimate slow = Evaluate(with_net("10gbit"), Layout{64, 1, 1, 3, false, false});
  EXPECT_GT(slow.comm_s, slow.compute_s);
  EXPECT_DOUBLE_EQ(slow.hidden_s, slow.compute_s);
  EXPECT_DOUBLE_EQ(slow.step_s, slow.comm_s);
  EXPECT_EQ(Evaluate(with_net("ib:8x200gbit"), Layout{16, 2, 2, 1, false, false}).hidden_s, 0);
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
      {{"--params", "65B", "--layout", "dp=2,tp=x"}, "--layout 'dp=2,tp=x': accepted: dp=D"},
      {{"--params", "65B", "--gpus", "8", "--layout", "dp=2"}, "--layout: DP x TP x PP = 2 but --gpus 8"},
      {{"--params", "65B", "--gpus", "8", "--micro-batches", "2"}, "are loom-train's: give --model loom-train"},
      {{"--model", "loom-train", "--check-trainer", "x"}, "--check-trainer needs --model loom-train and --layout"},
      {{"--model", "gpt-2", "--gpus", "2"}, "--model 'gpt-2': accepted: loom-train"},
      {{"--model", "loom-train", "--layout", "dp=2", "--dtype", "bf16"}, "loom-train trains in fp32"},
      {{"--params", "65B", "--gpus", "8", "--rates", "/nonexistent.json"}, "--rates '/nonexistent.json': cannot read"},
  };
  for (const Case& c : cases) {
    auto r = Parse(c.args);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }
}

// --- loom-train, exactly (ground truth: tests/plan/plan_trainer_test.sh) ---

const GroupTraffic& GroupOf(const TrainerRank& r, const std::string& name) {
  static const GroupTraffic kNone;
  for (const GroupTraffic& g : r.groups) {
    if (g.group == name) return g;
  }
  ADD_FAILURE() << "no group " << name;
  return kNone;
}

TEST(PlanTrainer, ParametersAreLoomTrainsCount) {
  // loom-train prints params=210304 for its default model.
  EXPECT_EQ(TrainerParams(TrainerModel{}), 210304);
  PlanOptions o = MustParse({"--model", "loom-train", "--layout", "dp=2,zero=1", "--micro-batches", "2"});
  EXPECT_DOUBLE_EQ(o.input.model.params, 210304);
  EXPECT_EQ(o.input.cluster.gpus, 2);
  EXPECT_EQ(o.input.train.micro_batch, 2);  // 8 sequences over DP=2 in 2 micro-batches
  EXPECT_EQ(o.input.train.dtype, Dtype::kFp32);
  // With one rank and no padding the general model's states are the exact ones
  // but for the LM head's separate gradient buffer (V x C floats).
  const Estimate e = Evaluate(o.input, Layout{1, 1, 1, 0, false, false});
  const TrainerRank r = PredictTrainer(TrainerModel{}, Layout{1, 1, 1, 0, false, false}).front();
  EXPECT_DOUBLE_EQ(e.mem.params, static_cast<double>(r.params));
  EXPECT_DOUBLE_EQ(e.mem.grads + 128 * 64 * 4, static_cast<double>(r.grads));
  EXPECT_DOUBLE_EQ(e.mem.optimizer, static_cast<double>(r.optimizer));
  EXPECT_TRUE(r.groups.empty());
}

TEST(PlanTrainer, Zero1ReduceScattersTheBufferAndGathersOneShard) {
  TrainerModel t;
  t.micro_batches = 2;
  const auto ranks = PredictTrainer(t, Layout{2, 1, 1, 1, false, false});
  ASSERT_EQ(ranks.size(), 2u);
  for (const TrainerRank& r : ranks) {
    const GroupTraffic& dp = GroupOf(r, "dp");
    EXPECT_EQ(dp.ops, 26);  // 13 buckets of 16384 floats, as --expect-dp-ops 26 checks
    EXPECT_EQ(dp.reducescatter, 210304 * 4);
    EXPECT_EQ(dp.allgather, 210304 / 2 * 4);
    EXPECT_DOUBLE_EQ(dp.RingBytes(), 210304 * 4 / 2.0 + 210304 / 2 * 4);
    EXPECT_EQ(GroupOf(r, "world").allreduce, 4);
    EXPECT_EQ(r.params, 210304 * 4);
    EXPECT_EQ(r.grads, (210304 + 128 * 64 + 210304 / 2) * 4);
    EXPECT_EQ(r.optimizer, 210304 * 4);  // m and v of half the parameters
  }
  EXPECT_EQ(ranks[1].dp_rank, 1);
}

TEST(PlanTrainer, TensorAndPipelineTrafficPerStage) {
  // tp=2, pp=2, 2 micro-batches of 4 sequences: N = 128 tokens, C = 64.
  TrainerModel t;
  t.micro_batches = 2;
  const auto ranks = PredictTrainer(t, Layout{1, 2, 2, 0, false, false});
  ASSERT_EQ(ranks.size(), 4u);
  const int64_t NC = 128 * 64;
  // First stage: embedding + 2 layers x 4 all-reduces per micro-batch.
  EXPECT_EQ(GroupOf(ranks[0], "tp").ops, 2 * 9);
  EXPECT_EQ(GroupOf(ranks[0], "tp").allreduce, 2 * 9 * NC * 4);
  // Last stage: 2 layers x 4, cross-entropy MAX (N) and SUM (2N), LM head.
  EXPECT_EQ(GroupOf(ranks[2], "tp").ops, 2 * 11);
  EXPECT_EQ(GroupOf(ranks[2], "tp").allreduce, 2 * (8 * NC + 3 * 128 + NC) * 4);
  EXPECT_EQ(ranks[2].pp_rank, 1);
  EXPECT_EQ(ranks[1].tp_rank, 1);
  // 1F1B on 2 stages and 2 micro-batches: 3 exchanges each side.
  EXPECT_EQ(GroupOf(ranks[0], "pp").ops, 3);
  EXPECT_EQ(GroupOf(ranks[3], "pp").ops, 3);
  EXPECT_EQ(GroupOf(ranks[0], "pp").send, 2 * NC * 4);
  EXPECT_EQ(GroupOf(ranks[0], "tie").allreduce, 64 * 64 * 4);
  t.gpipe = true;
  EXPECT_EQ(GroupOf(PredictTrainer(t, Layout{1, 2, 2, 0, false, false})[0], "pp").ops, 4);
}

TEST(PlanTrainer, RefusesWhatLoomTrainRefuses) {
  TrainerModel t;
  EXPECT_NE(TrainerProblem(t, Layout{1, 1, 1, 2, false, false}), "");  // ZeRO-2
  EXPECT_NE(TrainerProblem(t, Layout{1, 3, 1, 0, false, false}), "");  // 3 does not divide 4 heads
  EXPECT_NE(TrainerProblem(t, Layout{1, 1, 8, 0, false, false}), "");  // deeper than 4 layers
  EXPECT_NE(TrainerProblem(t, Layout{3, 1, 1, 0, false, false}), "");  // 8 sequences over 3
  EXPECT_EQ(TrainerProblem(t, Layout{2, 2, 2, 1, false, false}), "");
}

TEST(PlanTrainer, ReportLinesAreParsedAndCompared) {
  TrainerModel t;
  t.micro_batches = 2;
  const auto predicted = PredictTrainer(t, Layout{2, 1, 1, 1, false, false});
  const std::string line =
      R"({"schema": "loom-train-bytes/1", "rank": %d, "dp_rank": %d, "tp_rank": 0, "pp_rank": 0, "dp": 2, )"
      R"("tp": 1, "pp": 1, "zero": 1, "steps": 2, "same_every_step": true, "groups": [{"name": "dp", "size": 2, )"
      R"("ops": 26, "allreduce": 0, "reducescatter": 841216, "allgather": 420608, "send": 0, "bytes": 1261824}, )"
      R"({"name": "world", "size": 2, "ops": 1, "allreduce": 4, "reducescatter": 0, "allgather": 0, "send": 0, )"
      R"("bytes": 4}], "memory": {"params": 841216, "grads": 1294592, "optimizer": 841216}})";
  char r0[1024], r1[1024];
  std::snprintf(r0, sizeof r0, line.c_str(), 0, 0);
  std::snprintf(r1, sizeof r1, line.c_str(), 1, 1);
  // Rank 1 first, behind a launcher's tag, among other output.
  const std::string text = "loom-train: dp=2\n[1] " + std::string(r1) + "\nstep 0\n" + r0 + "\n";
  auto measured = ParseTrainerReport(text);
  ASSERT_TRUE(measured.ok()) << measured.status().message();
  ASSERT_EQ(measured->size(), 2u);
  EXPECT_EQ((*measured)[0].rank, 0);
  EXPECT_TRUE(CompareTrainer(predicted, *measured).empty());
  EXPECT_NE(RenderTrainerText(predicted, &*measured, {}).find("check: EQUAL, 2 ranks"), std::string::npos);
  // One byte off, a missing rank, a repeated rank, uneven steps.
  std::string off = r0;
  off.replace(off.find("841216"), 6, "841217");
  auto bad = ParseTrainerReport(off + "\n" + r1);
  ASSERT_TRUE(bad.ok());
  const auto diff = CompareTrainer(predicted, *bad);
  ASSERT_EQ(diff.size(), 1u);
  EXPECT_EQ(diff[0], "rank 0 dp reduce-scatter bytes: predicted 841216, measured 841217");
  EXPECT_EQ(CompareTrainer(predicted, {(*measured)[0]}).size(), 2u);  // count and "rank 1: not measured"
  EXPECT_FALSE(ParseTrainerReport(std::string(r0) + "\n" + r0).ok());
  std::string uneven = r0;
  uneven.replace(uneven.find("true"), 4, "false");
  EXPECT_NE(ParseTrainerReport(uneven).status().message().find("did not all move the same bytes"),
            std::string::npos);
  EXPECT_FALSE(ParseTrainerReport("no report here\n").ok());
}

TEST(PlanTrainer, LayoutGrammar) {
  auto l = ParseLayout("dp=2,tp=4,pp=3,zero=1,recompute=on");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (Layout{2, 4, 3, 1, true, false}));
  EXPECT_EQ(*ParseLayout("pp=2"), (Layout{1, 1, 2, 0, false, false}));
  for (const char* bad : {"dp=0", "zero=4", "dp", "dp=2,,tp=2", "tp=2,offload=maybe", "ep=2"}) {
    EXPECT_FALSE(ParseLayout(bad).ok()) << bad;
  }
}

// --- --rates: loom perf --json and loom doctor --json ------------------------

// Trimmed from `loom run -np 2 -- loom perf all_reduce -b 1M -e 4M -f 2 --json`.
constexpr const char kPerfJson[] = R"j({
  "nranks": 2,
  "options": {"minbytes": 1048576, "maxbytes": 4194304},
  "rows": [
    {"collective": "all_reduce", "placement": "out-of-place", "size": 1048576, "count": 262144, "busbw_gbps": 14.04},
    {"collective": "all_reduce", "placement": "in-place", "size": 4194304, "count": 1048576, "busbw_gbps": 21.5},
    {"collective": "all_gather", "placement": "in-place", "size": 4194304, "count": 524288, "busbw_gbps": 30.0},
    {"collective": "all_reduce", "placement": "in-place", "size": 8, "count": 2, "busbw_gbps": null}
  ],
  "out_of_bounds": 0, "avg_busbw_gbps": 17.8, "peaks": []
})j";

// Trimmed from `loom doctor --json` on two hosts, without and with --expect 100gbit.
constexpr const char kDoctorPass[] = R"j({"format": "loom-doctor", "version": 1, "mode": "agents",
  "hosts": ["h0", "h1"], "verdict": "PASS", "exit_code": 0, "cause": null, "findings": [
  {"check": "reachability", "number": 3, "status": "PASS", "host": "", "summary": "6 TCP connects succeeded, slowest 0.1 ms", "fix": ""},
  {"check": "bandwidth", "number": 6, "status": "PASS", "host": "", "summary": "2 streams on eth0: 13.96 Gbit/s .. 16.46 Gbit/s (no expected rate: virtual links; pass --expect RATE)", "fix": ""}]})j";
constexpr const char kDoctorSlow[] = R"j({"format": "loom-doctor", "version": 1, "mode": "agents",
  "hosts": ["h0", "h1", "h2"], "verdict": "FAIL", "exit_code": 2, "cause": null, "findings": [
  {"check": "bandwidth", "number": 6, "status": "FAIL", "host": "h0", "summary": "to h1 on eth0: 16.25 Gbit/s, 16% of the expected 100.00 Gbit/s", "fix": "inspect"},
  {"check": "bandwidth", "number": 6, "status": "FAIL", "host": "h2", "summary": "sends at 950 Mbit/s on data0, 1% of the expected 100.00 Gbit/s (every outgoing stream is slow, the others are not)", "fix": "inspect"}]})j";

TEST(PlanRates, PerfPeakAllReduceBusBandwidthIsTheIntraLink) {
  auto r = ParseRatesJson(kPerfJson, "");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->link, LinkClass::kIntra);
  EXPECT_DOUBLE_EQ(r->gbs, 21.5);  // all_reduce's peak, not all_gather's
  EXPECT_NE(r->what.find("all_reduce peak bus bandwidth over 2 ranks at 4194304 bytes"), std::string::npos) << r->what;
  EXPECT_EQ(ParseRatesJson(kPerfJson, "inter")->link, LinkClass::kInter);
  // Without all_reduce rows, the peak of what was measured.
  auto gather = ParseRatesJson(R"j({"nranks": 4, "rows": [{"collective": "all_gather", "size": 1, "busbw_gbps": 3}]})j", "");
  ASSERT_TRUE(gather.ok());
  EXPECT_DOUBLE_EQ(gather->gbs, 3);
  EXPECT_NE(ParseRatesJson(R"j({"nranks": 1, "rows": [{"collective": "all_reduce", "busbw_gbps": 0}]})j", "")
                .status()
                .message()
                .find("one rank measures no link"),
            std::string::npos);
}

TEST(PlanRates, DoctorSlowestStreamIsTheNetwork) {
  auto pass = ParseRatesJson(kDoctorPass, "");
  ASSERT_TRUE(pass.ok()) << pass.status().message();
  EXPECT_EQ(pass->link, LinkClass::kInter);
  EXPECT_DOUBLE_EQ(pass->gbs, 13.96 / 8);
  // Measured rates only: "the expected 100.00 Gbit/s" is not one.
  auto slow = ParseRatesJson(kDoctorSlow, "");
  ASSERT_TRUE(slow.ok());
  EXPECT_DOUBLE_EQ(slow->gbs, 0.95 / 8);
  EXPECT_NE(slow->what.find("slowest of 2 stream rates"), std::string::npos) << slow->what;
  EXPECT_NE(ParseRatesJson(kDoctorPass, "intra").status().message().find("between hosts"), std::string::npos);
  const char* no_streams = R"j({"format": "loom-doctor", "findings": [{"check": "names", "summary": "1.00 Gbit/s"}]})j";
  EXPECT_NE(ParseRatesJson(no_streams, "").status().message().find("no measured stream"), std::string::npos);
  EXPECT_NE(ParseRatesJson(R"j({"hello": 1})j", "").status().message().find("neither"), std::string::npos);
  EXPECT_FALSE(ParseRatesJson("not json", "").ok());
}

TEST(PlanRates, FilesSetTheLinkRatesSlowestFirst) {
  const std::string dir = testing::TempDir();
  auto write = [&](const char* name, const char* text) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    return path;
  };
  const std::string perf = write("plan_rates_perf.json", kPerfJson);
  const std::string pass = write("plan_rates_pass.json", kDoctorPass);
  const std::string slow = write("plan_rates_slow.json", kDoctorSlow);
  const std::string intra = "intra:" + perf;
  PlanOptions o = MustParse({"--params", "7B", "--gpus", "16", "--rates", intra.c_str(), "--rates", pass.c_str(),
                             "--rates", slow.c_str()});
  const Cluster& c = o.input.cluster;
  EXPECT_DOUBLE_EQ(c.links.intra.bandwidth_gbs, 21.5);
  EXPECT_DOUBLE_EQ(c.links.inter.bandwidth_gbs, 0.95 / 8);  // the slower doctor file
  EXPECT_DOUBLE_EQ(c.links.inter.latency_us, 20);           // sockets, as --net 950mbit would
  EXPECT_TRUE(c.nvlink);
  ASSERT_EQ(o.rates.size(), 3u);
  const Plan p = MakePlan(o.input);
  const std::string text = RenderPlanText(o, p);
  EXPECT_NE(text.find("intra nvlink:21.5GB/s (measured)"), std::string::npos) << text.substr(0, 600);
  EXPECT_NE(text.find("rates: inter link 0.119 GB/s = 0.95 Gb/s, loom doctor: slowest of 2 stream rates"),
            std::string::npos);
  // An explicit --net keeps its kind and latency; the measured rate wins.
  o = MustParse({"--params", "7B", "--gpus", "16", "--net", "ib:400gbit", "--rates", pass.c_str()});
  EXPECT_DOUBLE_EQ(o.input.cluster.links.inter.bandwidth_gbs, 13.96 / 8);
  EXPECT_DOUBLE_EQ(o.input.cluster.links.inter.latency_us, 5);
  auto bad = Parse({"--params", "7B", "--gpus", "16", "--rates", ("intra:" + pass).c_str()});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("between hosts"), std::string::npos);
}

}  // namespace
}  // namespace loom::tools::plan
