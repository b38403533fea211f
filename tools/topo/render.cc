// Rendering of `loom topo` output (render.h); the algorithm columns are the
// runtime CostModel's predictions and the choice is SelectAlgo's.
#include "tools/topo/render.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <vector>

#include "base/strings.h"
#include "topology/paths.h"

namespace loom::tools {
namespace {

using topology::Node;
using topology::NodeKind;
using topology::Topology;

// Message sizes of the selection table: 8 B to 1 GiB, ×8.
constexpr size_t kSizes[] = {8,      64,      512,      4096,      32768,
                             262144, 2097152, 16777216, 134217728, 1073741824};

const Node& At(const Topology& t, int i) {
  return t.nodes[static_cast<size_t>(i)];
}

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && u < 3) {
    b /= 1024;
    ++u;
  }
  return StrPrintf("%.0f %s", b, units[u]);
}

// Three decimals keep the JSON short and stable.
double Round3(double v) {
  return std::round(v * 1000) / 1000;
}

std::string NumaOfLabel(const Topology& t, int i) {
  const int numa = t.NumaOf(i);
  return numa < 0 ? "-" : std::to_string(At(t, numa).numa_id);
}

std::string LayerLabel(const Node& n) {
  if (n.link_layer == topology::LinkLayer::kInfiniBand) return "IB";
  if (n.link_layer == topology::LinkLayer::kEthernet) {
    if (!n.rdma) return "Ethernet";
    return n.roce_version > 0 ? "RoCEv" + std::to_string(n.roce_version) : "RoCE";
  }
  return "unknown";
}

// The runtime's model of the job: JobTopology::Uniform is what a
// communicator of this shape would fuse from its ranks' records.
CostModel ModelOf(const JobSpec& job) {
  return CostModel(topology::JobTopology::Uniform(job.hosts, job.ranks_per_host, job.links.intra,
                                                  job.links.inter));
}

// The algorithms whose estimates the tables show. Not the small-collective
// slots: they live in a running job's shared memory, which a topology does
// not show (the model leaves them out, so they are never chosen here).
std::vector<Algo> ModeledAlgos() {
  std::vector<Algo> out;
  for (Algo a : CandidateAlgos(OpKind::kAllReduce)) {
    if (a != Algo::kSlots) out.push_back(a);
  }
  return out;
}

// "ring", or "ring (tune)" when LOOM_TUNE named it, "ring (fallback)" when
// NCCL_ALGO allowed nothing that runs in this job.
std::string ChoiceLabel(const Choice& c) {
  std::string s = ShortAlgoName(c.algo);
  if (c.source == Choice::Source::kTune) s += " (tune)";
  if (c.source == Choice::Source::kFallback) s += " (fallback)";
  return s;
}

const char* SourceName(Choice::Source source) {
  switch (source) {
    case Choice::Source::kModel:
      return "model";
    case Choice::Source::kTune:
      return "tune";
    case Choice::Source::kFallback:
      return "fallback";
  }
  return "?";
}

// The knobs in effect, for the header line: "" when neither is set.
std::string KnobsNote(const JobSpec& job) {
  std::string s;
  if (!job.nccl_algo.empty()) s += " NCCL_ALGO=" + job.nccl_algo;
  if (!job.loom_tune.empty()) s += " LOOM_TUNE=" + job.loom_tune;
  return s.empty() ? s : " with" + s;
}

}  // namespace

Result<JobSpec> MakeJobSpec(const Topology& t, int hosts, int ranks_per_host,
                            std::string_view nccl_algo, std::string_view loom_tune) {
  JobSpec job;
  job.hosts = std::max(hosts, 1);
  const int gpus = static_cast<int>(t.OfKind(NodeKind::kGpu).size());
  int cores = 0;
  for (int n : t.OfKind(NodeKind::kNuma)) cores += t.nodes[static_cast<size_t>(n)].cores;
  if (ranks_per_host > 0) {
    job.ranks_per_host = ranks_per_host;
  } else if (gpus > 0) {
    job.ranks_per_host = gpus;
    job.ranks_note = "one rank per GPU";
  } else {
    // A CPU-only host runs a rank per core, as `loom run` binds them.
    job.ranks_per_host = std::max(cores, 1);
    job.ranks_note = cores > 0 ? "one rank per core: no GPUs" : "no GPUs, and the cores are unknown";
  }
  job.links = topology::LinkCostsFor(t, job.ranks_per_host);
  LOOM_ASSIGN_OR_RETURN(job.filter, AlgoFilter::Parse(nccl_algo));
  LOOM_ASSIGN_OR_RETURN(job.tune, TuneTable::Parse(loom_tune));
  job.nccl_algo = std::string(nccl_algo);
  job.loom_tune = std::string(loom_tune);
  return job;
}

std::string ShortAlgoName(Algo algo) {
  switch (algo) {
    case Algo::kRing:
      return "ring";
    case Algo::kTree:
      return "tree";
    case Algo::kRecursiveDoubling:
      return "recdoubling";
    case Algo::kDirect:
      return "direct";
    case Algo::kHierarchical:
      return "hierarchical";
    default:
      break;
  }
  std::string s = AlgoName(algo);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<int> MatrixDevices(const Topology& t) {
  std::vector<int> out = t.OfKind(NodeKind::kGpu);
  for (int n : t.OfKind(NodeKind::kNic)) out.push_back(n);
  return out;
}

std::string CellLabel(const Topology& t, int a, int b) {
  const topology::Path p = topology::ClassifyPath(t, a, b);
  if (p.type == topology::PathType::kLoc) return "X";
  if (p.type == topology::PathType::kNvl) return "NV" + std::to_string(p.nvlinks);
  return std::string(topology::Name(p.type));
}

std::string RenderText(const Topology& t, const std::string& source, const JobSpec& job) {
  std::string out = "host " + t.hostname + " (" + source + ")\n\n";
  const std::vector<int> devs = MatrixDevices(t);
  size_t width = 5;
  for (int d : devs) width = std::max(width, At(t, d).id.size() + 1);
  const int w = static_cast<int>(width);
  if (devs.empty()) {
    out += "no GPUs or NICs\n";
  } else {
    out += StrPrintf("%-*s", w, "");
    for (int d : devs) out += StrPrintf("%-*s", w, At(t, d).id.c_str());
    out += "NUMA  CPUs\n";
    for (int a : devs) {
      out += StrPrintf("%-*s", w, At(t, a).id.c_str());
      for (int b : devs) out += StrPrintf("%-*s", w, CellLabel(t, a, b).c_str());
      const int numa = t.NumaOf(a);
      out +=
          StrPrintf("%-6s%s\n", NumaOfLabel(t, a).c_str(), numa < 0 ? "" : At(t, numa).cpuset.c_str());
    }
    out +=
        "\nLegend: X = self; NV# = NVLink with # lanes (directly or via NVSwitch); NVB = NVLink\n"
        "through another GPU; PIX = one PCIe switch; PXB = several PCIe switches; PHB = a PCIe\n"
        "host bridge; NODE = between host bridges of one NUMA node; SYS = across NUMA nodes.\n";
  }

  out += "\nNICs:\n";
  const std::vector<int> nics = t.OfKind(NodeKind::kNic);
  if (nics.empty()) out += "  none\n";
  for (int n : nics) {
    const Node& nic = At(t, n);
    out += StrPrintf("  %-10s %-9s %-8s port %d  %s  %-5s NUMA %s  %s  %s\n", nic.id.c_str(),
                  LayerLabel(nic).c_str(),
                  nic.rate_gbps > 0 ? StrPrintf("%gGb/s", nic.rate_gbps).c_str() : "?Gb/s", nic.port,
                  nic.netdev.empty() ? "-" : nic.netdev.c_str(), nic.up ? "up" : "down",
                  NumaOfLabel(t, n).c_str(),
                  nic.bus_id.empty() ? "(no PCI address)" : nic.bus_id.c_str(),
                  nic.mtu > 0 ? StrPrintf("mtu %d", nic.mtu).c_str() : "");
  }

  const topology::HostLinkCosts& l = job.links;
  out += StrPrintf(
      "\nAll-reduce on %d host(s) x %d rank(s)%s: intra %.1f GB/s %.1f us, network %.1f GB/s per "
      "host %.1f us%s\n",
      job.hosts, job.ranks_per_host,
      job.ranks_note.empty() ? "" : (" (" + job.ranks_note + "; --ranks-per-host to change)").c_str(),
      l.intra.bandwidth_gbs, l.intra.latency_us, l.inter.bandwidth_gbs, l.inter.latency_us,
      KnobsNote(job).c_str());
  const CostModel model = ModelOf(job);
  const std::vector<Algo> algos = ModeledAlgos();
  std::vector<Choice> choices;
  size_t choice_width = 13;
  for (size_t s : kSizes) {
    choices.push_back(SelectAlgo(OpKind::kAllReduce, s, model, job.filter, job.tune));
    choice_width = std::max(choice_width, ChoiceLabel(choices.back()).size() + 1);
  }
  const int cw = static_cast<int>(choice_width);
  out += StrPrintf("  %-10s %-*s", "size", cw, "choice");
  for (Algo a : algos) out += StrPrintf("%14s", ShortAlgoName(a).c_str());
  out += "   (us)\n";
  for (size_t i = 0; i < std::size(kSizes); ++i) {
    out += StrPrintf("  %-10s %-*s", HumanBytes(static_cast<double>(kSizes[i])).c_str(), cw,
                  ChoiceLabel(choices[i]).c_str());
    for (Algo a : algos) {
      const double us = model.PredictUs(OpKind::kAllReduce, a, kSizes[i]);
      out += std::isinf(us) ? StrPrintf("%14s", "n/a") : StrPrintf("%14.1f", us);
    }
    out += "\n";
  }
  // Why the n/a columns are n/a, in the TUNING log's words.
  std::string unavailable;
  if (!model.hierarchical_unavailable().empty() && model.nranks() > 1) {
    unavailable = "hierarchical (" + model.hierarchical_unavailable() + ")";
  }
  if (std::isinf(model.PredictUs(OpKind::kAllReduce, Algo::kDirect, 1))) {
    unavailable += std::string(unavailable.empty() ? "" : ", ") +
                   "direct (needs single-copy reads within one host; a topology cannot show them)";
  }
  if (!unavailable.empty()) out += "  n/a: " + unavailable + "\n";
  if (model.nranks() <= 1) out += "  one rank: nothing to exchange, every estimate is 0\n";
  return out;
}

json::Value RenderJson(const Topology& t, const JobSpec& job) {
  json::Value::Object root;
  root.emplace_back("schema", "loom-topo/1");
  root.emplace_back("hostname", t.hostname);
  const std::vector<int> devs = MatrixDevices(t);
  json::Value::Array names;
  json::Value::Array matrix;
  for (int a : devs) {
    names.emplace_back(At(t, a).id);
    json::Value::Array row;
    for (int b : devs) row.emplace_back(CellLabel(t, a, b));
    matrix.emplace_back(std::move(row));
  }
  json::Value::Array paths;
  for (size_t i = 0; i < devs.size(); ++i) {
    for (size_t j = i + 1; j < devs.size(); ++j) {
      const topology::Path p = topology::ClassifyPath(t, devs[i], devs[j]);
      json::Value::Object o;
      o.emplace_back("a", At(t, devs[i]).id);
      o.emplace_back("b", At(t, devs[j]).id);
      o.emplace_back("type", std::string(Name(p.type)));
      o.emplace_back("bw_gbs", Round3(p.bw_gbs));
      if (p.nvlinks > 0) o.emplace_back("nvlinks", p.nvlinks);
      paths.emplace_back(std::move(o));
    }
  }
  json::Value::Array gpus;
  for (int g : t.OfKind(NodeKind::kGpu)) {
    json::Value::Object o;
    o.emplace_back("id", At(t, g).id);
    o.emplace_back("bus_id", At(t, g).bus_id);
    o.emplace_back("model", At(t, g).model);
    o.emplace_back("sm", At(t, g).sm);
    o.emplace_back("numa", NumaOfLabel(t, g));
    const int nic = topology::ClosestNic(t, g);
    o.emplace_back("nic", nic < 0 ? json::Value() : json::Value(At(t, nic).id));
    gpus.emplace_back(std::move(o));
  }
  json::Value::Array nics;
  for (int n : t.OfKind(NodeKind::kNic)) {
    const Node& nic = At(t, n);
    json::Value::Object o;
    o.emplace_back("id", nic.id);
    o.emplace_back("transport", LayerLabel(nic));
    o.emplace_back("rate_gbps", nic.rate_gbps);
    o.emplace_back("port", nic.port);
    o.emplace_back("netdev", nic.netdev);
    o.emplace_back("up", nic.up);
    o.emplace_back("numa", NumaOfLabel(t, n));
    o.emplace_back("bus_id", nic.bus_id);
    nics.emplace_back(std::move(o));
  }
  const topology::HostLinkCosts& l = job.links;
  json::Value::Object shape;
  shape.emplace_back("hosts", job.hosts);
  shape.emplace_back("ranks_per_host", job.ranks_per_host);
  shape.emplace_back("intra_gbs", Round3(l.intra.bandwidth_gbs));
  shape.emplace_back("intra_lat_us", l.intra.latency_us);
  shape.emplace_back("host_net_gbs", Round3(l.inter.bandwidth_gbs));
  shape.emplace_back("inter_lat_us", l.inter.latency_us);
  shape.emplace_back("nccl_algo", job.nccl_algo);
  shape.emplace_back("loom_tune", job.loom_tune);
  const CostModel model = ModelOf(job);
  json::Value::Array selection;
  for (size_t s : kSizes) {
    const Choice c = SelectAlgo(OpKind::kAllReduce, s, model, job.filter, job.tune);
    json::Value::Object row;
    row.emplace_back("bytes", static_cast<double>(s));
    row.emplace_back("algo", ShortAlgoName(c.algo));
    row.emplace_back("source", SourceName(c.source));
    for (Algo a : ModeledAlgos()) {
      const double us = model.PredictUs(OpKind::kAllReduce, a, s);
      row.emplace_back(ShortAlgoName(a) + "_us", std::isinf(us) ? json::Value() : Round3(us));
    }
    selection.emplace_back(std::move(row));
  }
  root.emplace_back("devices", std::move(names));
  root.emplace_back("matrix", std::move(matrix));
  root.emplace_back("paths", std::move(paths));
  root.emplace_back("gpus", std::move(gpus));
  root.emplace_back("nics", std::move(nics));
  root.emplace_back("job", std::move(shape));
  root.emplace_back("allreduce", std::move(selection));
  return json::Value(std::move(root));
}

std::string RenderDot(const Topology& t) {
  std::string out = "graph \"" + t.hostname + "\" {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    const Node& n = t.nodes[i];
    std::string label = n.id;
    if (n.kind == NodeKind::kNic && n.rate_gbps > 0)
      label += StrPrintf("\\n%s %gGb/s", LayerLabel(n).c_str(), n.rate_gbps);
    if (n.kind == NodeKind::kGpu && !n.model.empty()) label += "\\n" + n.model;
    const char* shape = n.kind == NodeKind::kGpu        ? "box3d"
                        : n.kind == NodeKind::kNic      ? "cds"
                        : n.kind == NodeKind::kNvSwitch ? "hexagon"
                                                        : "box";
    out += StrPrintf("  \"%s\" [label=\"%s\", shape=%s];\n", n.id.c_str(), label.c_str(), shape);
  }
  for (size_t i = 1; i < t.nodes.size(); ++i) {
    const Node& n = t.nodes[i];
    const double bw = topology::UplinkGbs(t, static_cast<int>(i));
    out += StrPrintf("  \"%s\" -- \"%s\"", At(t, n.parent).id.c_str(), n.id.c_str());
    out += bw < topology::kLocalGbs ? StrPrintf(" [label=\"%g GB/s\"];\n", bw) : ";\n";
  }
  for (const topology::Link& l : t.links) {
    const bool nv = l.kind == topology::LinkKind::kNvLink;
    out += StrPrintf("  \"%s\" -- \"%s\" [label=\"%s %g GB/s\", style=%s];\n", At(t, l.a).id.c_str(),
                  At(t, l.b).id.c_str(), nv ? ("NV" + std::to_string(l.count)).c_str() : "SMP",
                  l.bw_gbs, nv ? "bold" : "dashed");
  }
  return out + "}\n";
}

std::string RenderSimulation(const Topology& host, const JobSpec& job) {
  const int p = std::max(job.ranks_per_host, 1);
  std::string out = StrPrintf("All-reduce as the runtime selects it, %d ranks per host like %s%s\n", p,
                           host.hostname.c_str(), KnobsNote(job).c_str());
  out += StrPrintf("%7s %6s  %-12s %-12s %-12s %-12s  %s\n", "ranks", "hosts", "8 B", "64 KiB",
                "16 MiB", "1 GiB", "tree beats ring up to");
  int last_hosts = 0;
  for (int ranks = 8; ranks <= 4096; ranks *= 2) {
    const int hosts = std::max(ranks / p, 1);
    if (hosts == last_hosts) continue;  // more ranks per host than this row has ranks
    last_hosts = hosts;
    JobSpec row = job;
    row.hosts = hosts;
    const CostModel model = ModelOf(row);
    std::string cells;
    for (size_t s : {size_t{8}, size_t{65536}, size_t{16777216}, size_t{1073741824}}) {
      cells += StrPrintf(
          "%-13s",
          ChoiceLabel(SelectAlgo(OpKind::kAllReduce, s, model, job.filter, job.tune)).c_str());
    }
    // The largest power-of-two size at which the tree is still cheaper than
    // the ring (estimates only: the knobs do not change where they cross).
    size_t cross = 0;
    for (size_t s = 1; s <= (size_t{1} << 40); s *= 2) {
      if (model.PredictUs(OpKind::kAllReduce, Algo::kTree, s) <
          model.PredictUs(OpKind::kAllReduce, Algo::kRing, s)) {
        cross = s;
      }
    }
    out += StrPrintf("%7d %6d  %s %s\n", hosts * p, hosts, cells.c_str(),
                  cross > 0 ? HumanBytes(static_cast<double>(cross)).c_str() : "never");
  }
  return out;
}

}  // namespace loom::tools
