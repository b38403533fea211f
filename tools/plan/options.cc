// Parsing of `loom plan`'s flags (options.h).
#include "tools/plan/options.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "topology/json.h"
#include "topology/topo_file.h"

namespace loom::tools::plan {

const char kPlanUsage[] = R"(usage: loom plan --params N | --layers L --hidden H --heads A [--vocab V]
                 --gpus N [--gpus-per-node G] [--gpu-mem 80G] [options]

Chooses the parallel layout (DP x TP x PP, ZeRO stage, recomputation, offload)
of a transformer on a cluster: memory per GPU, communication per GPU per step
on each link class with the algorithm loom's cost model picks, step time, and
the recommended layout with the rule that decided it. Formulas: docs/PLAN.md.

model:
  --params N           parameter count: 65B, 1.3B, 175e9, 6700M; a known size
                       (1.3B 7B 13B 20B 65B 70B 175B 176B) brings its shape
  --layers L --hidden H --heads A   the shape (parameters follow from it
                       unless --params is given too)
  --vocab V (50257 or the preset's)  --seq S (2048)
  --model loom-train   the example trainer's GPT (trainer/, docs/trainer.md):
                       vocabulary 128, hidden (channels) 64, 4 heads, 4 layers,
                       sequence 32, fp32, AdamW, global batch 8; the shape
                       flags and --global-batch (--batch) change it; its flags
                       --micro-batches M (1) --schedule gpipe|1f1b (1f1b)
                       --sync plain|bucketed|overlap (overlap) --bucket-floats N
training:
  --global-batch N     sequences per optimizer step (1024)
  --micro-batch N      sequences per forward pass per DP rank (1)
  --dtype fp32|bf16|fp16   bf16/fp16: mixed precision with fp32 master
                       weights and optimizer state (bf16)
  --fp32-grads on|off  mixed precision: gradients accumulated and reduced in
                       an fp32 copy, as Megatron and DeepSpeed do (on)
  --optimizer adam|sgd (adam; sgd with momentum)
  --recompute on|off|auto  full activation recomputation; auto tries both (auto)
cluster:
  --gpus N             GPUs in all (required)
  --gpus-per-node G    (8, or N when N is smaller)
  --gpu-mem SIZE       memory per GPU: 80G, 40GB, 24GiB (80G)
  --cpu-mem SIZE       CPU memory per node, checked for offload (not checked)
  --intra KIND[:RATE]  GPU to GPU in a node: nvlink (300GB/s), pcie (32GB/s),
                       e.g. nvlink:900GB/s, pcie:16GB/s
  --net [ib:|roce:|eth:][Nx]RATE   the network of one node, all its GPUs:
                       10gbit, 100Gb/s, ib:400gbit, 8x400gbit, 50GB/s
                       (400gbit; ib/roce or >= 100 Gb/s: RDMA latency 5 us,
                       else sockets 20 us)
  --topo FILE          a node's topology (loom JSON or NCCL XML, as `loom topo
                       --file`): intra and inter links as `loom topo` prices them
  --rates [intra:|inter:]FILE   measured link rates (repeatable, applied last):
                       `loom perf --json` output: its peak all_reduce bus
                       bandwidth, inside a node unless inter: (a run across
                       hosts); `loom doctor --json`: its slowest host-to-host
                       stream, the network; the slowest file per link wins
  --tflops X           achieved TFLOPs per GPU for compute time (150, assumed)
  --reserve SIZE       CUDA context and kernels per GPU (1.5G)
layout:
  --layout dp=D,tp=T,pp=P,zero=Z[,recompute=on][,offload=on]
                       evaluate this one layout (--gpus defaults to D x T x P)
  --check-trainer FILE with --model loom-train and --layout: compare with the
                       lines of `loom-train ... --report-bytes`; exit 1 when
                       any rank's operations, bytes or model states differ
output:
  --json               the whole plan as JSON (schema loom-plan/1)
  --top N              feasible layouts shown (10)   --all   every layout
)";

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// A leading decimal number and the rest: {value, suffix}; false when none.
bool SplitNumber(std::string_view text, double* value, std::string* suffix) {
  const std::string s(text);
  char* end = nullptr;
  *value = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(*value) || *value < 0) return false;
  *suffix = std::string(end);
  return true;
}

Status Bad(const std::string& flag, std::string_view value, const std::string& accepted) {
  return InvalidArgument("--" + flag + " '" + std::string(value) + "': " + accepted);
}

Result<int> ParsePositive(const std::string& flag, std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 1 || v > (1L << 30)) {
    return Bad(flag, text, "not a whole number; accepted: an integer of at least 1");
  }
  return static_cast<int>(v);
}

Result<bool> ParseOnOff(const std::string& flag, std::string_view text) {
  const std::string s = Lower(text);
  if (s == "on" || s == "1" || s == "true") return true;
  if (s == "off" || s == "0" || s == "false") return false;
  return Bad(flag, text, "accepted: on or off");
}

Status ParseIntra(std::string_view text, Cluster* c) {
  const std::string s = Lower(text);
  const size_t colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  double gbs = 0;
  if (kind == "nvlink" || kind == "nvswitch") {
    c->nvlink = true;
    gbs = 300;
    c->links.intra.latency_us = 1.0;
  } else if (kind == "pcie") {
    c->nvlink = false;
    gbs = 32;
    c->links.intra.latency_us = 2.0;
  } else {
    return Bad("intra", text, "accepted: nvlink[:RATE] or pcie[:RATE], e.g. nvlink:300GB/s, pcie:32GB/s");
  }
  if (colon != std::string::npos) {
    auto rate = ParseRate(std::string_view(text).substr(colon + 1));
    if (!rate.ok()) return Bad("intra", text, "accepted: nvlink[:RATE] or pcie[:RATE], e.g. nvlink:300GB/s, pcie:32GB/s");
    gbs = *rate;
  }
  c->links.intra.bandwidth_gbs = gbs;
  c->intra_label = std::string(text);
  return Status::Ok();
}

Status ParseNet(std::string_view text, Cluster* c) {
  const std::string accepted =
      "accepted: [ib:|roce:|eth:][Nx]RATE with RATE like 10gbit, 400Gb/s, 50GB/s";
  std::string_view rest = text;
  int rdma = -1;  // unknown: decided by speed
  const std::string lower = Lower(text);
  for (const auto& [prefix, is_rdma] : {std::pair{"ib:", 1}, std::pair{"roce:", 1}, std::pair{"eth:", 0}}) {
    if (lower.rfind(prefix, 0) == 0) {
      rdma = is_rdma;
      rest.remove_prefix(std::string_view(prefix).size());
    }
  }
  double ports = 1;
  const size_t x = Lower(rest).find('x');
  if (x != std::string::npos && x > 0 && std::isdigit(static_cast<unsigned char>(rest[0]))) {
    std::string suffix;
    if (!SplitNumber(rest.substr(0, x), &ports, &suffix) || !suffix.empty() || ports < 1) {
      return Bad("net", text, accepted);
    }
    rest.remove_prefix(x + 1);
  }
  auto rate = ParseRate(rest);
  if (!rate.ok()) return Bad("net", text, accepted);
  const double gbs = *rate * ports;
  if (rdma < 0) rdma = gbs >= 12.5 ? 1 : 0;  // 100 Gb/s and faster: an RDMA fabric
  c->links.inter.bandwidth_gbs = gbs;
  c->links.inter.latency_us = rdma ? 5.0 : 20.0;
  c->net_label = std::string(text);
  return Status::Ok();
}


// The rates a doctor bandwidth summary quotes as measured ("9.00 Gbit/s",
// "95 Mbit/s"), in Gb/s; "the expected X" is not a measurement.
std::vector<double> MeasuredGbps(const std::string& text) {
  std::vector<double> out;
  for (size_t at = text.find("bit/s"); at != std::string::npos; at = text.find("bit/s", at + 1)) {
    if (at < 3 || text[at - 2] != ' ') continue;
    const double scale = text[at - 1] == 'G' ? 1 : text[at - 1] == 'M' ? 1e-3 : 0;
    size_t begin = at - 2;
    while (begin > 0 && (std::isdigit(static_cast<unsigned char>(text[begin - 1])) || text[begin - 1] == '.')) {
      --begin;
    }
    if (scale == 0 || begin == at - 2) continue;
    if (begin >= 9 && text.compare(begin - 9, 9, "expected ") == 0) continue;
    out.push_back(std::strtod(text.substr(begin, at - 2 - begin).c_str(), nullptr) * scale);
  }
  return out;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("cannot read the file");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Result<double> ParseCount(std::string_view text) {
  double v = 0;
  std::string suffix;
  if (!SplitNumber(text, &v, &suffix)) return InvalidArgument("not a number");
  const std::string s = Lower(suffix);
  double scale = 1;
  if (s == "k") scale = 1e3;
  else if (s == "m") scale = 1e6;
  else if (s == "b" || s == "g") scale = 1e9;
  else if (s == "t") scale = 1e12;
  else if (!s.empty()) return InvalidArgument("unknown suffix '" + suffix + "'");
  if (v * scale < 1) return InvalidArgument("below one");
  return v * scale;
}

Result<double> ParseBytes(std::string_view text) {
  double v = 0;
  std::string suffix;
  if (!SplitNumber(text, &v, &suffix)) return InvalidArgument("not a number");
  const std::string s = Lower(suffix);
  const struct {
    const char* name;
    double scale;
  } units[] = {{"", 1},          {"b", 1},           {"k", 1e3},   {"kb", 1e3},           {"kib", 1024.0},
               {"m", 1e6},       {"mb", 1e6},        {"mib", 1048576.0}, {"g", 1e9},     {"gb", 1e9},
               {"gib", 1073741824.0}, {"t", 1e12},   {"tb", 1e12}, {"tib", 1099511627776.0}};
  for (const auto& u : units) {
    if (s == u.name) return v * u.scale;
  }
  return InvalidArgument("unknown unit '" + suffix + "'");
}

Result<double> ParseRate(std::string_view text) {
  double v = 0;
  std::string suffix;
  if (!SplitNumber(text, &v, &suffix) || v <= 0) return InvalidArgument("not a rate");
  if (suffix.empty()) return InvalidArgument("no unit");
  double scale = 1;
  switch (std::tolower(static_cast<unsigned char>(suffix[0]))) {
    case 'k': scale = 1e-6; break;
    case 'm': scale = 1e-3; break;
    case 'g': scale = 1; break;
    case 't': scale = 1e3; break;
    default: return InvalidArgument("unknown unit '" + suffix + "'");
  }
  const std::string unit = suffix.substr(1);
  const std::string lower = Lower(unit);
  if (lower == "bit" || lower == "bit/s" || lower == "bps" || unit == "b/s" || unit == "b") {
    return v * scale / 8;  // bits
  }
  if (unit == "B/s" || unit == "Bps" || unit == "B") return v * scale;
  return InvalidArgument("unknown unit '" + suffix + "'");
}

Result<Layout> ParseLayout(std::string_view text) {
  const std::string accepted = "accepted: dp=D,tp=T,pp=P,zero=0..3[,recompute=on][,offload=on]";
  Layout l;
  std::string s(text);
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    const std::string item = Lower(s.substr(start, comma - start));
    start = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return Bad("layout", text, accepted);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "recompute" || key == "offload") {
      auto on = ParseOnOff("layout", value);
      if (!on.ok()) return Bad("layout", text, accepted);
      (key == "recompute" ? l.recompute : l.offload) = *on;
      continue;
    }
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < 0 || v > (1L << 20)) return Bad("layout", text, accepted);
    if (key == "dp" && v >= 1) l.dp = static_cast<int>(v);
    else if (key == "tp" && v >= 1) l.tp = static_cast<int>(v);
    else if (key == "pp" && v >= 1) l.pp = static_cast<int>(v);
    else if (key == "zero" && v <= 3) l.zero = static_cast<int>(v);
    else return Bad("layout", text, accepted);
  }
  return l;
}

Result<MeasuredRate> ParseRatesJson(std::string_view text, std::string_view link) {
  LOOM_ASSIGN_OR_RETURN(json::Value doc, json::Parse(text));
  if (!doc.is_object()) return InvalidArgument("not a JSON object");
  char what[160];
  const json::Value* format = doc.Find("format");
  if (format != nullptr && format->is_string() && format->string() == "loom-doctor") {
    if (link == "intra") return InvalidArgument("loom doctor measures streams between hosts: inter: only");
    double lo = std::numeric_limits<double>::infinity();
    int n = 0;
    const json::Value* findings = doc.Find("findings");
    for (const json::Value& f : findings != nullptr && findings->is_array() ? findings->array() : json::Value::Array{}) {
      const json::Value* check = f.Find("check");
      const json::Value* summary = f.Find("summary");
      if (check == nullptr || !check->is_string() || check->string() != "bandwidth" || summary == nullptr ||
          !summary->is_string()) {
        continue;
      }
      for (double gbps : MeasuredGbps(summary->string())) lo = std::min(lo, gbps), ++n;
    }
    if (n == 0) {
      return InvalidArgument("no measured stream in its bandwidth findings (loom doctor streams between two or "
                             "more hosts)");
    }
    std::snprintf(what, sizeof what, "loom doctor: slowest of %d stream rates, %.3g Gbit/s", n, lo);
    return MeasuredRate{LinkClass::kInter, lo / 8, what};
  }
  const json::Value* rows = doc.Find("rows");
  if (rows == nullptr || !rows->is_array()) {
    return InvalidArgument("neither `loom perf --json` (\"rows\") nor `loom doctor --json` (\"format\": \"loom-doctor\")");
  }
  // The peak of all_reduce, else of any collective.
  double best = 0, best_any = 0;
  size_t best_size = 0, best_any_size = 0;
  std::string any_name;
  for (const json::Value& r : rows->array()) {
    const json::Value* bw = r.Find("busbw_gbps");
    const json::Value* coll = r.Find("collective");
    const json::Value* size = r.Find("size");
    if (bw == nullptr || !bw->is_number() || coll == nullptr || !coll->is_string()) continue;
    const size_t bytes = size != nullptr && size->is_number() ? static_cast<size_t>(size->number()) : 0;
    if (bw->number() > best_any) best_any = bw->number(), best_any_size = bytes, any_name = coll->string();
    if (coll->string() == "all_reduce" && bw->number() > best) best = bw->number(), best_size = bytes;
  }
  if (best == 0) best = best_any, best_size = best_any_size;
  else any_name = "all_reduce";
  if (best <= 0) return InvalidArgument("no row with a bus bandwidth above 0 (one rank measures no link)");
  const json::Value* nranks = doc.Find("nranks");
  std::snprintf(what, sizeof what, "loom perf: %s peak bus bandwidth over %d ranks at %zu bytes", any_name.c_str(),
                nranks != nullptr && nranks->is_number() ? static_cast<int>(nranks->number()) : 0, best_size);
  return MeasuredRate{link == "inter" ? LinkClass::kInter : LinkClass::kIntra, best, what};
}

Result<PlanOptions> ParsePlanOptions(int argc, const char* const* argv) {
  PlanOptions o;
  PlanInput& in = o.input;
  Cluster& c = in.cluster;
  c.links.intra = {1.0, 300};
  c.links.inter = {5.0, 50};
  c.gpus = 0;  // required
  double params = 0;
  int layers = 0, hidden = 0, heads = 0, vocab = 0, seq = 0;
  int gpus_per_node = 0;
  bool intra_given = false, net_given = false;
  bool batch_given = false, dtype_given = false, trainer_flag = false;
  std::vector<std::pair<std::string, std::string>> rate_files;  // {link, path}
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      o.help = true;
      return o;
    }
    if (arg == "--json") {
      o.json = true;
      continue;
    }
    if (arg == "--all") {
      o.all = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      return InvalidArgument("unexpected argument '" + arg + "'; flags start with -- (see loom plan --help)");
    }
    const std::string flag = arg.substr(2);
    if (i + 1 >= argc) return InvalidArgument("--" + flag + " needs a value (see loom plan --help)");
    const std::string_view v = argv[++i];
    if (flag == "params") {
      auto r = ParseCount(v);
      if (!r.ok()) return Bad(flag, v, "not a parameter count; accepted: 65B, 1.3B, 6700M, 175e9");
      params = *r;
    } else if (flag == "layers") {
      LOOM_ASSIGN_OR_RETURN(layers, ParsePositive(flag, v));
    } else if (flag == "hidden" || flag == "channels") {
      LOOM_ASSIGN_OR_RETURN(hidden, ParsePositive(flag, v));
    } else if (flag == "heads") {
      LOOM_ASSIGN_OR_RETURN(heads, ParsePositive(flag, v));
    } else if (flag == "vocab") {
      LOOM_ASSIGN_OR_RETURN(vocab, ParsePositive(flag, v));
    } else if (flag == "seq") {
      LOOM_ASSIGN_OR_RETURN(seq, ParsePositive(flag, v));
    } else if (flag == "global-batch" || flag == "batch") {
      LOOM_ASSIGN_OR_RETURN(int n, ParsePositive(flag, v));
      in.train.global_batch = n;
      batch_given = true;
    } else if (flag == "micro-batch") {
      LOOM_ASSIGN_OR_RETURN(in.train.micro_batch, ParsePositive(flag, v));
    } else if (flag == "dtype") {
      const std::string s = Lower(v);
      if (s == "fp32") in.train.dtype = Dtype::kFp32;
      else if (s == "bf16") in.train.dtype = Dtype::kBf16;
      else if (s == "fp16") in.train.dtype = Dtype::kFp16;
      else return Bad(flag, v, "accepted: fp32, bf16 or fp16");
      dtype_given = true;
    } else if (flag == "optimizer") {
      const std::string s = Lower(v);
      if (s == "adam" || s == "adamw") in.train.optimizer = Optimizer::kAdam;
      else if (s == "sgd") in.train.optimizer = Optimizer::kSgd;
      else return Bad(flag, v, "accepted: adam or sgd");
    } else if (flag == "fp32-grads") {
      LOOM_ASSIGN_OR_RETURN(in.train.fp32_grads, ParseOnOff(flag, v));
    } else if (flag == "recompute") {
      if (Lower(v) == "auto") {
        in.train.recompute = -1;
      } else {
        auto r = ParseOnOff(flag, v);
        if (!r.ok()) return Bad(flag, v, "accepted: on, off or auto");
        in.train.recompute = *r ? 1 : 0;
      }
    } else if (flag == "gpus") {
      LOOM_ASSIGN_OR_RETURN(c.gpus, ParsePositive(flag, v));
    } else if (flag == "gpus-per-node") {
      LOOM_ASSIGN_OR_RETURN(gpus_per_node, ParsePositive(flag, v));
    } else if (flag == "gpu-mem" || flag == "cpu-mem" || flag == "reserve") {
      auto r = ParseBytes(v);
      if (!r.ok() || (flag != "reserve" && *r <= 0)) {
        return Bad(flag, v, "not a size; accepted: a number with G, GB, GiB, M or T (e.g. 80G)");
      }
      (flag == "gpu-mem" ? c.gpu_mem : flag == "cpu-mem" ? c.cpu_mem : c.reserve) = *r;
    } else if (flag == "intra") {
      LOOM_TRY(ParseIntra(v, &c));
      intra_given = true;
    } else if (flag == "net") {
      LOOM_TRY(ParseNet(v, &c));
      net_given = true;
    } else if (flag == "tflops") {
      double x = 0;
      std::string suffix;
      if (!SplitNumber(v, &x, &suffix) || !suffix.empty() || x <= 0) {
        return Bad(flag, v, "accepted: achieved TFLOPs per GPU, a number above 0 (e.g. 150)");
      }
      c.tflops = x;
      o.tflops_given = true;
    } else if (flag == "top") {
      LOOM_ASSIGN_OR_RETURN(o.top, ParsePositive(flag, v));
    } else if (flag == "topo") {
      o.topo_file = std::string(v);
    } else if (flag == "rates") {
      std::string path(v), link;
      for (const char* prefix : {"intra:", "inter:"}) {
        if (path.rfind(prefix, 0) == 0) link = std::string(prefix, 5), path = path.substr(6);
      }
      rate_files.emplace_back(link, path);
    } else if (flag == "model") {
      if (Lower(v) != "loom-train") return Bad(flag, v, "accepted: loom-train (or --params / the shape flags)");
      o.trainer = true;
    } else if (flag == "layout") {
      LOOM_ASSIGN_OR_RETURN(o.layout, ParseLayout(v));
      o.layout_given = true;
    } else if (flag == "check-trainer") {
      o.check_trainer = std::string(v);
    } else if (flag == "micro-batches") {
      LOOM_ASSIGN_OR_RETURN(o.trainer_model.micro_batches, ParsePositive(flag, v));
      trainer_flag = true;
    } else if (flag == "bucket-floats") {
      LOOM_ASSIGN_OR_RETURN(int n, ParsePositive(flag, v));
      o.trainer_model.bucket_floats = n;
      trainer_flag = true;
    } else if (flag == "schedule") {
      const std::string sched = Lower(v);
      if (sched != "gpipe" && sched != "1f1b") return Bad(flag, v, "accepted: gpipe or 1f1b");
      o.trainer_model.gpipe = sched == "gpipe";
      trainer_flag = true;
    } else if (flag == "sync") {
      const std::string sync = Lower(v);
      using Sync = TrainerModel::Sync;
      if (sync == "plain") o.trainer_model.sync = Sync::kPlain;
      else if (sync == "bucketed") o.trainer_model.sync = Sync::kBucketed;
      else if (sync == "overlap") o.trainer_model.sync = Sync::kOverlap;
      else return Bad(flag, v, "accepted: plain, bucketed or overlap");
      trainer_flag = true;
    } else {
      return InvalidArgument("unknown flag --" + flag + " (see loom plan --help)");
    }
  }

  if (trainer_flag && !o.trainer) {
    return InvalidArgument("--micro-batches, --schedule, --sync and --bucket-floats are loom-train's: give "
                           "--model loom-train");
  }
  if (!o.check_trainer.empty() && (!o.trainer || !o.layout_given)) {
    return InvalidArgument("--check-trainer needs --model loom-train and --layout (the layout loom-train ran)");
  }
  // The model: loom-train's, a shape given, else the preset or derived shape of --params.
  const bool shape_given = layers > 0 || hidden > 0 || heads > 0;
  if (o.trainer) {
    if (params > 0) return InvalidArgument("--model loom-train counts its own parameters: drop --params");
    if (dtype_given && in.train.dtype != Dtype::kFp32) {
      return InvalidArgument("--dtype: loom-train trains in fp32; accepted with --model loom-train: fp32");
    }
    TrainerModel& t = o.trainer_model;
    if (layers > 0) t.layers = layers;
    if (hidden > 0) t.channels = hidden;
    if (heads > 0) t.heads = heads;
    if (vocab > 0) t.vocab = vocab;
    if (seq > 0) t.seq = seq;
    if (batch_given) t.batch = static_cast<int>(in.train.global_batch);
    in.model = TrainerShape(t);
    in.train.global_batch = t.batch;
    in.train.dtype = Dtype::kFp32;
    in.train.optimizer = Optimizer::kAdam;
    in.train.recompute = 0;
    // With a layout, sequences per micro-batch follow from its DP degree and
    // --micro-batches; a search keeps --micro-batch (sequences, 1).
    const int dp = o.layout.dp;
    if (o.layout_given && t.batch % (dp * t.micro_batches) == 0) {
      in.train.micro_batch = t.batch / (dp * t.micro_batches);
    }
  } else if (shape_given) {
    if (layers == 0 || hidden == 0 || heads == 0) {
      return InvalidArgument("--layers, --hidden and --heads go together: give all three, or --params alone");
    }
    if (hidden % heads != 0) {
      return InvalidArgument("--heads " + std::to_string(heads) + ": does not divide --hidden " +
                             std::to_string(hidden) + "; accepted: a divisor of the hidden size");
    }
    in.model.layers = layers;
    in.model.hidden = hidden;
    in.model.heads = heads;
    in.model.vocab = vocab > 0 ? vocab : 50257;
    in.model.params = params > 0 ? params : ParamsOfShape(layers, hidden, in.model.vocab);
    in.model.source = params > 0 ? "shape given, parameters given" : "shape given";
  } else if (params > 0) {
    in.model = ShapeForParams(params);
    if (vocab > 0) in.model.vocab = vocab;
  } else {
    return InvalidArgument("no model: give --params (e.g. 65B) or --layers, --hidden and --heads");
  }
  if (seq > 0) in.model.seq = seq;
  if (o.layout_given) {
    const int n = o.layout.dp * o.layout.tp * o.layout.pp;
    if (c.gpus == 0) c.gpus = n;
    if (c.gpus != n) {
      return InvalidArgument("--layout: DP x TP x PP = " + std::to_string(n) + " but --gpus " +
                             std::to_string(c.gpus) + "; accepted: a layout of all the GPUs");
    }
  }
  if (c.gpus < 1) return InvalidArgument("--gpus is required: the number of GPUs in all (e.g. --gpus 64)");
  c.gpus_per_node = gpus_per_node > 0 ? gpus_per_node : std::min(c.gpus, 8);
  if (c.gpus % c.gpus_per_node != 0) {
    return InvalidArgument("--gpus " + std::to_string(c.gpus) + ": not a multiple of --gpus-per-node " +
                           std::to_string(c.gpus_per_node) + "; accepted: whole nodes");
  }
  if (!o.topo_file.empty()) {
    auto t = topology::LoadTopologyFile(o.topo_file);
    if (!t.ok()) return InvalidArgument("--topo '" + o.topo_file + "': " + t.status().message());
    const topology::HostLinkCosts links = topology::LinkCostsFor(*t, c.gpus_per_node);
    if (!intra_given) {
      c.links.intra = links.intra;
      c.nvlink = links.intra.latency_us <= 1.0;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s:%.0fGB/s", c.nvlink ? "nvlink" : "pcie", links.intra.bandwidth_gbs);
      c.intra_label = std::string(buf) + " (topo file)";
    }
    if (!net_given) {
      c.links.inter = links.inter;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.0fgbit", links.inter.bandwidth_gbs * 8);
      c.net_label = std::string(buf) + " (topo file)";
    }
  }
  if (!intra_given && o.topo_file.empty()) c.intra_label = "nvlink:300GB/s";
  if (!net_given && o.topo_file.empty()) c.net_label = "400gbit";
  // Measured rates replace the bandwidth of the link they measured (the
  // slowest file per link); its kind and latency stay as --intra, --net or
  // --topo set them.
  for (const auto& [link, path] : rate_files) {
    auto text = ReadFile(path);
    if (!text.ok()) return InvalidArgument("--rates '" + path + "': " + text.status().message());
    auto rate = ParseRatesJson(*text, link);
    if (!rate.ok()) return InvalidArgument("--rates '" + path + "': " + rate.status().message());
    rate->what += " (" + path + ")";
    o.rates.push_back(*rate);
  }
  for (LinkClass link : {LinkClass::kIntra, LinkClass::kInter}) {
    const MeasuredRate* slowest = nullptr;
    for (const MeasuredRate& r : o.rates) {
      if (r.link == link && (slowest == nullptr || r.gbs < slowest->gbs)) slowest = &r;
    }
    if (slowest == nullptr) continue;
    char buf[64];
    if (link == LinkClass::kIntra) {
      c.links.intra.bandwidth_gbs = slowest->gbs;
      std::snprintf(buf, sizeof buf, "%s:%.3gGB/s (measured)", c.nvlink ? "nvlink" : "pcie", slowest->gbs);
      c.intra_label = buf;
    } else {
      c.links.inter.bandwidth_gbs = slowest->gbs;
      // Latency as --net RATE without a prefix would set it, unless given.
      if (!net_given && o.topo_file.empty()) c.links.inter.latency_us = slowest->gbs >= 12.5 ? 5.0 : 20.0;
      std::snprintf(buf, sizeof buf, "%.3ggbit (measured)", slowest->gbs * 8);
      c.net_label = buf;
    }
  }
  return o;
}

}  // namespace loom::tools::plan
