// Rendering of `loom plan` output (report.h).
#include "tools/plan/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/strings.h"

namespace loom::tools::plan {
namespace {

double G(double bytes) {
  return bytes / kGB;
}

// Three significant figures keep the JSON short and stable.
double Round3(double v) {
  if (v == 0 || !std::isfinite(v)) return v;
  const double scale = std::pow(10, 2 - static_cast<int>(std::floor(std::log10(std::fabs(v)))));
  return std::round(v * scale) / scale;
}

const char* DtypeName(Dtype d) {
  switch (d) {
    case Dtype::kFp32: return "fp32";
    case Dtype::kBf16: return "bf16";
    case Dtype::kFp16: return "fp16";
  }
  return "?";
}

std::string TrainingLine(const PlanInput& in) {
  const Training& t = in.train;
  const StateBytes b = BytesPerParam(t);
  std::string precision = t.dtype == Dtype::kFp32
                              ? std::string("fp32")
                              : StrPrintf("%s mixed precision (fp32 master weights%s)", DtypeName(t.dtype),
                                       t.fp32_grads ? ", fp32 gradient copy" : "");
  return StrPrintf("training: global batch %lld x %d tokens, micro-batch %d, %s, %s: %.0f bytes of model "
                "state per parameter (%.0f + %.0f + %.0f)",
                static_cast<long long>(t.global_batch), in.model.seq, t.micro_batch, precision.c_str(),
                t.optimizer == Optimizer::kAdam ? "Adam" : "SGD with momentum", b.params + b.grads + b.optimizer,
                b.params, b.grads, b.optimizer);
}

std::string ClusterLine(const PlanOptions& o) {
  const Cluster& c = o.input.cluster;
  return StrPrintf("cluster: %d GPUs = %d node%s x %d, %.0f GB each; intra %s; network %s (%.3g GB/s per node, "
                "%s); compute %.0f TFLOPs per GPU%s",
                c.gpus, c.nodes(), c.nodes() == 1 ? "" : "s", c.gpus_per_node, G(c.gpu_mem), c.intra_label.c_str(),
                c.net_label.c_str(), c.links.inter.bandwidth_gbs,
                c.links.inter.latency_us <= 5 ? "RDMA" : "sockets", c.tflops,
                o.tflops_given ? "" : " (assumed; --tflops sets it)");
}

std::string Row(int rank, const Estimate& e, bool mark) {
  const Layout& l = e.layout;
  const Memory& m = e.mem;
  return StrPrintf("%s%3d %4d %3d %3d %4d %4s %4s | %6.1f %6.1f %6.1f %6.1f %5.1f %6.1f | %8.1f %8.1f | %8.3g %8.3g %5.1f%% %8.3g\n",
                mark ? ">" : " ", rank, l.dp, l.tp, l.pp, l.zero, l.recompute ? "on" : "off",
                l.offload ? "cpu" : "-", G(m.params), G(m.grads), G(m.optimizer), G(m.activations),
                G(m.buffers + m.reserve), G(m.total()), G(e.intra_bytes), G(e.inter_bytes), e.comm_s,
                e.compute_s, 100 * e.bubble, e.step_s);
}

const char kHeader[] =
    "    #   DP  TP  PP ZeRO  rec  off | params  grads  optim    act other  total | intra GB inter GB |   comm s compute s bubble   step s\n";

std::string CommLines(const Estimate& e) {
  std::string s;
  for (const CommItem& c : e.comm) {
    s += StrPrintf("    %-18s %-13s %4d ranks %-5s %8.0f calls x %9.3g MB  %-12s %9.1f GB %9.3g s\n", c.what.c_str(),
                c.collective.c_str(), c.group, LinkClassName(c.link), c.calls, c.call_bytes / 1e6, c.algo.c_str(),
                G(c.bytes), c.seconds);
  }
  if (e.offload_s > 0) s += StrPrintf("    %-18s %-13s over PCIe %59.3g s\n", "offload", "copy", e.offload_s);
  if (s.empty()) s = "    none: one GPU\n";
  return s;
}

const Estimate* BestWith(const Plan& plan, bool (*pred)(const Layout&)) {
  for (const Estimate& e : plan.feasible) {
    if (pred(e.layout)) return &e;
  }
  return nullptr;
}

bool IsZero3Only(const Layout& l) {
  return l.zero == 3 && l.tp == 1 && l.pp == 1 && !l.offload;
}

json::Value LayoutJson(const Layout& l) {
  return json::Value::Object{{"dp", l.dp},           {"tp", l.tp},
                             {"pp", l.pp},           {"zero", l.zero},
                             {"recompute", l.recompute}, {"offload", l.offload}};
}

json::Value EstimateJson(const Estimate& e) {
  json::Value::Object o{{"layout", LayoutJson(e.layout)}};
  if (!e.infeasible.empty()) {
    o.emplace_back("why", e.infeasible);
    if (e.mem.total() > 0) o.emplace_back("memory_gb", Round3(G(e.mem.total())));
    return o;
  }
  const Memory& m = e.mem;
  o.emplace_back("memory_gb", json::Value::Object{{"params", Round3(G(m.params))},
                                                  {"grads", Round3(G(m.grads))},
                                                  {"optimizer", Round3(G(m.optimizer))},
                                                  {"activations", Round3(G(m.activations))},
                                                  {"buffers", Round3(G(m.buffers))},
                                                  {"reserve", Round3(G(m.reserve))},
                                                  {"total", Round3(G(m.total()))},
                                                  {"cpu", Round3(G(m.cpu))}});
  json::Value::Array comm;
  for (const CommItem& c : e.comm) {
    comm.push_back(json::Value::Object{{"what", c.what},
                                       {"collective", c.collective},
                                       {"group", c.group},
                                       {"link", LinkClassName(c.link)},
                                       {"calls", Round3(c.calls)},
                                       {"call_bytes", Round3(c.call_bytes)},
                                       {"bytes", Round3(c.bytes)},
                                       {"algorithm", c.algo},
                                       {"seconds", Round3(c.seconds)}});
  }
  o.emplace_back("comm", std::move(comm));
  o.emplace_back("intra_gb", Round3(G(e.intra_bytes)));
  o.emplace_back("inter_gb", Round3(G(e.inter_bytes)));
  o.emplace_back("micro_batches", static_cast<int64_t>(e.micro_batches));
  o.emplace_back("comm_s", Round3(e.comm_s));
  o.emplace_back("hidden_s", Round3(e.hidden_s));
  o.emplace_back("compute_s", Round3(e.compute_s));
  o.emplace_back("offload_s", Round3(e.offload_s));
  o.emplace_back("bubble", Round3(e.bubble));
  o.emplace_back("step_s", Round3(e.step_s));
  o.emplace_back("tokens_per_gpu_s", Round3(e.tokens_per_gpu_s));
  return o;
}

json::Value RatesJson(const std::vector<MeasuredRate>& rates) {
  json::Value::Array out;
  for (const MeasuredRate& r : rates) {
    out.push_back(json::Value::Object{{"link", LinkClassName(r.link)}, {"gbs", r.gbs}, {"from", r.what}});
  }
  return out;
}

}  // namespace

std::string RenderPlanText(const PlanOptions& o, const Plan& plan) {
  const PlanInput& in = o.input;
  const ModelShape& m = in.model;
  std::string s;
  const std::string count = m.params >= 1e8 ? StrPrintf("%.4g B", m.params / 1e9) : StrPrintf("%.0f", m.params);
  s += StrPrintf("model: %s parameters; %d layers, hidden %d, %d heads, vocabulary %d, sequence %d (%s)\n",
              count.c_str(), m.layers, m.hidden, m.heads, m.vocab, m.seq, m.source.c_str());
  s += TrainingLine(in) + "\n" + ClusterLine(o) + "\n";
  for (const MeasuredRate& r : o.rates) {
    s += StrPrintf("rates: %s link %.3g GB/s = %.3g Gb/s, %s\n", LinkClassName(r.link), r.gbs, r.gbs * 8, r.what.c_str());
  }
  s += "\n";

  const size_t shown = o.all ? plan.feasible.size() : std::min(plan.feasible.size(), static_cast<size_t>(o.top));
  s += StrPrintf("feasible layouts: %zu, fastest first (memory per GPU in GB, communication per GPU per step)\n",
              plan.feasible.size());
  if (!plan.feasible.empty()) s += kHeader;
  for (size_t i = 0; i < shown; ++i) {
    s += Row(static_cast<int>(i + 1), plan.feasible[i], static_cast<int>(i) == plan.recommended);
  }
  if (plan.recommended >= static_cast<int>(shown)) {
    s += "  ...\n" + Row(plan.recommended + 1, plan.feasible[static_cast<size_t>(plan.recommended)], true);
  }
  if (shown < plan.feasible.size()) s += StrPrintf("  ... %zu more (--all shows them)\n", plan.feasible.size() - shown);

  s += "\n";
  if (plan.recommended >= 0) {
    const Estimate& r = plan.feasible[static_cast<size_t>(plan.recommended)];
    s += "recommended: " + Describe(r.layout) + "\n";
    s += "  rule: " + plan.rule + "\n";
    s += StrPrintf("  memory per GPU: %.1f GB params + %.1f grads + %.1f optimizer + %.1f activations + %.1f "
                "buffers + %.1f CUDA reserve = %.1f GB of %.0f\n",
                G(r.mem.params), G(r.mem.grads), G(r.mem.optimizer), G(r.mem.activations), G(r.mem.buffers),
                G(r.mem.reserve), G(r.mem.total()), G(in.cluster.gpu_mem));
    const std::string hidden = r.hidden_s > 0
                                   ? StrPrintf(" - %.3g s of it hidden behind compute", r.hidden_s)
                                   : std::string();
    s += StrPrintf(
        "  step: %.3g s compute x %.3g for a %.1f%% bubble (%lld micro-batches) + %.3g s "
        "communication%s = %.3g s; %.0f tokens/s per GPU\n",
        r.compute_s, 1 / (1 - r.bubble), 100 * r.bubble, static_cast<long long>(r.micro_batches),
        r.comm_s, hidden.c_str(), r.step_s, r.tokens_per_gpu_s);
    s += "  communication per GPU per step (algorithm: loom's cost model):\n" + CommLines(r);
  } else {
    s += "recommended: none\n  rule: " + plan.rule + "\n";
  }

  // The ZeRO-3 figure as quoted, and with real parameter bytes (not for one given layout).
  if (o.layout_given) return s;
  const double net = in.cluster.links.inter.bandwidth_gbs * 1e9;
  const Zero3Figure z = Zero3Traffic(m.params, net);
  s += StrPrintf("\nZeRO-3 traffic, 3 x parameters per GPU per step (all-gather forward and backward, "
              "reduce-scatter), at %.3g Gb/s:\n",
              net * 8 / 1e9);
  s += StrPrintf("  quoted counting, 1 byte per parameter: %.0f GB = %.0f Gb -> %.3g s\n", G(z.quoted_bytes),
              G(z.quoted_bytes) * 8, z.quoted_s);
  s += StrPrintf("  bf16/fp16 parameters, 2 bytes:         %.0f GB -> %.3g s\n", G(z.bf16_bytes), z.bf16_s);
  s += StrPrintf("  fp32 parameters, 4 bytes:              %.0f GB -> %.3g s\n", G(z.fp32_bytes), z.fp32_s);
  if (const Estimate* z3 = BestWith(plan, IsZero3Only)) {
    s += StrPrintf(
        "  this plan's ZeRO-3 layout (%s, %lld micro-batches, the node's network shared by %d "
        "GPUs): %.0f GB inter-node per GPU, %.3g s communication (%.3g s hidden behind "
        "compute), %.3g s a step\n",
        Describe(z3->layout).c_str(), static_cast<long long>(z3->micro_batches),
        in.cluster.gpus_per_node, G(z3->inter_bytes), z3->comm_s, z3->hidden_s, z3->step_s);
  } else {
    s += "  (no ZeRO-3-only layout is feasible here)\n";
  }

  s += StrPrintf("\ninfeasible layouts: %zu\n", plan.infeasible.size());
  const size_t cap = o.all ? plan.infeasible.size() : std::min<size_t>(plan.infeasible.size(), 12);
  for (size_t i = 0; i < cap; ++i) {
    const Estimate& e = plan.infeasible[i];
    s += StrPrintf("  %-40s %s\n", Describe(e.layout).c_str(), e.infeasible.c_str());
  }
  if (cap < plan.infeasible.size()) s += StrPrintf("  ... %zu more (--all shows them)\n", plan.infeasible.size() - cap);
  return s;
}

json::Value RenderPlanJson(const PlanOptions& o, const Plan& plan) {
  const PlanInput& in = o.input;
  const ModelShape& m = in.model;
  const Cluster& c = in.cluster;
  const Training& t = in.train;
  json::Value::Array feasible, infeasible;
  for (const Estimate& e : plan.feasible) feasible.push_back(EstimateJson(e));
  for (const Estimate& e : plan.infeasible) infeasible.push_back(EstimateJson(e));
  const Zero3Figure z = Zero3Traffic(m.params, c.links.inter.bandwidth_gbs * 1e9);
  json::Value recommended;
  if (plan.recommended >= 0) {
    recommended = json::Value::Object{
        {"index", plan.recommended},
        {"layout", LayoutJson(plan.feasible[static_cast<size_t>(plan.recommended)].layout)},
        {"rule", plan.rule}};
  } else {
    recommended = json::Value::Object{{"rule", plan.rule}};
  }
  return json::Value::Object{
      {"schema", "loom-plan/1"},
      {"model", json::Value::Object{{"params", m.params},
                                    {"layers", m.layers},
                                    {"hidden", m.hidden},
                                    {"heads", m.heads},
                                    {"vocab", m.vocab},
                                    {"seq", m.seq},
                                    {"shape", m.source}}},
      {"training", json::Value::Object{{"global_batch", static_cast<int64_t>(t.global_batch)},
                                       {"micro_batch", t.micro_batch},
                                       {"dtype", DtypeName(t.dtype)},
                                       {"fp32_grads", t.fp32_grads},
                                       {"optimizer", t.optimizer == Optimizer::kAdam ? "adam" : "sgd"}}},
      {"cluster", json::Value::Object{{"gpus", c.gpus},
                                      {"gpus_per_node", c.gpus_per_node},
                                      {"gpu_mem_gb", Round3(G(c.gpu_mem))},
                                      {"intra", c.intra_label},
                                      {"intra_gbs", c.links.intra.bandwidth_gbs},
                                      {"nvlink", c.nvlink},
                                      {"net", c.net_label},
                                      {"net_gbs", c.links.inter.bandwidth_gbs},
                                      {"tflops", c.tflops},
                                      {"tflops_assumed", !o.tflops_given},
                                      {"rates", RatesJson(o.rates)}}},
      {"recommended", recommended},
      {"feasible", std::move(feasible)},
      {"infeasible", std::move(infeasible)},
      {"zero3_traffic", json::Value::Object{{"quoted_gb", Round3(G(z.quoted_bytes))},
                                            {"quoted_s", Round3(z.quoted_s)},
                                            {"bf16_gb", Round3(G(z.bf16_bytes))},
                                            {"bf16_s", Round3(z.bf16_s)},
                                            {"fp32_gb", Round3(G(z.fp32_bytes))},
                                            {"fp32_s", Round3(z.fp32_s)}}},
  };
}

namespace {

const GroupTraffic* FindGroup(const TrainerRank& r, const std::string& name) {
  for (const GroupTraffic& g : r.groups) {
    if (g.group == name) return &g;
  }
  return nullptr;
}

Result<int64_t> Int(const json::Value& obj, const char* key) {
  const json::Value* v = obj.Find(key);
  if (v == nullptr || !v->is_number() || v->number() < 0 || v->number() != std::floor(v->number())) {
    return InvalidArgument(std::string("no whole number \"") + key + "\"");
  }
  return static_cast<int64_t>(v->number());
}

Result<TrainerRank> RankOfJson(const json::Value& line) {
  TrainerRank r;
  LOOM_ASSIGN_OR_RETURN(int64_t rank, Int(line, "rank"));
  LOOM_ASSIGN_OR_RETURN(int64_t dp, Int(line, "dp_rank"));
  LOOM_ASSIGN_OR_RETURN(int64_t tp, Int(line, "tp_rank"));
  LOOM_ASSIGN_OR_RETURN(int64_t pp, Int(line, "pp_rank"));
  r.rank = static_cast<int>(rank), r.dp_rank = static_cast<int>(dp), r.tp_rank = static_cast<int>(tp);
  r.pp_rank = static_cast<int>(pp);
  const json::Value* same = line.Find("same_every_step");
  if (same == nullptr || !same->is_bool() || !same->boolean()) {
    return InvalidArgument("rank " + std::to_string(rank) + ": its steps did not all move the same bytes");
  }
  const json::Value* groups = line.Find("groups");
  if (groups == nullptr || !groups->is_array()) return InvalidArgument("no \"groups\"");
  for (const json::Value& g : groups->array()) {
    GroupTraffic t;
    const json::Value* name = g.Find("name");
    if (name == nullptr || !name->is_string()) return InvalidArgument("a group without \"name\"");
    t.group = name->string();
    LOOM_ASSIGN_OR_RETURN(int64_t size, Int(g, "size"));
    t.size = static_cast<int>(size);
    LOOM_ASSIGN_OR_RETURN(t.ops, Int(g, "ops"));
    LOOM_ASSIGN_OR_RETURN(t.allreduce, Int(g, "allreduce"));
    LOOM_ASSIGN_OR_RETURN(t.reducescatter, Int(g, "reducescatter"));
    LOOM_ASSIGN_OR_RETURN(t.allgather, Int(g, "allgather"));
    LOOM_ASSIGN_OR_RETURN(t.send, Int(g, "send"));
    r.groups.push_back(t);
  }
  const json::Value* mem = line.Find("memory");
  if (mem == nullptr || !mem->is_object()) return InvalidArgument("no \"memory\"");
  LOOM_ASSIGN_OR_RETURN(r.params, Int(*mem, "params"));
  LOOM_ASSIGN_OR_RETURN(r.grads, Int(*mem, "grads"));
  LOOM_ASSIGN_OR_RETURN(r.optimizer, Int(*mem, "optimizer"));
  return r;
}

}  // namespace

Result<std::vector<TrainerRank>> ParseTrainerReport(std::string_view text) {
  std::vector<TrainerRank> ranks;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    const size_t brace = line.find('{');
    if (brace == std::string_view::npos || line.find("loom-train-bytes/1") == std::string_view::npos) continue;
    auto doc = json::Parse(line.substr(brace));
    if (!doc.ok()) return InvalidArgument("line " + std::to_string(line_no) + ": " + doc.status().message());
    auto rank = RankOfJson(*doc);
    if (!rank.ok()) return InvalidArgument("line " + std::to_string(line_no) + ": " + rank.status().message());
    for (const TrainerRank& r : ranks) {
      if (r.rank == rank->rank) return InvalidArgument("rank " + std::to_string(r.rank) + " reported twice");
    }
    ranks.push_back(*rank);
  }
  if (ranks.empty()) return InvalidArgument("no loom-train-bytes/1 line (run loom-train with --report-bytes)");
  std::sort(ranks.begin(), ranks.end(), [](const TrainerRank& a, const TrainerRank& b) { return a.rank < b.rank; });
  return ranks;
}

std::vector<std::string> CompareTrainer(const std::vector<TrainerRank>& predicted,
                                        const std::vector<TrainerRank>& measured) {
  std::vector<std::string> diff;
  if (predicted.size() != measured.size()) {
    diff.push_back(StrPrintf("%zu ranks predicted, %zu measured", predicted.size(), measured.size()));
  }
  auto check = [&](int rank, const std::string& what, int64_t p, int64_t m) {
    if (p != m) {
      diff.push_back(StrPrintf("rank %d %s: predicted %lld, measured %lld", rank, what.c_str(),
                            static_cast<long long>(p), static_cast<long long>(m)));
    }
  };
  for (const TrainerRank& p : predicted) {
    const TrainerRank* m = nullptr;
    for (const TrainerRank& r : measured) {
      if (r.rank == p.rank) m = &r;
    }
    if (m == nullptr) {
      diff.push_back(StrPrintf("rank %d: not measured", p.rank));
      continue;
    }
    check(p.rank, "dp rank", p.dp_rank, m->dp_rank);
    check(p.rank, "tp rank", p.tp_rank, m->tp_rank);
    check(p.rank, "pp rank", p.pp_rank, m->pp_rank);
    for (const GroupTraffic& g : p.groups) {
      const GroupTraffic* mg = FindGroup(*m, g.group);
      if (mg == nullptr) {
        diff.push_back(StrPrintf("rank %d group %s: not measured", p.rank, g.group.c_str()));
        continue;
      }
      check(p.rank, g.group + " size", g.size, mg->size);
      check(p.rank, g.group + " operations", g.ops, mg->ops);
      check(p.rank, g.group + " all-reduce bytes", g.allreduce, mg->allreduce);
      check(p.rank, g.group + " reduce-scatter bytes", g.reducescatter, mg->reducescatter);
      check(p.rank, g.group + " all-gather bytes", g.allgather, mg->allgather);
      check(p.rank, g.group + " send bytes", g.send, mg->send);
    }
    for (const GroupTraffic& g : m->groups) {
      if (FindGroup(p, g.group) == nullptr) {
        diff.push_back(StrPrintf("rank %d group %s: measured, not predicted", p.rank, g.group.c_str()));
      }
    }
    check(p.rank, "parameter bytes", p.params, m->params);
    check(p.rank, "gradient bytes", p.grads, m->grads);
    check(p.rank, "optimizer bytes", p.optimizer, m->optimizer);
  }
  return diff;
}

std::string RenderTrainerText(const std::vector<TrainerRank>& predicted, const std::vector<TrainerRank>* measured,
                              const std::vector<std::string>& differences) {
  std::string s =
      "\nloom-train, exactly (trainer/): per rank and step, the bytes each call hands to loom (its input on this "
      "rank)";
  s += measured != nullptr ? "; beside each, loom-train --report-bytes (= equal)\n" : "\n";
  s += "  rank dp tp pp  group size    ops   allreduce  reducescat   allgather        send       bytes  ring bytes";
  s += measured != nullptr ? "  measured\n" : "\n";
  int64_t total = 0, total_measured = 0;
  for (const TrainerRank& r : predicted) {
    const TrainerRank* m = nullptr;
    if (measured != nullptr) {
      for (const TrainerRank& x : *measured) {
        if (x.rank == r.rank) m = &x;
      }
    }
    for (const GroupTraffic& g : r.groups) {
      const GroupTraffic* mg = m != nullptr ? FindGroup(*m, g.group) : nullptr;
      s += StrPrintf("  %4d %2d %2d %2d  %-5s %4d %6lld %11lld %11lld %11lld %11lld %11lld %11.0f", r.rank, r.dp_rank,
                  r.tp_rank, r.pp_rank, g.group.c_str(), g.size, static_cast<long long>(g.ops),
                  static_cast<long long>(g.allreduce), static_cast<long long>(g.reducescatter),
                  static_cast<long long>(g.allgather), static_cast<long long>(g.send),
                  static_cast<long long>(g.bytes()), g.RingBytes());
      total += g.bytes();
      if (measured != nullptr) {
        s += "  " + (mg == nullptr ? std::string("missing")
                                   : mg->bytes() == g.bytes() && mg->ops == g.ops ? std::string("=")
                                                                                   : StrPrintf("%lld bytes, %lld ops",
                                                                                            static_cast<long long>(mg->bytes()),
                                                                                            static_cast<long long>(mg->ops)));
        if (mg != nullptr) total_measured += mg->bytes();
      }
      s += "\n";
    }
  }
  s += StrPrintf("  all ranks: %lld bytes per step", static_cast<long long>(total));
  s += measured != nullptr ? StrPrintf(", measured %lld\n", static_cast<long long>(total_measured)) : "\n";
  s += "model states allocated per rank (bytes): params grads optimizer\n";
  for (const TrainerRank& r : predicted) {
    s += StrPrintf("  rank %d: %lld %lld %lld", r.rank, static_cast<long long>(r.params), static_cast<long long>(r.grads),
                static_cast<long long>(r.optimizer));
    if (measured != nullptr) {
      const TrainerRank* m = nullptr;
      for (const TrainerRank& x : *measured) {
        if (x.rank == r.rank) m = &x;
      }
      if (m == nullptr) s += "  measured: missing";
      else if (m->params == r.params && m->grads == r.grads && m->optimizer == r.optimizer) s += "  measured: =";
      else s += StrPrintf("  measured: %lld %lld %lld", static_cast<long long>(m->params), static_cast<long long>(m->grads),
                       static_cast<long long>(m->optimizer));
    }
    s += "\n";
  }
  if (measured != nullptr) {
    if (differences.empty()) {
      s += StrPrintf("check: EQUAL, %zu ranks: operations, bytes per group and model states\n", predicted.size());
    } else {
      s += StrPrintf("check: DIFFERENT, %zu differences\n", differences.size());
      for (const std::string& d : differences) s += "  " + d + "\n";
    }
  }
  return s;
}

json::Value RenderTrainerJson(const std::vector<TrainerRank>& predicted, const std::vector<TrainerRank>* measured,
                              const std::vector<std::string>& differences) {
  auto ranks = [](const std::vector<TrainerRank>& list) {
    json::Value::Array out;
    for (const TrainerRank& r : list) {
      json::Value::Array groups;
      for (const GroupTraffic& g : r.groups) {
        groups.push_back(json::Value::Object{{"name", g.group},
                                             {"size", g.size},
                                             {"ops", g.ops},
                                             {"allreduce", g.allreduce},
                                             {"reducescatter", g.reducescatter},
                                             {"allgather", g.allgather},
                                             {"send", g.send},
                                             {"bytes", g.bytes()},
                                             {"ring_bytes", g.RingBytes()}});
      }
      out.push_back(json::Value::Object{
          {"rank", r.rank},
          {"dp_rank", r.dp_rank},
          {"tp_rank", r.tp_rank},
          {"pp_rank", r.pp_rank},
          {"groups", std::move(groups)},
          {"memory", json::Value::Object{{"params", r.params}, {"grads", r.grads}, {"optimizer", r.optimizer}}}});
    }
    return out;
  };
  json::Value::Object o{{"predicted", ranks(predicted)}};
  if (measured != nullptr) {
    o.emplace_back("measured", ranks(*measured));
    o.emplace_back("equal", differences.empty());
    o.emplace_back("differences", json::Value::Array(differences.begin(), differences.end()));
  }
  return o;
}

}  // namespace loom::tools::plan
