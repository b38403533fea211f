// Rendering of `loom topo` output (render.h).
#include "tools/topo/render.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <vector>

#include "topology/paths.h"

namespace loom::tools {
namespace {

using topology::CostAlgo;
using topology::Node;
using topology::NodeKind;
using topology::Topology;

// Message sizes of the selection table: 8 B to 1 GiB, ×8.
constexpr double kSizes[] = {8, 64, 512, 4096, 32768, 262144, 2097152, 16777216, 134217728,
                             1073741824};

const Node& At(const Topology& t, int i) { return t.nodes[static_cast<size_t>(i)]; }

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && u < 3) {
    b /= 1024;
    ++u;
  }
  return Format("%.0f %s", b, units[u]);
}

// Three decimals keep the JSON short and stable.
double Round3(double v) { return std::round(v * 1000) / 1000; }

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

}  // namespace

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

std::string RenderText(const Topology& t, const std::string& source,
                       const topology::JobShape& job) {
  std::string out = "host " + t.hostname + " (" + source + ")\n\n";
  const std::vector<int> devs = MatrixDevices(t);
  size_t width = 5;
  for (int d : devs) width = std::max(width, At(t, d).id.size() + 1);
  const int w = static_cast<int>(width);
  if (devs.empty()) {
    out += "no GPUs or NICs\n";
  } else {
    out += Format("%-*s", w, "");
    for (int d : devs) out += Format("%-*s", w, At(t, d).id.c_str());
    out += "NUMA  CPUs\n";
    for (int a : devs) {
      out += Format("%-*s", w, At(t, a).id.c_str());
      for (int b : devs) out += Format("%-*s", w, CellLabel(t, a, b).c_str());
      const int numa = t.NumaOf(a);
      out += Format("%-6s%s\n", NumaOfLabel(t, a).c_str(), numa < 0 ? "" : At(t, numa).cpuset.c_str());
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
    out += Format("  %-10s %-9s %-8s port %d  %s  %-5s NUMA %s  %s  %s\n", nic.id.c_str(),
                  LayerLabel(nic).c_str(),
                  nic.rate_gbps > 0 ? Format("%gGb/s", nic.rate_gbps).c_str() : "?Gb/s", nic.port,
                  nic.netdev.empty() ? "-" : nic.netdev.c_str(), nic.up ? "up" : "down",
                  NumaOfLabel(t, n).c_str(), nic.bus_id.empty() ? "(no PCI address)" : nic.bus_id.c_str(),
                  nic.mtu > 0 ? Format("mtu %d", nic.mtu).c_str() : "");
  }

  out += Format(
      "\nAll-reduce on %d host(s) x %d rank(s): intra %.1f GB/s %.1f us, network %.1f GB/s per "
      "host %.1f us\n",
      job.hosts, job.ranks_per_host, job.intra_gbs, job.intra_lat_us, job.host_net_gbs,
      job.inter_lat_us);
  out += Format("  %-10s %-13s", "size", "choice");
  for (CostAlgo a : topology::kAllCostAlgos) out += Format("%14s", std::string(Name(a)).c_str());
  out += "   (us)\n";
  for (double s : kSizes) {
    const auto ranked = topology::RankAllReduce(s, job);
    out += Format("  %-10s %-13s", HumanBytes(s).c_str(), std::string(Name(ranked.front().algo)).c_str());
    for (CostAlgo a : topology::kAllCostAlgos) out += Format("%14.1f", AllReduceUs(a, s, job));
    out += "\n";
  }
  return out;
}

json::Value RenderJson(const Topology& t, const topology::JobShape& job) {
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
  json::Value::Object shape;
  shape.emplace_back("hosts", job.hosts);
  shape.emplace_back("ranks_per_host", job.ranks_per_host);
  shape.emplace_back("intra_gbs", Round3(job.intra_gbs));
  shape.emplace_back("intra_lat_us", job.intra_lat_us);
  shape.emplace_back("host_net_gbs", Round3(job.host_net_gbs));
  shape.emplace_back("inter_lat_us", job.inter_lat_us);
  json::Value::Array selection;
  for (double s : kSizes) {
    json::Value::Object row;
    row.emplace_back("bytes", s);
    row.emplace_back("algo", std::string(Name(topology::RankAllReduce(s, job).front().algo)));
    for (CostAlgo a : topology::kAllCostAlgos)
      row.emplace_back(std::string(Name(a)) + "_us", Round3(AllReduceUs(a, s, job)));
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
    if (n.kind == NodeKind::kNic && n.rate_gbps > 0) label += Format("\\n%s %gGb/s", LayerLabel(n).c_str(), n.rate_gbps);
    if (n.kind == NodeKind::kGpu && !n.model.empty()) label += "\\n" + n.model;
    const char* shape = n.kind == NodeKind::kGpu ? "box3d" : n.kind == NodeKind::kNic ? "cds"
                        : n.kind == NodeKind::kNvSwitch ? "hexagon" : "box";
    out += Format("  \"%s\" [label=\"%s\", shape=%s];\n", n.id.c_str(), label.c_str(), shape);
  }
  for (size_t i = 1; i < t.nodes.size(); ++i) {
    const Node& n = t.nodes[i];
    const double bw = topology::UplinkGbs(t, static_cast<int>(i));
    out += Format("  \"%s\" -- \"%s\"", At(t, n.parent).id.c_str(), n.id.c_str());
    out += bw < topology::kLocalGbs ? Format(" [label=\"%g GB/s\"];\n", bw) : ";\n";
  }
  for (const topology::Link& l : t.links) {
    const bool nv = l.kind == topology::LinkKind::kNvLink;
    out += Format("  \"%s\" -- \"%s\" [label=\"%s %g GB/s\", style=%s];\n", At(t, l.a).id.c_str(),
                  At(t, l.b).id.c_str(), nv ? ("NV" + std::to_string(l.count)).c_str() : "SMP",
                  l.bw_gbs, nv ? "bold" : "dashed");
  }
  return out + "}\n";
}

std::string RenderSimulation(const Topology& host, int ranks_per_host) {
  const int p = std::max(ranks_per_host, 1);
  std::string out = Format("All-reduce cost model, %d ranks per host like %s\n", p, host.hostname.c_str());
  out += Format("%7s %6s  %-12s %-12s %-12s %-12s  %s\n", "ranks", "hosts", "8 B", "64 KiB",
                "16 MiB", "1 GiB", "tree beats ring up to");
  for (int ranks = 8; ranks <= 4096; ranks *= 2) {
    const int hosts = std::max(ranks / p, 1);
    const topology::JobShape job = topology::ShapeFor(host, hosts, p);
    std::string cells;
    for (double s : {8.0, 65536.0, 16777216.0, 1073741824.0})
      cells += Format("%-13s", std::string(Name(topology::RankAllReduce(s, job).front().algo)).c_str());
    // The largest power-of-two size at which tree is still cheaper than ring.
    double cross = 0;
    for (double s = 1; s <= 1099511627776.0; s *= 2) {
      if (AllReduceUs(CostAlgo::kTree, s, job) < AllReduceUs(CostAlgo::kRing, s, job)) cross = s;
    }
    out += Format("%7d %6d  %s %s\n", job.ranks(), hosts, cells.c_str(),
                  cross > 0 ? HumanBytes(cross).c_str() : "never");
  }
  return out;
}

}  // namespace loom::tools
