// The planner's model (plan.h): memory, communication and time of a layout,
// the search over layouts and the recommendation. docs/PLAN.md derives each
// formula and names its source.
#include "tools/plan/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <tuple>

#include "base/strings.h"
#include "collectives/select/selector.h"
#include "tools/topo/render.h"

namespace loom::tools::plan {
namespace {


// The FIFOs of one ring neighbour pair, both directions, at loom's default
// NCCL_BUFFSIZE (base/params.cc): what a communicator of more than one rank
// holds per rank for its two ring neighbours.
constexpr double kGroupBufferBytes = 4.0 * 1048576;
// Parameters a node's CPUs update per second in ZeRO-Offload's optimizer
// step (an assumption, docs/PLAN.md: a vectorised CPU Adam is bound by
// memory bandwidth, about 100 GB/s for ~20 bytes read and written per
// parameter).
constexpr double kCpuOptimizerParamsPerS = 5e9;
// Two gradient buckets in flight (PyTorch DDP's bucket_cap_mb default).
constexpr double kBucketBytes = 25.0 * 1048576;

struct Preset {
  const char* name;
  double params;
  int layers, hidden, heads, vocab;
};
// Shapes of public models, for --params: only their layout matters here.
constexpr Preset kPresets[] = {
    {"1.3B (GPT-3 XL)", 1.3e9, 24, 2048, 16, 50257},
    {"7B (LLaMA-7B)", 7e9, 32, 4096, 32, 32000},
    {"13B (LLaMA-13B)", 13e9, 40, 5120, 40, 32000},
    {"20B (GPT-NeoX-20B)", 20e9, 44, 6144, 64, 50432},
    {"65B (LLaMA-65B)", 65e9, 80, 8192, 64, 32000},
    {"70B (Llama-2-70B, full attention)", 70e9, 80, 8192, 64, 32000},
    {"175B (GPT-3)", 175e9, 96, 12288, 96, 50257},
    {"176B (BLOOM)", 176e9, 70, 14336, 112, 250880},
};

bool IsMixed(Dtype d) {
  return d != Dtype::kFp32;
}

// How the members of a group (consecutive strides of `stride`) fall on
// nodes of `g` GPUs: {hosts, members per host}; uneven counts as one per host.
std::pair<int, int> GroupPlacement(int size, int stride, int g) {
  std::vector<int> per_node;
  int last = -1;
  for (int i = 0; i < size; ++i) {
    const int node = i * stride / g;
    if (node != last) per_node.push_back(0);
    last = node;
    ++per_node.back();
  }
  const int hosts = static_cast<int>(per_node.size());
  for (int c : per_node) {
    if (c != per_node.front()) return {size, 1};
  }
  return {hosts, size / hosts};
}

// The runtime's model of a group of `size` ranks, `stride` apart: as
// tools/topo/render.cc builds one (JobTopology::Uniform), with the node's
// network shared by the G / per_host groups of this kind that run at once.
struct GroupModel {
  CostModel model;
  bool crosses = false;
};
GroupModel ModelOfGroup(const Cluster& c, int size, int stride) {
  const auto [hosts, per_host] = GroupPlacement(size, stride, c.gpus_per_node);
  topology::LinkCost inter = c.links.inter;
  inter.bandwidth_gbs *= static_cast<double>(per_host) / c.gpus_per_node;
  return {CostModel(topology::JobTopology::Uniform(hosts, per_host, c.links.intra, inter)), hosts > 1};
}

// One collective `calls` times per step at `call_bytes` each (the cost
// model's bytes), sending `bytes` per GPU in all.
CommItem Collective(const Cluster& c, std::string what, OpKind kind, int size, int stride, double calls,
                    double call_bytes, double bytes) {
  CommItem item;
  item.what = std::move(what);
  item.collective = CollectiveKey(kind);
  item.group = size;
  item.calls = calls;
  item.call_bytes = call_bytes;
  item.bytes = bytes;
  const GroupModel g = ModelOfGroup(c, size, stride);
  item.link = g.crosses ? LinkClass::kInter : LinkClass::kIntra;
  const Choice choice = SelectAlgo(kind, static_cast<size_t>(call_bytes), g.model, AlgoFilter{}, TuneTable{});
  item.algo = ShortAlgoName(choice.algo);
  item.seconds = calls * choice.predicted_us * 1e-6;
  return item;
}

double Divisions(const ModelShape& m) {
  return ParamsOfShape(m.layers, m.hidden, m.vocab);
}

// Parameters of one transformer block, scaled like the whole model to `params`.
double LayerParams(const ModelShape& m) {
  const double h = m.hidden;
  return (12 * h * h + 13 * h) * m.params / Divisions(m);
}

std::string Gb(double bytes) {
  return StrPrintf("%.1f GB", bytes / kGB);
}

// Why the layout cannot be laid out at all, before memory: "" when it can.
std::string ShapeProblem(const PlanInput& in, const Layout& l) {
  const Cluster& c = in.cluster;
  const ModelShape& m = in.model;
  if (l.tp > c.gpus_per_node) {
    return StrPrintf("TP=%d crosses nodes (%d GPUs per node): TP all-reduces every layer", l.tp,
                  c.gpus_per_node);
  }
  if (c.gpus_per_node % l.tp != 0) {
    return StrPrintf("TP=%d does not divide the %d GPUs of a node", l.tp, c.gpus_per_node);
  }
  if (m.heads % l.tp != 0) return StrPrintf("TP=%d does not divide the %d heads", l.tp, m.heads);
  if (l.pp > m.layers) return StrPrintf("PP=%d is deeper than the %d layers", l.pp, m.layers);
  if (m.layers % l.pp != 0) return StrPrintf("PP=%d does not divide the %d layers", l.pp, m.layers);
  const int64_t per_step = static_cast<int64_t>(l.dp) * in.train.micro_batch;
  if (in.train.global_batch % per_step != 0) {
    return StrPrintf("global batch %lld is not a multiple of DP x micro-batch = %lld",
                  static_cast<long long>(in.train.global_batch), static_cast<long long>(per_step));
  }
  if (l.zero >= 2 && l.pp > 1) {
    return StrPrintf("ZeRO-%d shards the gradients that pipeline stages accumulate: not combined with PP",
                  l.zero);
  }
  return "";
}

}  // namespace

double ParamsOfShape(int layers, int hidden, int vocab) {
  const double h = hidden;
  return layers * (12 * h * h + 13 * h) + static_cast<double>(vocab) * h + 2 * h;
}

ModelShape ShapeForParams(double params) {
  ModelShape m;
  m.params = params;
  for (const Preset& p : kPresets) {
    if (std::abs(params - p.params) <= 0.02 * p.params) {
      m.layers = p.layers;
      m.hidden = p.hidden;
      m.heads = p.heads;
      m.vocab = p.vocab;
      m.source = std::string("shape of ") + p.name;
      return m;
    }
  }
  // 12 L h^2 = params with h = 128 L.
  const int layers = std::max(1, static_cast<int>(std::lround(std::cbrt(params / (12.0 * 128 * 128)))));
  m.layers = layers;
  m.hidden = 128 * layers;
  m.heads = layers;  // heads of 128
  m.vocab = 50257;
  m.source = StrPrintf("shape derived: %d layers, hidden %d (128 x layers)", m.layers, m.hidden);
  return m;
}

std::string Describe(const Layout& l) {
  std::string s = StrPrintf("DP=%d TP=%d PP=%d ZeRO-%d", l.dp, l.tp, l.pp, l.zero);
  if (l.recompute) s += " recompute";
  if (l.offload) s += " offload";
  return s;
}

const char* LinkClassName(LinkClass c) {
  return c == LinkClass::kIntra ? "intra" : "inter";
}

double StageParams(const ModelShape& m, const Layout& l) {
  const double h = m.hidden;
  const double blocks = (static_cast<double>(m.layers) / l.pp) * (12 * h * h + 13 * h);
  const double share = (blocks + static_cast<double>(m.vocab) * h + 2 * h) / Divisions(m);
  return m.params * share / l.tp;
}

StateBytes BytesPerParam(const Training& t) {
  const double moments = t.optimizer == Optimizer::kAdam ? 8 : 4;  // Adam m and v; SGD momentum
  if (!IsMixed(t.dtype)) return {4, 4, moments};
  // 16-bit weights and gradients, fp32 master weights (ZeRO paper: K = 12
  // for Adam), and the fp32 gradient copy when kept.
  return {2, 2.0 + (t.fp32_grads ? 4 : 0), 4 + moments};
}

double LayerActivationBytes(const ModelShape& m, const Training& t, int tp) {
  const double s = m.seq, b = t.micro_batch, h = m.hidden, a = m.heads;
  const double bytes = s * b * h * (10 + 24.0 / tp + 5 * a * s / (h * tp));
  return IsMixed(t.dtype) ? bytes : 2 * bytes;
}

Estimate Evaluate(const PlanInput& in, const Layout& l) {
  Estimate e;
  e.layout = l;
  const ModelShape& m = in.model;
  const Training& t = in.train;
  const Cluster& c = in.cluster;
  e.infeasible = ShapeProblem(in, l);
  if (!e.infeasible.empty()) return e;

  const bool mixed = IsMixed(t.dtype);
  const double act_bytes = mixed ? 2 : 4;  // per activation element
  const double param_bytes = mixed ? 2 : 4;
  const double reduce_bytes = mixed && !t.fp32_grads ? 2 : 4;  // per gradient element reduced
  const double stage = StageParams(m, l);
  const StateBytes per = BytesPerParam(t);
  const int64_t micro = t.global_batch / (static_cast<int64_t>(l.dp) * t.micro_batch);
  e.micro_batches = micro;
  const double layers_here = static_cast<double>(m.layers) / l.pp;
  const double sbh = static_cast<double>(m.seq) * t.micro_batch * m.hidden;

  // Model states: ZeRO stage k shards optimizer state (1), gradients (2),
  // parameters (3) over DP; offload keeps optimizer state, master weights
  // and fp32 gradients in CPU memory.
  const double dp = l.dp;
  Memory& mem = e.mem;
  mem.params = stage * per.params / (l.zero >= 3 ? dp : 1);
  const double half_grads = mixed ? 2 : 4;
  if (l.offload) {
    mem.grads = stage * half_grads / (l.zero >= 2 ? dp : 1);
    mem.cpu = stage * (per.optimizer + per.grads - (mixed ? 2 : 0)) / (l.zero >= 1 ? dp : 1);
  } else {
    mem.grads = stage * per.grads / (l.zero >= 2 ? dp : 1);
    mem.optimizer = stage * per.optimizer / (l.zero >= 1 ? dp : 1);
  }

  // Activations (Korthikanti et al. 2022): with 1F1B the first stage holds
  // min(PP, micro-batches) micro-batches; full recomputation keeps each
  // layer's input (2sbh in 16 bits) and rebuilds one layer at a time. The
  // last stage also holds the logits in fp32 (4sbv/t).
  const double layer_act = LayerActivationBytes(m, t, l.tp);
  const double kept = l.recompute ? sbh * act_bytes : layer_act;
  const double working = l.recompute ? layer_act : 0;
  const double in_flight = static_cast<double>(std::min<int64_t>(l.pp, micro));
  const double logits = 4.0 * m.seq * t.micro_batch * m.vocab / l.tp;
  const double first = layers_here * kept * in_flight + working + (l.pp == 1 ? logits : 0);
  const double last = layers_here * kept + working + logits;
  mem.activations = std::max(first, last);

  int groups = (l.dp > 1) + (l.tp > 1) + (l.pp > 1);
  mem.buffers = groups * kGroupBufferBytes;
  if (l.dp > 1 && l.zero < 3) mem.buffers += 2 * kBucketBytes;
  if (l.zero == 3) mem.buffers += 2 * LayerParams(m) / l.tp * param_bytes;  // this layer and the next, gathered
  mem.reserve = c.reserve;

  if (mem.total() > c.gpu_mem) {
    e.infeasible = StrPrintf("over memory by %s (needs %s of %s)", Gb(mem.total() - c.gpu_mem).c_str(),
                          Gb(mem.total()).c_str(), Gb(c.gpu_mem).c_str());
  } else if (l.offload && c.cpu_mem > 0 && mem.cpu * c.gpus_per_node > c.cpu_mem) {
    e.infeasible = StrPrintf("offloaded state needs %s of CPU memory per node, has %s",
                          Gb(mem.cpu * c.gpus_per_node).c_str(), Gb(c.cpu_mem).c_str());
  }

  // Compute: 6 FLOPs per parameter per token (8 with the forward again),
  // spread over every GPU; the pipeline adds its bubble.
  const double tokens = static_cast<double>(t.global_batch) * m.seq;
  const double flops = (l.recompute ? 8.0 : 6.0) * m.params * tokens;
  e.compute_s = flops / (c.gpus * c.tflops * 1e12);
  const double mbs = static_cast<double>(micro);
  e.bubble = (l.pp - 1) / (mbs + l.pp - 1);

  // Communication per GPU per step. Rank order as Megatron and loom-train:
  // rank = tp + TP * (dp + DP * pp).
  const double tp_stride = 1, dp_stride = l.tp, pp_stride = static_cast<double>(l.tp) * l.dp;
  if (l.tp > 1) {
    // Megatron: two all-reduces forward (attention, MLP) and two backward
    // per layer, two more when the forward is recomputed; the embedding's
    // forward and the LM head's backward add one each per micro-batch.
    const double per_layer = 4 + (l.recompute ? 2 : 0);
    const double extra = l.pp == 1 ? 2 : 1;
    const double calls = (layers_here * per_layer + extra) * static_cast<double>(micro);
    const double size = sbh * act_bytes;
    e.comm.push_back(Collective(c, "TP activations", OpKind::kAllReduce, l.tp, static_cast<int>(tp_stride),
                                calls, size, calls * 2.0 * (l.tp - 1) / l.tp * size));
  }
  if (l.dp > 1) {
    const double grads = stage * reduce_bytes;  // this GPU's gradients as reduced
    const double params = stage * param_bytes;
    const double f = (dp - 1) / dp;
    const int stride = static_cast<int>(dp_stride);
    // Backward's share of the compute, the window gradient buckets are
    // reduced in as it produces them; the last bucket waits for its end.
    const double backward_s = e.compute_s * (l.recompute ? 6.0 / 8 : 4.0 / 6);
    const double last_bucket = std::min(1.0, kBucketBytes / grads);
    if (l.zero <= 1) {
      if (l.zero == 0) {
        e.comm.push_back(Collective(c, "DP gradients", OpKind::kAllReduce, l.dp, stride, 1, grads,
                                    2 * f * grads));
      } else {
        e.comm.push_back(Collective(c, "DP gradients", OpKind::kReduceScatter, l.dp, stride, 1,
                                    grads / dp, f * grads));
      }
      // DDP and DeepSpeed reduce during the last micro-batch's backward; a
      // pipeline reduces after its flush (Megatron, DeepSpeed's engine).
      if (l.pp == 1) {
        e.hidden_s = std::min(e.comm.back().seconds * (1 - last_bucket),
                              backward_s / static_cast<double>(micro));
      }
      if (l.zero == 1) {
        e.comm.push_back(Collective(c, "ZeRO-1 parameters", OpKind::kAllGather, l.dp, stride, 1,
                                    params / dp, f * params));
      }
    } else {
      // ZeRO-2 and 3 keep only a shard of the gradients: reduced at every
      // micro-batch. ZeRO-3 gathers every layer's parameters for each
      // forward and backward: 3x the parameters per micro-batch.
      const double mb = static_cast<double>(micro);
      const double calls = l.zero == 3 ? layers_here * mb : mb;
      e.comm.push_back(Collective(c, "DP gradients", OpKind::kReduceScatter, l.dp, stride, calls,
                                  grads / dp / (calls / mb), mb * f * grads));
      const CommItem reduce = e.comm.back();
      if (l.zero == 2) {
        e.hidden_s = std::min(reduce.seconds * (1 - last_bucket), backward_s);
        e.comm.push_back(
            Collective(c, "ZeRO-2 parameters", OpKind::kAllGather, l.dp, stride, 1, params / dp, f * params));
      } else {
        e.comm.push_back(Collective(c, "ZeRO-3 parameters", OpKind::kAllGather, l.dp, stride, 2 * calls,
                                    params / dp / layers_here, 2 * mb * f * params));
        // Prefetch runs each layer's gather during the layer before and its
        // reduce-scatter during the layer after: all of it hides behind the
        // micro-batch's compute but the first gather and the last reduction.
        const CommItem& gather = e.comm.back();
        const double fill = mb * (gather.seconds / gather.calls + reduce.seconds / reduce.calls);
        e.hidden_s = std::min(gather.seconds + reduce.seconds - fill, e.compute_s);
      }
    }
  }
  if (l.pp > 1) {
    // Activations forward and their gradients backward, each split over
    // the TP ranks (Narayanan et al. 2021's scatter/gather).
    CommItem item;
    item.what = "PP activations";
    item.collective = "sendrecv";
    item.group = 2;
    item.calls = 2.0 * static_cast<double>(micro);
    item.call_bytes = sbh * act_bytes / l.tp;
    item.bytes = item.calls * item.call_bytes;
    item.algo = "p2p";
    const auto [hosts, per_host] = GroupPlacement(l.pp, static_cast<int>(pp_stride), c.gpus_per_node);
    (void)per_host;
    item.link = hosts > 1 ? LinkClass::kInter : LinkClass::kIntra;
    topology::LinkCost link = c.links.intra;
    if (hosts > 1) {
      link = c.links.inter;
      link.bandwidth_gbs /= std::min(c.gpus_per_node, l.tp * l.dp);
    }
    item.seconds = item.calls * (link.latency_us * 1e-6 + item.call_bytes / (link.bandwidth_gbs * 1e9));
    e.comm.push_back(item);
  }
  for (const CommItem& item : e.comm) {
    (item.link == LinkClass::kIntra ? e.intra_bytes : e.inter_bytes) += item.bytes;
    e.comm_s += item.seconds;
  }

  if (l.offload) {
    // Gradients down and parameters up, each in 16 bits (32 in fp32), and
    // the optimizer step on the node's CPUs, shared by its GPUs.
    const double shard = stage / (l.zero >= 1 ? dp : 1);
    e.offload_s = shard * 2 * half_grads / (c.offload_gbs * 1e9) +
                  shard * c.gpus_per_node / kCpuOptimizerParamsPerS;
  }
  e.step_s = e.compute_s / (1 - e.bubble) + e.comm_s - e.hidden_s + e.offload_s;
  e.tokens_per_gpu_s = tokens / c.gpus / e.step_s;
  return e;
}

namespace {

// The rules' order among layouts of nearly equal speed (docs/PLAN.md):
// no offload; no model parallelism (DDP or ZeRO) before any; then TP as
// wide as the node before PP; then no recomputation; then the faster.
// Without NVLink, PP before TP.
auto Preference(const Estimate& e, bool nvlink) {
  const Layout& l = e.layout;
  const bool model_parallel = l.tp > 1 || l.pp > 1;
  return std::make_tuple(l.offload, model_parallel, nvlink ? -l.tp : l.tp, l.pp, l.recompute, e.step_s);
}

std::string RuleFor(const PlanInput& in, const Estimate& e, const Estimate& fastest) {
  const Layout& l = e.layout;
  const Cluster& c = in.cluster;
  std::string s;
  if (l.offload) {
    s = StrPrintf("the model states do not fit in %d GPU(s) of %s even sharded, so the optimizer state goes "
               "to CPU memory (ZeRO-Offload)",
               c.gpus, Gb(c.gpu_mem).c_str());
  } else if (l.tp == 1 && l.pp == 1 && Evaluate(in, Layout{l.dp, 1, 1, 0, l.recompute, false}).infeasible.empty()) {
    s = "the model fits one GPU, so data parallelism runs it: only gradients are exchanged";
    if (l.zero > 0) s += StrPrintf(" (ZeRO-%d over DP: no more traffic than DDP, less memory)", l.zero);
    else s += " (DDP)";
  } else if (l.tp == 1 && l.pp == 1) {
    s = StrPrintf("the model states fit once ZeRO-%d shards them over DP=%d, so no tensor or pipeline "
               "parallelism is needed",
               l.zero, l.dp);
    if (l.zero == 3 && c.nodes() > 1) s += StrPrintf("; the %s network carries ZeRO-3's parameter traffic", c.net_label.c_str());
  } else if (!c.nvlink) {
    s = l.tp == 1 ? StrPrintf("without NVLink between GPUs, pipeline parallelism (PP=%d) replaces tensor parallelism",
                           l.pp)
                  : StrPrintf("without NVLink, TP=%d over %s is still faster than pipeline stages alone by more "
                           "than the margin, with PP=%d",
                           l.tp, c.intra_label.c_str(), l.pp);
    if (l.dp > 1) s += StrPrintf(", then DP=%d", l.dp);
  } else {
    s = StrPrintf("a model too large for data parallelism alone takes TP=%d inside the NVLink node first", l.tp);
    if (l.pp > 1) s += StrPrintf(", then PP=%d across %s", l.pp, c.nodes() > 1 ? "nodes" : "GPUs");
    if (l.dp > 1) s += StrPrintf(", then DP=%d", l.dp);
    if (l.dp > 1 && l.zero == 1) s += " with ZeRO-1, so that only gradients and one parameter gather cross the data-parallel links";
  }
  if (&e == &fastest || e.layout == fastest.layout) {
    s += StrPrintf(" (the fastest estimated step, %.3g s)", e.step_s);
  } else {
    s += StrPrintf(" (%.3g s a step, within %.0f%% of the fastest, %s at %.3g s, and preferred by that rule)",
                e.step_s, kTieMargin * 100, Describe(fastest.layout).c_str(), fastest.step_s);
  }
  return s;
}

}  // namespace

Plan MakePlan(const PlanInput& in) {
  Plan plan;
  const int n = in.cluster.gpus;
  std::set<std::tuple<int, int, int, std::string>> refused;
  for (int tp = 1; tp <= n; ++tp) {
    if (n % tp != 0) continue;
    for (int pp = 1; pp <= n / tp; ++pp) {
      if ((n / tp) % pp != 0) continue;
      const int dp = n / tp / pp;
      for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
        for (int rec = 0; rec <= 1; ++rec) {
          if (in.train.recompute >= 0 && rec != in.train.recompute) continue;
          for (int off = 0; off <= 1; ++off) {
            if (off && dp > 1 && zero == 0) continue;  // ZeRO-Offload offloads a ZeRO shard
            const Layout l{dp, tp, pp, zero, rec == 1, off == 1};
            Estimate e = Evaluate(in, l);
            // Offload is the last resort: tried only where the GPUs alone are short of memory.
            if (!off && e.infeasible.rfind("over memory", 0) != 0) off = 1;
            if (e.infeasible.empty()) {
              plan.feasible.push_back(std::move(e));
            } else if (e.infeasible.rfind("over memory", 0) == 0 || e.infeasible.rfind("offloaded", 0) == 0) {
              plan.infeasible.push_back(std::move(e));
            } else if (refused.insert({dp, tp, pp, e.infeasible}).second) {
              // One line per shape and reason: no stage or option changes it.
              plan.infeasible.push_back(std::move(e));
            }
          }
        }
      }
    }
  }
  std::stable_sort(plan.feasible.begin(), plan.feasible.end(), [](const Estimate& a, const Estimate& b) {
    if (a.step_s != b.step_s) return a.step_s < b.step_s;
    return a.mem.total() < b.mem.total();
  });
  if (plan.feasible.empty()) {
    plan.rule = "no layout fits: see why below (more GPUs, more memory per GPU, recomputation or offload)";
    return plan;
  }
  // Offload only when nothing fits the GPUs alone.
  const bool gpus_suffice = std::any_of(plan.feasible.begin(), plan.feasible.end(),
                                        [](const Estimate& e) { return !e.layout.offload; });
  int first = 0;
  while (gpus_suffice && plan.feasible[static_cast<size_t>(first)].layout.offload) ++first;
  const Estimate& fastest = plan.feasible[static_cast<size_t>(first)];
  const bool nvlink = in.cluster.nvlink;
  int best = first;
  for (int i = first + 1; i < static_cast<int>(plan.feasible.size()); ++i) {
    const Estimate& e = plan.feasible[static_cast<size_t>(i)];
    if (e.step_s > fastest.step_s * (1 + kTieMargin)) break;
    if (gpus_suffice && e.layout.offload) continue;
    if (Preference(e, nvlink) < Preference(plan.feasible[static_cast<size_t>(best)], nvlink)) best = i;
  }
  plan.recommended = best;
  plan.rule = RuleFor(in, plan.feasible[static_cast<size_t>(best)], fastest);
  return plan;
}

Zero3Figure Zero3Traffic(double params, double net_bytes_per_s) {
  Zero3Figure z;
  z.quoted_bytes = 3 * params;
  z.bf16_bytes = 3 * params * 2;
  z.fp32_bytes = 3 * params * 4;
  z.quoted_s = z.quoted_bytes / net_bytes_per_s;
  z.bf16_s = z.bf16_bytes / net_bytes_per_s;
  z.fp32_s = z.fp32_bytes / net_bytes_per_s;
  return z;
}

// --- loom-train ------------------------------------------------------------

int64_t TrainerParams(const TrainerModel& t) {
  const int64_t C = t.channels;
  return t.layers * (12 * C * C + 13 * C) + int64_t{t.vocab} * C + int64_t{t.seq} * C + 2 * C;
}

ModelShape TrainerShape(const TrainerModel& t) {
  ModelShape m;
  m.params = static_cast<double>(TrainerParams(t));
  m.layers = t.layers;
  m.hidden = t.channels;
  m.heads = t.heads;
  m.seq = t.seq;
  m.vocab = t.vocab;
  m.source = "loom-train's GPT (trainer/params.cc): learned positions, tied embedding";
  return m;
}

std::string TrainerProblem(const TrainerModel& t, const Layout& l) {
  if (l.zero > 1 || l.recompute || l.offload) {
    return "loom-train runs ZeRO 0 or 1, without recomputation or offload";
  }
  if (t.micro_batches < 1 || t.batch % (l.dp * t.micro_batches) != 0) {
    return StrPrintf("loom-train: --batch %d is not a multiple of DP x micro-batches = %d", t.batch,
                  l.dp * t.micro_batches);
  }
  if (t.heads % l.tp != 0 || t.vocab % l.tp != 0 || t.channels % t.heads != 0) {
    return StrPrintf("loom-train: TP=%d must divide the %d heads and the vocabulary %d, the heads the "
                  "channels", l.tp, t.heads, t.vocab);
  }
  if (t.layers < l.pp) return StrPrintf("loom-train: PP=%d is deeper than the %d layers", l.pp, t.layers);
  return "";
}

namespace {

// Exchanges of one step on pipeline stage s (trainer/pipeline.cc): each
// Transfer with a neighbour that exists is one operation.
int64_t PipelineExchanges(const TrainerModel& t, int s, int stages) {
  const int64_t M = t.micro_batches;
  const int64_t sides = (s > 0) + (s < stages - 1);  // neighbours
  if (t.gpipe) return 2 * M * sides;
  // 1F1B: warm-up and cool-down pair with both neighbours, the steady
  // phase once per micro-batch, and the first receive of the steady phase.
  const int64_t warm = std::min<int64_t>(stages - s - 1, M);
  const int64_t steady = M - warm;
  return (2 * warm + steady) * sides + (steady > 0 && s > 0 ? 1 : 0);
}

}  // namespace

double GroupTraffic::RingBytes() const {
  const double n = size;
  return static_cast<double>(allreduce) * 2 * (n - 1) / n +
         static_cast<double>(reducescatter) * (n - 1) / n + static_cast<double>(allgather) * (n - 1) +
         static_cast<double>(send);
}

std::vector<TrainerRank> PredictTrainer(const TrainerModel& t, const Layout& l) {
  std::vector<TrainerRank> ranks;
  const int64_t f = 4;  // fp32
  const int64_t C = t.channels, V = t.vocab, T = t.seq, M = t.micro_batches;
  const int64_t N = int64_t{t.batch} / (int64_t{l.dp} * M) * T;  // tokens per micro-batch
  const int64_t NC = N * C;
  for (int rank = 0; rank < l.dp * l.tp * l.pp; ++rank) {
    TrainerRank r;
    r.rank = rank;
    r.tp_rank = rank % l.tp;
    r.dp_rank = (rank / l.tp) % l.dp;
    r.pp_rank = rank / (l.tp * l.dp);
    const int s = r.pp_rank;
    const bool first = s == 0, last = s == l.pp - 1;
    // Layers of the stage: the first L % PP stages take one more.
    const int64_t layers = t.layers / l.pp + (s < t.layers % l.pp ? 1 : 0);
    // The flat buffer: per layer 12C^2 + 7C split over TP and 6C replicated;
    // wte (V/TP rows) on the first and last stage, wpe on the first, lnf on
    // the last; padded to a multiple of DP.
    int64_t local = layers * ((12 * C * C + 7 * C) / l.tp + 6 * C);
    if (first || last) local += V / l.tp * C;
    if (first) local += T * C;
    if (last) local += 2 * C;
    const int64_t n = (local + l.dp - 1) / l.dp * l.dp;
    const int64_t shard = l.zero ? n / l.dp : n;
    r.params = n * f;
    r.grads = (n + (last ? V / l.tp * C : 0) + (l.zero ? shard : 0)) * f;
    r.optimizer = 2 * shard * f;

    if (l.tp > 1) {
      // Per micro-batch: the embedding's all-reduce (first stage), two
      // forward and two backward per layer, and on the last stage the
      // cross-entropy's MAX (N) and SUM (2N) and the LM head's backward.
      GroupTraffic g{"tp", l.tp};
      g.ops = M * ((first ? 1 : 0) + 4 * layers + (last ? 3 : 0));
      g.allreduce = M * ((first ? NC : 0) + 4 * layers * NC + (last ? N + 2 * N + NC : 0)) * f;
      r.groups.push_back(g);
    }
    if (l.dp > 1) {
      // One call per bucket (plain: one bucket); ZeRO-1 a reduce-scatter
      // and an all-gather per bucket. Buckets hold whole ZeRO shards.
      int64_t step = n;
      if (t.sync != TrainerModel::Sync::kPlain) {
        step = std::max<int64_t>(t.bucket_floats, 1);
        step = (step + l.dp - 1) / l.dp * l.dp;
      }
      const int64_t buckets = (n + step - 1) / step;
      GroupTraffic g{"dp", l.dp};
      if (l.zero) {
        g.ops = 2 * buckets;
        g.reducescatter = n * f;
        g.allgather = n / l.dp * f;
      } else {
        g.ops = buckets;
        g.allreduce = n * f;
      }
      r.groups.push_back(g);
    }
    if (l.pp > 1) {
      // Activations (N, C) forward and their gradients backward, whole on
      // every TP rank.
      GroupTraffic g{"pp", l.pp};
      g.ops = PipelineExchanges(t, s, l.pp);
      g.send = M * ((last ? 0 : 1) + (first ? 0 : 1)) * NC * f;
      r.groups.push_back(g);
      if (first || last) {
        // The tied embedding's two gradient parts, summed once per step.
        GroupTraffic tie{"tie", 2};
        tie.ops = 1;
        tie.allreduce = V / l.tp * C * f;
        r.groups.push_back(tie);
      }
    }
    if (l.dp * l.tp * l.pp > 1) {
      GroupTraffic w{"world", l.dp * l.tp * l.pp};
      w.ops = 1;  // the loss for the log
      w.allreduce = f;
      r.groups.push_back(w);
    }
    ranks.push_back(std::move(r));
  }
  return ranks;
}

}  // namespace loom::tools::plan
