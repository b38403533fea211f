// `loom plan`'s model, as pure functions: memory per GPU, communication per
// GPU per step per link class, and step time of a parallel layout (DP x TP x
// PP x ZeRO stage, recomputation, offload) of a transformer on a cluster;
// the search over layouts and the rule that picks one. Formulas and their
// sources are in docs/PLAN.md. Collective times and algorithms come from the
// runtime's CostModel and SelectAlgo, as `loom topo` shows them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/cost_model.h"

namespace loom::tools::plan {

inline constexpr double kGB = 1e9;  // memory and volumes are in decimal GB, as the literature quotes them

enum class Dtype { kFp32, kBf16, kFp16 };
enum class Optimizer { kAdam, kSgd };

// A decoder-only transformer. `params` is what memory and FLOPs count; the
// shape places it (layers per stage, activations, TP divisibility).
struct ModelShape {
  double params = 0;
  int layers = 0, hidden = 0, heads = 0, seq = 2048, vocab = 0;
  std::string source;  // "given", "preset 65B (LLaMA-65B)", "derived (h = 128 x layers)"
};

// L*(12h^2 + 13h) + V*h + 2h: blocks, tied word embedding, final LayerNorm
// (no learned positions: rotary or ALiBi, as BLOOM and LLaMA).
double ParamsOfShape(int layers, int hidden, int vocab);
// A shape for `params` parameters: a known model's when params matches one
// of the presets to 2 %, else layers and hidden from hidden = 128 x layers
// (GPT-3's aspect ratio), heads of 128, vocabulary 50257, sequence 2048.
// The result keeps `params` exactly.
ModelShape ShapeForParams(double params);

struct Training {
  int64_t global_batch = 1024;  // sequences per optimizer step
  int micro_batch = 1;          // sequences per forward pass per DP rank
  Dtype dtype = Dtype::kBf16;   // bf16/fp16: mixed precision with fp32 master weights
  Optimizer optimizer = Optimizer::kAdam;
  // Mixed precision only: gradients are accumulated and reduced in an fp32
  // copy (Megatron's main_grad, DeepSpeed's bf16 optimizer).
  bool fp32_grads = true;
  int recompute = -1;  // -1 both, 0 off, 1 full activation recomputation
};

struct Cluster {
  int gpus = 1;
  int gpus_per_node = 8;
  double gpu_mem = 80 * kGB;  // bytes
  double cpu_mem = 0;         // bytes per node for offload; 0 = not checked
  topology::HostLinkCosts links;  // intra: GPU to GPU in a node; inter: the node's network, all GPUs
  bool nvlink = true;             // the intra link is NVLink/NVSwitch (TP belongs there)
  double tflops = 150;            // achieved per GPU
  double reserve = 1.5 * kGB;     // CUDA context and kernels per GPU
  double offload_gbs = 25;        // GPU <-> CPU for ZeRO-Offload
  std::string intra_label = "nvlink:300GB/s", net_label = "400gbit";
  int nodes() const { return (gpus + gpus_per_node - 1) / gpus_per_node; }
};

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int zero = 0;  // ZeRO stage over DP: 1 optimizer state, 2 + gradients, 3 + parameters
  bool recompute = false;
  bool offload = false;  // optimizer state (with master weights, fp32 gradients) in CPU memory
  bool operator==(const Layout&) const = default;
};
std::string Describe(const Layout& l);  // "DP=8 TP=8 PP=1 ZeRO-1 recompute"

// Per GPU, bytes, for the most loaded GPU (the stage holding the embedding).
struct Memory {
  double params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0, reserve = 0;
  double cpu = 0;  // offloaded, per GPU
  double total() const { return params + grads + optimizer + activations + buffers + reserve; }
};

enum class LinkClass { kIntra, kInter };
const char* LinkClassName(LinkClass c);  // "intra", "inter"

// One kind of communication of one GPU in one step.
struct CommItem {
  std::string what;        // "DP gradients", "TP activations", "PP activations", "ZeRO-3 parameters"
  std::string collective;  // "allreduce", "reducescatter", "allgather", "sendrecv"
  int group = 1;           // ranks in the collective
  LinkClass link = LinkClass::kIntra;
  double calls = 0;        // per step
  double call_bytes = 0;   // what one call moves (the CostModel's bytes: a block for RS/AG)
  double bytes = 0;        // sent by this GPU per step
  std::string algo;        // SelectAlgo's choice ("ring", "hierarchical", ...); "p2p" for sendrecv
  double seconds = 0;      // per step
};

struct Estimate {
  Layout layout;
  Memory mem;
  std::vector<CommItem> comm;
  double intra_bytes = 0, inter_bytes = 0;
  double comm_s = 0, compute_s = 0, offload_s = 0, bubble = 0, step_s = 0;
  double hidden_s = 0;        // of comm_s: overlapped with compute, not on the step
  int64_t micro_batches = 0;  // per pipeline per step
  double tokens_per_gpu_s = 0;
  std::string infeasible;  // why not, "" when it runs
};

struct PlanInput {
  ModelShape model;
  Training train;
  Cluster cluster;
};

// Parameters held by one GPU of the first stage before ZeRO: its layers'
// share of the blocks plus the embedding, over TP.
double StageParams(const ModelShape& m, const Layout& l);

// Bytes per parameter of each model state before sharding.
struct StateBytes {
  double params = 0, grads = 0, optimizer = 0;
};
StateBytes BytesPerParam(const Training& t);

// Korthikanti et al. 2022, bytes of one layer's activations for one
// micro-batch kept for backward: s*b*h*(10 + 24/t + 5*a*s/(h*t)) (16-bit
// activations, TP without sequence parallelism); twice that in fp32.
double LayerActivationBytes(const ModelShape& m, const Training& t, int tp);

// Everything about one layout; `infeasible` says why it cannot run.
Estimate Evaluate(const PlanInput& in, const Layout& l);

struct Plan {
  std::vector<Estimate> feasible;    // fastest first
  std::vector<Estimate> infeasible;  // by layout
  int recommended = -1;              // index into feasible, -1 when none
  std::string rule;                  // the sentence that decided it
};

// Every DP x TP x PP = gpus with each ZeRO stage, recomputation and
// offload that means something, evaluated and ranked; the recommendation
// (docs/PLAN.md "Choosing"): the fastest, unless layouts within
// kTieMargin of it include one the rules prefer.
inline constexpr double kTieMargin = 0.10;
Plan MakePlan(const PlanInput& in);

// The ZeRO-3 traffic figure as quoted (3 x parameters at one byte each)
// and with real parameter bytes, and its time on the inter-node network
// rate given (bytes/s per GPU).
struct Zero3Figure {
  double quoted_bytes = 0, quoted_s = 0;
  double bf16_bytes = 0, bf16_s = 0;
  double fp32_bytes = 0, fp32_s = 0;
};
Zero3Figure Zero3Traffic(double params, double net_bytes_per_s);

// --- loom-train (trainer/, docs/trainer.md), counted exactly -----------------
//
// The example trainer's GPT and the way it lays out, shards and moves it, as
// closed forms: the ground truth the formulas above are checked against
// (`loom plan --model loom-train --layout ... --check-trainer FILE`).

// loom-train's settings that decide its traffic and memory, as its flags.
struct TrainerModel {
  int vocab = 128, channels = 64, heads = 4, layers = 4, seq = 32;
  int batch = 8;          // --batch: global sequences per step
  int micro_batches = 1;  // --micro-batches: per DP rank and step
  bool gpipe = false;     // --schedule gpipe (else 1f1b)
  enum class Sync { kPlain, kBucketed, kOverlap } sync = Sync::kOverlap;
  int64_t bucket_floats = 16384;
};

// L(12C^2 + 13C) + VC (tied wte) + TC (learned positions, wpe) + 2C (lnf).
int64_t TrainerParams(const TrainerModel& t);
// The shape the general model sees: fp32, AdamW, parameters exactly.
ModelShape TrainerShape(const TrainerModel& t);
// Why loom-train refuses the layout (its Validate), "" when it runs it.
std::string TrainerProblem(const TrainerModel& t, const Layout& l);

// What one rank hands to loom through one group in one step: per kind of
// call, the call's input on this rank in bytes (all-reduce: the buffer;
// reduce-scatter: the whole send buffer; all-gather: this rank's block;
// send/recv: what it sends), as trainer/groups.h counts it.
struct GroupTraffic {
  std::string group;  // "tp", "dp", "pp", "tie", "world"
  int size = 0;
  int64_t ops = 0, allreduce = 0, reducescatter = 0, allgather = 0, send = 0;
  int64_t bytes() const { return allreduce + reducescatter + allgather + send; }
  // What a ring sends of it: 2(n-1)/n, (n-1)/n, (n-1) and 1 times each kind.
  double RingBytes() const;
  bool operator==(const GroupTraffic&) const = default;
};

struct TrainerRank {
  int rank = 0, dp_rank = 0, tp_rank = 0, pp_rank = 0;
  std::vector<GroupTraffic> groups;  // those of more than one rank, in the order tp, dp, pp, tie, world
  // Bytes allocated: the flat parameter buffer (padded to a multiple of DP);
  // gradients: that buffer again, the last stage's LM-head part of wte and
  // the ZeRO-1 shard; AdamW's m and v for what the rank updates.
  int64_t params = 0, grads = 0, optimizer = 0;
};

// Every rank of the layout (rank = tp + TP * (dp + DP * pp)); l.zero is 0 or 1.
std::vector<TrainerRank> PredictTrainer(const TrainerModel& t, const Layout& l);

}  // namespace loom::tools::plan
