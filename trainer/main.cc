// loom-train: command line. Trains (under `loom run` for several ranks) or
// compares two runs' losses or gradients (compare-losses, compare-grads).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.hpp"
#include "trainer/compare.h"
#include "trainer/trainer.h"

namespace {

using loom::Result;
using loom::Status;
using namespace loom::train;

constexpr const char* kUsage = R"(usage:
  loom run -np N -- loom-train [options]     train (N = dp * tp * pp)
  loom-train [options]                       train on one rank
  loom-train compare-losses A.json B.json [--tol X]
  loom-train compare-grads [--tol X] --ref FILES... --cand FILES...

parallel layout:
  --dp N --tp N --pp N     data, tensor and pipeline parallel degrees (1)
  --zero 0|1               ZeRO-1 optimizer sharding over DP (0)
  --schedule gpipe|1f1b    pipeline schedule (1f1b)
  --sync plain|bucketed|overlap   DP gradient synchronisation (overlap)
  --bucket-floats N        DP bucket size in floats (16384)
training:
  --steps N (20)  --batch N global sequences (8)  --micro-batches M per DP rank (1)
  --lr X (1e-3)  --weight-decay X (0.1)  --seed N weights (42)
  --task markov|copy (markov)  --data-seed N (1234)  --states N alphabet (16)
model:
  --vocab V (128) --channels C (64) --heads H (4) --layers L (4) --seq T (32)
output and checks:
  --losses FILE            per-step losses and timings as JSON (rank 0)
  --dump-grads PREFIX      step-0 gradients after synchronisation, PREFIX.<rank>
  --sim-dp N               one process emulating N DP ranks (parity reference)
  --expect-dp-ops N        fail unless every step issues exactly N DP operations
  --report-bytes           at the end, one JSON line per rank: operations and
                           bytes per group in one step, model-state bytes
  --learn-margin X         fail unless the final loss <= Markov entropy + X
  --mutate drop-tp-allreduce|drop-avg-scale   break the run on purpose (tests)
  --quiet
)";

Status ParseInt(const char* text, int* out) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0') return loom::InvalidArgument(std::string("not an integer: ") + text);
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status ParseDouble(const char* text, double* out) {
  char* end = nullptr;
  *out = std::strtod(text, &end);
  if (end == text || *end != '\0') return loom::InvalidArgument(std::string("not a number: ") + text);
  return Status::Ok();
}

Status ParseTrain(int argc, char** argv, TrainOptions* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quiet") {
      o->quiet = true;
      continue;
    }
    if (flag == "--report-bytes") {
      o->report_bytes = true;
      continue;
    }
    if (i + 1 >= argc) return loom::InvalidArgument("missing value after " + flag);
    const char* v = argv[++i];
    int n = 0;
    double x = 0;
    auto integer = [&](int* dst) { return ParseInt(v, dst); };
    if (flag == "--dp") LOOM_TRY(integer(&o->grid.dp));
    else if (flag == "--tp") LOOM_TRY(integer(&o->grid.tp));
    else if (flag == "--pp") LOOM_TRY(integer(&o->grid.pp));
    else if (flag == "--zero") { LOOM_TRY(integer(&n)); o->sync.zero = n != 0; }
    else if (flag == "--steps") LOOM_TRY(integer(&o->steps));
    else if (flag == "--batch") LOOM_TRY(integer(&o->batch));
    else if (flag == "--micro-batches") LOOM_TRY(integer(&o->micro_batches));
    else if (flag == "--bucket-floats") { LOOM_TRY(integer(&n)); o->sync.bucket_floats = n > 0 ? n : 1; }
    else if (flag == "--seed") { LOOM_TRY(integer(&n)); o->seed = static_cast<uint64_t>(n); }
    else if (flag == "--data-seed") { LOOM_TRY(integer(&n)); o->data.seed = static_cast<uint64_t>(n); }
    else if (flag == "--states") LOOM_TRY(integer(&o->data.states));
    else if (flag == "--vocab") LOOM_TRY(integer(&o->model.vocab));
    else if (flag == "--channels") LOOM_TRY(integer(&o->model.channels));
    else if (flag == "--heads") LOOM_TRY(integer(&o->model.heads));
    else if (flag == "--layers") LOOM_TRY(integer(&o->model.layers));
    else if (flag == "--seq") LOOM_TRY(integer(&o->model.seq));
    else if (flag == "--sim-dp") LOOM_TRY(integer(&o->sim_dp));
    else if (flag == "--expect-dp-ops") LOOM_TRY(integer(&o->expect_dp_ops));
    else if (flag == "--lr") { LOOM_TRY(ParseDouble(v, &x)); o->adamw.lr = static_cast<float>(x); }
    else if (flag == "--weight-decay") { LOOM_TRY(ParseDouble(v, &x)); o->adamw.weight_decay = static_cast<float>(x); }
    else if (flag == "--learn-margin") LOOM_TRY(ParseDouble(v, &o->learn_margin));
    else if (flag == "--losses") o->losses_path = v;
    else if (flag == "--dump-grads") o->grads_path = v;
    else if (flag == "--task") { LOOM_ASSIGN_OR_RETURN(o->data.task, ParseTask(v)); }
    else if (flag == "--schedule") { LOOM_ASSIGN_OR_RETURN(o->schedule, ParseSchedule(v)); }
    else if (flag == "--sync") {
      const std::string s = v;
      if (s == "plain") o->sync.mode = SyncMode::kPlain;
      else if (s == "bucketed") o->sync.mode = SyncMode::kBucketed;
      else if (s == "overlap") o->sync.mode = SyncMode::kOverlap;
      else return loom::InvalidArgument("unknown --sync " + s + " (plain, bucketed, overlap)");
    } else if (flag == "--mutate") {
      const std::string s = v;
      if (s == "drop-tp-allreduce") o->drop_tp_backward = true;
      else if (s == "drop-avg-scale") o->sync.drop_avg_scale = true;
      else return loom::InvalidArgument("unknown --mutate " + s);
    } else {
      return loom::InvalidArgument("unknown option " + flag);
    }
  }
  return Status::Ok();
}

int Fail(const Status& st) {
  std::fprintf(stderr, "loom-train: %s\n", st.ToString().c_str());
  return 1;
}

int CompareLossesMain(int argc, char** argv) {
  std::vector<std::string> files;
  double tol = 0;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tol") == 0 && i + 1 < argc) {
      if (Status st = ParseDouble(argv[++i], &tol); !st.ok()) return Fail(st);
    } else {
      files.push_back(argv[i]);
    }
  }
  if (files.size() != 2) return Fail(loom::InvalidArgument("compare-losses needs two files"));
  auto a = ReadLosses(files[0]);
  if (!a.ok()) return Fail(a.status());
  auto b = ReadLosses(files[1]);
  if (!b.ok()) return Fail(b.status());
  std::string report;
  const Status st = CompareLosses(*a, *b, tol, &report);
  std::printf("%s: %s\n", st.ok() ? "MATCH" : "DIFFER", report.c_str());
  return st.ok() ? 0 : 1;
}

int CompareGradsMain(int argc, char** argv) {
  std::vector<std::string> ref, cand;
  std::vector<std::string>* into = nullptr;
  double tol = 0;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tol") == 0 && i + 1 < argc) {
      if (Status st = ParseDouble(argv[++i], &tol); !st.ok()) return Fail(st);
    } else if (std::strcmp(argv[i], "--ref") == 0) {
      into = &ref;
    } else if (std::strcmp(argv[i], "--cand") == 0) {
      into = &cand;
    } else if (into != nullptr) {
      into->push_back(argv[i]);
    } else {
      return Fail(loom::InvalidArgument("files must follow --ref or --cand"));
    }
  }
  std::string report;
  const Status st = CompareGrads(ref, cand, tol, &report);
  std::printf("%s: %s\n", st.ok() ? "MATCH" : "DIFFER", st.ok() ? report.c_str() : st.message().c_str());
  return st.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "compare-losses") == 0) return CompareLossesMain(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "compare-grads") == 0) return CompareGradsMain(argc, argv);
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  TrainOptions options;
  if (Status st = ParseTrain(argc, argv, &options); !st.ok()) {
    std::fputs(kUsage, stderr);
    return Fail(st);
  }
  std::unique_ptr<loom::Communicator> world;
  if (std::getenv("LOOM_RANK") != nullptr || options.grid.world() > 1) {
    auto comm = loom::Communicator::CreateFromEnv(loom::CommConfig{.name = "world"});
    if (!comm.ok()) return Fail(comm.status().WithContext("joining the job (start with loom run)"));
    world = std::move(comm).value();
  }
  if (Status st = Train(options, std::move(world)); !st.ok()) return Fail(st);
  return 0;
}
