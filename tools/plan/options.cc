// Parsing of `loom plan`'s flags (options.h).
#include "tools/plan/options.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

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
  --tflops X           achieved TFLOPs per GPU for compute time (150, assumed)
  --reserve SIZE       CUDA context and kernels per GPU (1.5G)
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
    } else if (flag == "hidden") {
      LOOM_ASSIGN_OR_RETURN(hidden, ParsePositive(flag, v));
    } else if (flag == "heads") {
      LOOM_ASSIGN_OR_RETURN(heads, ParsePositive(flag, v));
    } else if (flag == "vocab") {
      LOOM_ASSIGN_OR_RETURN(vocab, ParsePositive(flag, v));
    } else if (flag == "seq") {
      LOOM_ASSIGN_OR_RETURN(seq, ParsePositive(flag, v));
    } else if (flag == "global-batch") {
      LOOM_ASSIGN_OR_RETURN(int n, ParsePositive(flag, v));
      in.train.global_batch = n;
    } else if (flag == "micro-batch") {
      LOOM_ASSIGN_OR_RETURN(in.train.micro_batch, ParsePositive(flag, v));
    } else if (flag == "dtype") {
      const std::string s = Lower(v);
      if (s == "fp32") in.train.dtype = Dtype::kFp32;
      else if (s == "bf16") in.train.dtype = Dtype::kBf16;
      else if (s == "fp16") in.train.dtype = Dtype::kFp16;
      else return Bad(flag, v, "accepted: fp32, bf16 or fp16");
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
    } else {
      return InvalidArgument("unknown flag --" + flag + " (see loom plan --help)");
    }
  }

  // The model: a shape given, else the preset or derived shape of --params.
  const bool shape_given = layers > 0 || hidden > 0 || heads > 0;
  if (shape_given) {
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
  return o;
}

}  // namespace loom::tools::plan
