// Train(): one rank's loop over steps, plus the files tests compare.
#include "trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "trainer/model.h"

namespace loom::train {

Status Validate(const TrainOptions& o) {
  const ModelConfig& m = o.model;
  const GridShape& g = o.grid;
  auto fail = [](const std::string& what) { return InvalidArgument(what); };
  if (g.dp < 1 || g.tp < 1 || g.pp < 1) return fail("--dp, --tp and --pp must be >= 1");
  if (o.sim_dp < 1) return fail("--sim-dp must be >= 1");
  if (o.sim_dp > 1 && g.world() != 1) return fail("--sim-dp needs --dp 1 --tp 1 --pp 1");
  const int dp = g.dp * o.sim_dp;
  if (o.micro_batches < 1 || o.batch % (dp * o.micro_batches) != 0) {
    return fail("--batch must be a multiple of dp * micro-batches");
  }
  if (m.heads % g.tp != 0 || m.vocab % g.tp != 0 || m.channels % m.heads != 0) {
    return fail("heads and vocab must divide by --tp, channels by heads");
  }
  if (m.layers < g.pp) return fail("--pp must not exceed the number of layers");
  if (o.data.states > m.vocab || o.data.states < 2) return fail("--states must be in [2, vocab]");
  if (o.steps < 1) return fail("--steps must be >= 1");
  return Status::Ok();
}

namespace {

class TpAdapter : public TpCollectives {
 public:
  explicit TpAdapter(Group* g) : g_(g) {}
  Status AllReduceSum(float* buf, size_t n) override { return g_->AllReduce(buf, n, RedOp::kSum); }
  Status AllReduceMax(float* buf, size_t n) override { return g_->AllReduce(buf, n, RedOp::kMax); }

 private:
  Group* g_;
};

ShardPlan PlanFor(const TrainOptions& o, const Grid& grid) {
  const int L = o.model.layers;
  const int P = o.grid.pp;
  const int s = grid.pp_rank;
  const int per = L / P;
  const int extra = L % P;  // the first `extra` stages get one more layer
  ShardPlan plan;
  plan.tp_rank = grid.tp_rank;
  plan.tp_size = o.grid.tp;
  plan.layer_begin = s * per + std::min(s, extra);
  plan.layer_end = plan.layer_begin + per + (s < extra ? 1 : 0);
  plan.first_stage = s == 0;
  plan.last_stage = s == P - 1;
  return plan;
}

// Sampling noise of a 10-step mean loss is about 0.01 nats; 0.05 is 4-5 sigma.
constexpr double kBelowEntropySlack = 0.05;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Everything one rank holds for training.
class Run {
 public:
  Run(const TrainOptions& o, Grid& grid)
      : o_(o),
        grid_(grid),
        layout_(o.model, PlanFor(o, grid), static_cast<size_t>(o.grid.dp)),
        data_(o.data, o.model.seq),
        tp_(grid.tp.get()),
        local_batch_(o.batch / (o.grid.dp * o.sim_dp)),
        mb_(local_batch_ / o.micro_batches),
        model_(layout_, mb_, o.micro_batches, o.grid.tp > 1 ? &tp_ : nullptr, o.drop_tp_backward),
        runner_(model_, grid.pp.get(), o.schedule, o.micro_batches,
                static_cast<size_t>(mb_) * o.model.seq),
        sync_(layout_, grid.dp.get(), o.sync) {
    params_.resize(layout_.size());
    grads_.resize(layout_.size());
    layout_.Init(params_.data(), o.seed);
    decay_ = layout_.DecayMask();
    size_t owned = 0;
    for (const auto& r : sync_.owned()) owned += r.count;
    m_.assign(owned, 0.0f);
    v_.assign(owned, 0.0f);
  }

  const ParamLayout& layout() const { return layout_; }
  int buckets() const { return sync_.buckets(); }

  // Bytes of the model states this rank allocated. Gradients: the flat
  // buffer, the last stage's LM-head part of wte, and the ZeRO shard.
  struct StateBytes {
    size_t params = 0, grads = 0, optimizer = 0;
  };
  StateBytes Allocated() {
    const size_t shard = o_.sync.zero ? m_.size() : 0;
    return {params_.size() * sizeof(float),
            (grads_.size() + model_.head_wte_grad().size() + shard) * sizeof(float),
            (m_.size() + v_.size()) * sizeof(float)};
  }

  // One training step; *loss gets the global mean loss (on every rank).
  Status Step(int step, float* loss) {
    const size_t tokens = static_cast<size_t>(local_batch_) * o_.model.seq;
    std::vector<int> inputs(tokens), targets(tokens);
    float local_loss = 0;  // this rank's mean over micro-batches (last stage)
    if (o_.sim_dp == 1) {
      data_.Batch(step, grid_.dp_rank * local_batch_, local_batch_, inputs.data(), targets.data());
      LOOM_TRY(Backprop(inputs, targets, &local_loss, true));
    } else {
      // Reference for DP parity: each emulated rank's full gradient, then
      // the same combination loom's AVG performs for two ranks.
      std::vector<float> sum(grads_.size(), 0.0f);
      for (int k = 0; k < o_.sim_dp; ++k) {
        data_.Batch(step, k * local_batch_, local_batch_, inputs.data(), targets.data());
        float l = 0;
        LOOM_TRY(Backprop(inputs, targets, &l, false));
        for (size_t i = 0; i < sum.size(); ++i) sum[i] = k == 0 ? grads_[i] : sum[i] + grads_[i];
        local_loss += l;
      }
      for (size_t i = 0; i < sum.size(); ++i) grads_[i] = sum[i] / static_cast<float>(o_.sim_dp);
      local_loss = local_loss / static_cast<float>(o_.sim_dp);
    }
    LOOM_TRY(sync_.Finish(grads_.data()));
    if (step == 0 && !o_.grads_path.empty()) LOOM_TRY(DumpGrads());
    // AdamW on what this rank owns, then (ZeRO) the all-gather of parameters.
    const float* g = o_.sync.zero ? sync_.shard_grads() : grads_.data();
    size_t state = 0;
    for (const auto& r : sync_.owned()) {
      AdamWUpdate(o_.adamw, step + 1, params_.data() + r.offset, g + state, m_.data() + state,
                  v_.data() + state, decay_.data() + r.offset, r.count);
      state += r.count;
    }
    LOOM_TRY(sync_.GatherParams(params_.data()));
    // Loss for the log: last-stage TP-rank-0 ranks contribute their mean.
    float contrib = layout_.plan().last_stage && grid_.tp_rank == 0 ? local_loss : 0.0f;
    LOOM_TRY(grid_.world->AllReduce(&contrib, 1, RedOp::kSum));
    *loss = contrib / static_cast<float>(o_.grid.dp);
    return Status::Ok();
  }

 private:
  // Forward and backward of all micro-batches into grads_ (zeroed first),
  // then the tied-embedding sum. With `sync`, DP synchronisation is armed for
  // the last micro-batch's backward (gradient accumulation skips it before).
  Status Backprop(const std::vector<int>& inputs, const std::vector<int>& targets, float* loss,
                  bool sync) {
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    const ShardPlan& plan = layout_.plan();
    if (plan.last_stage) std::fill(model_.head_wte_grad().begin(), model_.head_wte_grad().end(), 0.0f);
    const float scale =
        1.0f / static_cast<float>(static_cast<size_t>(mb_) * o_.model.seq * o_.micro_batches);
    float loss_sum = 0;
    std::function<void()> arm;
    std::function<void(int)> ready;
    if (sync) {
      arm = [this] { sync_.Arm(); };
      ready = [this](int id) { sync_.TensorReady(id, grads_.data()); };
    }
    LOOM_TRY(runner_.Run(params_.data(), grads_.data(), inputs.data(), targets.data(), scale, arm,
                         ready, &loss_sum));
    *loss = loss_sum / static_cast<float>(o_.micro_batches);
    // wte = embedding part + LM-head part: added here when one rank holds
    // both, else summed by the {first, last} stage all-reduce (a + b == b + a).
    if (const Slot* wte = layout_.Find(kWteId)) {
      float* gw = grads_.data() + wte->offset;
      const std::vector<float>& head = model_.head_wte_grad();
      if (plan.first_stage && plan.last_stage) {
        for (size_t i = 0; i < wte->count; ++i) gw[i] = gw[i] + head[i];
      } else {
        if (plan.last_stage) std::copy(head.begin(), head.end(), gw);
        LOOM_TRY(grid_.tie->AllReduce(gw, wte->count, RedOp::kSum));
      }
      if (sync) sync_.TensorReady(kWteId, grads_.data());
    }
    return Status::Ok();
  }

  // Records (tensor id, element in the global tensor, value) of the
  // gradients this rank owns after synchronisation.
  Status DumpGrads() {
    const std::string path = o_.grads_path + "." + std::to_string(grid_.rank);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return SystemError("cannot write " + path);
    const float* g = o_.sync.zero ? sync_.shard_grads() : grads_.data();
    size_t state = 0;
    for (const auto& r : sync_.owned()) {
      for (const Slot& s : layout_.slots()) {
        const size_t lo = std::max(r.offset, s.offset);
        const size_t hi = std::min(r.offset + r.count, s.offset + s.count);
        for (size_t i = lo; i < hi; ++i) {
          struct {
            uint32_t tensor, element;
            float value;
          } rec{static_cast<uint32_t>(s.global_id),
                static_cast<uint32_t>(layout_.GlobalElement(s, i - s.offset)),
                g[state + (i - r.offset)]};
          std::fwrite(&rec, sizeof rec, 1, f);
        }
      }
      state += r.count;
    }
    return std::fclose(f) == 0 ? Status::Ok() : SystemError("cannot write " + path);
  }

  const TrainOptions& o_;
  Grid& grid_;
  ParamLayout layout_;
  DataSource data_;
  TpAdapter tp_;
  int local_batch_, mb_;
  StageModel model_;
  PipelineRunner runner_;
  GradSync sync_;
  std::vector<float> params_, grads_, m_, v_;
  std::vector<uint8_t> decay_;
};

Status WriteLosses(const TrainOptions& o, const std::vector<float>& losses,
                   const std::vector<double>& step_ms, const std::vector<double>& comm_ms,
                   double entropy, int buckets) {
  FILE* f = std::fopen(o.losses_path.c_str(), "w");
  if (f == nullptr) return SystemError("cannot write " + o.losses_path);
  std::fprintf(f, "{\"dp\": %d, \"tp\": %d, \"pp\": %d, \"zero\": %d, \"micro_batches\": %d,\n",
               o.grid.dp, o.grid.tp, o.grid.pp, o.sync.zero ? 1 : 0, o.micro_batches);
  std::fprintf(f, " \"buckets\": %d, \"entropy\": %.9g,\n \"losses\": [", buckets, entropy);
  for (size_t i = 0; i < losses.size(); ++i) std::fprintf(f, "%s%.9g", i ? ", " : "", losses[i]);
  std::fprintf(f, "],\n \"step_ms\": [");
  for (size_t i = 0; i < step_ms.size(); ++i) std::fprintf(f, "%s%.3f", i ? ", " : "", step_ms[i]);
  std::fprintf(f, "],\n \"comm_ms\": [");
  for (size_t i = 0; i < comm_ms.size(); ++i) std::fprintf(f, "%s%.3f", i ? ", " : "", comm_ms[i]);
  std::fprintf(f, "]}\n");
  return std::fclose(f) == 0 ? Status::Ok() : SystemError("cannot write " + o.losses_path);
}

// One step's traffic through each group of more than one rank.
struct GroupStep {
  const Group* group;
  uint64_t ops = 0;
  GroupBytes bytes;
  bool operator==(const GroupStep& o) const { return ops == o.ops && bytes == o.bytes; }
};

std::vector<GroupStep> Snapshot(const Grid& g) {
  std::vector<GroupStep> out;
  for (const Group* group : {g.tp.get(), g.dp.get(), g.pp.get(), g.tie.get(), g.world.get()}) {
    if (group != nullptr && group->size() > 1) out.push_back({group, group->ops(), group->bytes()});
  }
  return out;
}

std::vector<GroupStep> Delta(const std::vector<GroupStep>& before, const std::vector<GroupStep>& after) {
  std::vector<GroupStep> d = after;
  for (size_t i = 0; i < d.size(); ++i) {
    const GroupBytes& b = before[i].bytes;
    d[i].ops -= before[i].ops;
    d[i].bytes.allreduce -= b.allreduce;
    d[i].bytes.reducescatter -= b.reducescatter;
    d[i].bytes.allgather -= b.allgather;
    d[i].bytes.send -= b.send;
  }
  return d;
}

// The --report-bytes line: step 0's traffic (same_every_step says whether
// every later step matched it) and the allocated model states.
void PrintBytes(const TrainOptions& o, const Grid& g, const std::vector<GroupStep>& step,
                bool same, size_t params, size_t grads, size_t optimizer) {
  std::string groups;
  for (const GroupStep& s : step) {
    const GroupBytes& b = s.bytes;
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%s{\"name\": \"%s\", \"size\": %d, \"ops\": %llu, \"allreduce\": %llu, "
                  "\"reducescatter\": %llu, \"allgather\": %llu, \"send\": %llu, \"bytes\": %llu}",
                  groups.empty() ? "" : ", ", s.group->name().c_str(), s.group->size(),
                  static_cast<unsigned long long>(s.ops), static_cast<unsigned long long>(b.allreduce),
                  static_cast<unsigned long long>(b.reducescatter),
                  static_cast<unsigned long long>(b.allgather), static_cast<unsigned long long>(b.send),
                  static_cast<unsigned long long>(b.total()));
    groups += buf;
  }
  std::printf("{\"schema\": \"loom-train-bytes/1\", \"rank\": %d, \"dp_rank\": %d, \"tp_rank\": %d, "
              "\"pp_rank\": %d, \"dp\": %d, \"tp\": %d, \"pp\": %d, \"zero\": %d, \"steps\": %d, "
              "\"same_every_step\": %s, \"groups\": [%s], \"memory\": {\"params\": %zu, "
              "\"grads\": %zu, \"optimizer\": %zu}}\n",
              g.rank, g.dp_rank, g.tp_rank, g.pp_rank, o.grid.dp, o.grid.tp, o.grid.pp,
              o.sync.zero ? 1 : 0, o.steps, same ? "true" : "false", groups.c_str(), params, grads,
              optimizer);
  std::fflush(stdout);
}

}  // namespace

Status Train(const TrainOptions& o, std::unique_ptr<Communicator> world) {
  LOOM_TRY(Validate(o));
  LOOM_ASSIGN_OR_RETURN(auto grid, MakeGrid(std::move(world), o.grid));
  Run run(o, *grid);
  const bool log = grid->rank == 0 && !o.quiet;
  const double entropy = o.data.task == Task::kMarkov
                             ? DataSource(o.data, o.model.seq).chain().EntropyRate()
                             : 0.0;
  if (log) {
    std::printf("loom-train: dp=%d tp=%d pp=%d zero=%d micro-batches=%d params=%zu local=%zu "
                "buckets=%d%s\n",
                o.grid.dp, o.grid.tp, o.grid.pp, o.sync.zero ? 1 : 0, o.micro_batches,
                GlobalParamCount(o.model), run.layout().size(), run.buckets(),
                o.data.task == Task::kMarkov ? "" : " task=copy");
  }
  std::vector<float> losses;
  std::vector<double> step_ms, comm_ms;
  const double tokens = static_cast<double>(o.batch) * o.model.seq;
  std::vector<GroupStep> first_step;  // --report-bytes
  bool same_every_step = true;
  for (int step = 0; step < o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const double comm0 = grid->clock.seconds;
    const uint64_t dp0 = grid->dp->ops();
    const std::vector<GroupStep> traffic0 = Snapshot(*grid);
    float loss = 0;
    LOOM_TRY(run.Step(step, &loss).WithContext("step " + std::to_string(step)));
    const std::vector<GroupStep> traffic = Delta(traffic0, Snapshot(*grid));
    if (step == 0) first_step = traffic;
    else same_every_step = same_every_step && traffic == first_step;
    const double secs = Seconds(start);
    const double comm = grid->clock.seconds - comm0;
    const uint64_t dp_ops = grid->dp->ops() - dp0;
    if (o.expect_dp_ops >= 0 && dp_ops != static_cast<uint64_t>(o.expect_dp_ops)) {
      return InternalError("step " + std::to_string(step) + " issued " + std::to_string(dp_ops) +
                           " DP operations, expected " + std::to_string(o.expect_dp_ops));
    }
    losses.push_back(loss);
    step_ms.push_back(secs * 1e3);
    comm_ms.push_back(comm * 1e3);
    if (log) {
      std::printf("step %4d  loss %.6f  tokens/s %8.0f  step %7.2f ms  comm %7.2f ms  "
                  "compute %7.2f ms  dp-ops %llu\n",
                  step, loss, tokens / secs, secs * 1e3, comm * 1e3, (secs - comm) * 1e3,
                  static_cast<unsigned long long>(dp_ops));
      std::fflush(stdout);
    }
  }
  if (grid->rank == 0 && !o.losses_path.empty()) {
    LOOM_TRY(WriteLosses(o, losses, step_ms, comm_ms, entropy, run.buckets()));
  }
  if (o.report_bytes) {
    const auto mem = run.Allocated();
    PrintBytes(o, *grid, first_step, same_every_step, mem.params, mem.grads, mem.optimizer);
  }
  if (o.learn_margin >= 0) {
    const size_t k = std::min<size_t>(10, losses.size());
    const double tail = std::accumulate(losses.end() - k, losses.end(), 0.0) / k;
    if (grid->rank == 0) {
      std::printf("final loss %.4f (mean of last %zu), entropy rate %.4f, margin %.3f\n", tail, k,
                  entropy, o.learn_margin);
    }
    if (tail > entropy + o.learn_margin) {
      return InternalError("did not learn: loss " + std::to_string(tail) + " > entropy " +
                           std::to_string(entropy) + " + margin");
    }
    // No model beats the entropy rate in expectation; clearly below it means
    // a position sees its own future (a broken causal mask).
    if (tail < entropy - kBelowEntropySlack) {
      return InternalError("loss " + std::to_string(tail) + " below the entropy rate " +
                           std::to_string(entropy) + ": information leaks from the future");
    }
  }
  return Status::Ok();
}

}  // namespace loom::train
