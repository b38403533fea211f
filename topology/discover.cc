// Merging the probes, /sys/class/net, and the file-or-discover entry point
// (discover.h).
#include "topology/discover.h"

#include <dirent.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "base/log.h"
#include "topology/host.h"
#include "topology/topo_file.h"

namespace loom::topology {


namespace {

std::string ReadLine(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  char buf[256] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!ok) return "";
  std::string s(buf);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

long ReadLong(const std::string& path, long def) {
  const std::string s = ReadLine(path);
  if (s.empty()) return def;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  return end != nullptr && *end == '\0' ? v : def;
}

Node NicNode(std::string id, std::string bus_id, int parent) {
  Node n;
  n.kind = NodeKind::kNic;
  n.id = std::move(id);
  n.bus_id = std::move(bus_id);
  n.parent = parent;
  return n;
}

// Where a device hwloc did not report goes: the first NUMA node.
int DefaultParent(const Topology& t) {
  const std::vector<int> numa = t.OfKind(NodeKind::kNuma);
  return numa.empty() ? 0 : numa.front();
}

// The NIC node for a PCI function, created when missing. Verbs names win
// over netdev names: the port of an RDMA device is the unit NCCL counts.
int NicFor(Topology* t, const std::string& bus_id, const std::string& id) {
  for (size_t i = 0; i < t->nodes.size(); ++i) {
    const Node& n = t->nodes[i];
    if (n.kind == NodeKind::kNic && !bus_id.empty() && n.bus_id == bus_id) return static_cast<int>(i);
  }
  const int existing = t->FindBusId(bus_id);
  if (existing >= 0 && t->nodes[static_cast<size_t>(existing)].kind == NodeKind::kPci) {
    // hwloc saw the function but not as a network device: hang the NIC below it.
    return t->Add(NicNode(id, "", existing));
  }
  return t->Add(NicNode(id, bus_id, DefaultParent(*t)));
}

std::string UniqueId(const Topology& t, std::string id) {
  if (t.Find(id) < 0) return id;
  for (int i = 1;; ++i) {
    const std::string candidate = id + "#" + std::to_string(i);
    if (t.Find(candidate) < 0) return candidate;
  }
}

}  // namespace

std::string BusIdOfSysfsPath(const std::string& path) {
  std::unique_ptr<char, decltype(&std::free)> real(realpath(path.c_str(), nullptr), &std::free);
  if (!real) return "";
  std::string p(real.get());
  while (!p.empty()) {
    const size_t slash = p.rfind('/');
    const std::string last = p.substr(slash == std::string::npos ? 0 : slash + 1);
    // Only the full form "dddd:bb:dd.f" names a PCI function in sysfs paths.
    if (last.size() == 12 && last[4] == ':') {
      auto norm = NormalizeBusId(last);
      if (norm.ok()) return *norm;
    }
    if (slash == std::string::npos) break;
    p.resize(slash);
  }
  return "";
}

std::vector<SysfsNetDevice> ProbeSysfsNet(std::string_view dir) {
  std::vector<SysfsNetDevice> out;
  const std::string base(dir);
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(base.c_str()), closedir);
  if (!d) return out;
  std::vector<std::string> names;
  while (dirent* e = readdir(d.get())) {
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string p = base + "/" + name + "/";
    SysfsNetDevice dev;
    dev.name = name;
    dev.type = static_cast<int>(ReadLong(p + "type", 0));
    if (dev.type == 772) continue;  // ARPHRD_LOOPBACK
    dev.up = ReadLine(p + "operstate") == "up";
    const long mtu = ReadLong(p + "mtu", 0);
    dev.mtu = mtu > 0 && mtu <= INT_MAX ? static_cast<int>(mtu) : 0;
    // -1 (and (u32)-1 on old kernels) means unknown: not an error.
    const long speed = ReadLong(p + "speed", -1);
    dev.speed_gbps = speed > 0 && speed < UINT32_MAX ? static_cast<double>(speed) / 1000.0 : 0;
    dev.bus_id = BusIdOfSysfsPath(p + "device");
    out.push_back(std::move(dev));
  }
  return out;
}

void MergeProbes(const std::vector<SysfsNetDevice>& net, const VerbsProbe& verbs,
                 const NvmlProbe& nvml, Topology* t) {
  for (const VerbsDevice& dev : verbs.devices) {
    int first = -1;  // the node of the device's first port; later ports sit beside it
    for (const VerbsPort& port : dev.ports) {
      const std::string id = first < 0 ? dev.name : dev.name + ":" + std::to_string(port.port);
      int i = -1;
      if (first < 0) {
        i = NicFor(t, dev.bus_id, id);
        first = i;
      } else {
        i = t->Add(NicNode(UniqueId(*t, id), t->nodes[static_cast<size_t>(first)].bus_id,
                           t->nodes[static_cast<size_t>(first)].parent));
      }
      Node& n = t->nodes[static_cast<size_t>(i)];
      if (n.id != id && t->Find(id) < 0) n.id = id;  // hwloc may have named it after its netdev
      n.rdma = true;
      n.port = port.port;
      n.link_layer = port.link_layer;
      n.up = port.active;
      if (port.rate_gbps > 0) n.rate_gbps = port.rate_gbps;
      if (port.mtu > 0) n.mtu = port.mtu;
      if (!port.netdev.empty()) n.netdev = port.netdev;
      n.roce_version = port.roce_version;
    }
  }
  for (const SysfsNetDevice& dev : net) {
    if (dev.bus_id.empty()) continue;  // bridges, veth, ifb, docker0: no place in the PCI model
    int i = -1;
    for (size_t k = 0; k < t->nodes.size(); ++k) {
      const Node& n = t->nodes[k];
      if (n.kind == NodeKind::kNic && (n.netdev == dev.name || n.id == dev.name)) i = static_cast<int>(k);
    }
    if (i < 0) {
      // An RDMA port of the same function that has no netdev yet (IPoIB) takes it.
      for (size_t k = 0; k < t->nodes.size() && i < 0; ++k) {
        const Node& n = t->nodes[k];
        if (n.kind == NodeKind::kNic && n.bus_id == dev.bus_id && n.rdma && n.netdev.empty())
          i = static_cast<int>(k);
      }
    }
    if (i < 0) i = NicFor(t, dev.bus_id, UniqueId(*t, dev.name));
    Node& n = t->nodes[static_cast<size_t>(i)];
    n.netdev = dev.name;
    if (n.rdma) continue;  // verbs already said rate, state and layer for the port
    n.link_layer = dev.type == 32 ? LinkLayer::kInfiniBand : LinkLayer::kEthernet;
    n.up = dev.up;
    n.mtu = dev.mtu;
    n.rate_gbps = dev.speed_gbps;
  }
  for (const NvmlGpu& g : nvml.gpus) {
    int i = t->FindBusId(g.bus_id);
    if (i < 0 || t->nodes[static_cast<size_t>(i)].kind != NodeKind::kGpu) {
      Node n;
      n.kind = NodeKind::kGpu;
      n.bus_id = i < 0 ? g.bus_id : "";
      n.parent = i < 0 ? DefaultParent(*t) : i;
      n.id = UniqueId(*t, "gpu" + std::to_string(g.index));
      i = t->Add(std::move(n));
    }
    Node& n = t->nodes[static_cast<size_t>(i)];
    n.gpu_index = g.index;
    n.model = g.model;
    n.sm = g.sm;
  }
  // NVLinks last, once every GPU exists; each GPU reports its own lanes, so a
  // GPU-GPU pair is taken from the lower bus id's side only.
  for (const NvmlGpu& g : nvml.gpus) {
    const int a = t->FindBusId(g.bus_id);
    if (a < 0) continue;
    const double lane = NvLinkLaneGbs(t->nodes[static_cast<size_t>(a)].sm);
    for (const NvmlGpu::NvLink& l : g.nvlinks) {
      int b = t->FindBusId(l.peer_bus_id);
      if (l.to_switch && b < 0) {
        Node s;
        s.kind = NodeKind::kNvSwitch;
        s.id = UniqueId(*t, "nvs" + std::to_string(t->OfKind(NodeKind::kNvSwitch).size()));
        s.bus_id = l.peer_bus_id;
        s.parent = 0;
        b = t->Add(std::move(s));
      }
      if (b < 0 || b == a) continue;
      if (!l.to_switch && l.peer_bus_id < g.bus_id) continue;
      bool merged = false;
      for (Link& existing : t->links) {
        if (existing.kind == LinkKind::kNvLink && existing.a == a && existing.b == b) {
          ++existing.count;
          existing.bw_gbs += lane;
          merged = true;
        }
      }
      if (!merged) t->links.push_back(Link{a, b, LinkKind::kNvLink, 1, lane});
    }
  }
}

Topology DiscoverTopology() {
  // One probe at a time: libudev (under hwloc and sysfs discovery) keeps
  // unguarded global state, and ranks of one process that set up together
  // (one thread per GPU) would probe at once.
  static std::mutex probing;
  std::lock_guard<std::mutex> lock(probing);
  bool hwloc_used = false;
  Topology t = ProbeHwloc(Hostname(), &hwloc_used);
  const std::vector<SysfsNetDevice> net = ProbeSysfsNet();
  const VerbsProbe verbs = ProbeVerbs();
  const NvmlProbe nvml = ProbeNvml();
  MergeProbes(net, verbs, nvml, &t);
  LOOM_INFO(log::kGraph, "topology: %s, %zu NUMA nodes, %zu GPUs, %zu NICs (hwloc %s, %zu verbs devices, NVML %zu GPUs)",
            t.hostname.c_str(), t.OfKind(NodeKind::kNuma).size(), t.OfKind(NodeKind::kGpu).size(),
            t.OfKind(NodeKind::kNic).size(), hwloc_used ? "yes" : "no", verbs.devices.size(),
            nvml.gpus.size());
  return t;
}

Result<Topology> LocalTopology() {
  const Param::Raw file = params::kTopoFile.Lookup();
  Topology t;
  if (!file.value.empty()) {
    LOOM_ASSIGN_OR_RETURN(t, LoadTopologyFile(file.value));
    if (t.hostname.empty()) t.hostname = Hostname();
    LOOM_INFO(log::kGraph, "topology loaded from %s (%s); nothing probed", file.value.c_str(),
              file.source.c_str());
  } else {
    t = DiscoverTopology();
  }
  const std::string dump = params::kTopoDumpFile.Get();
  if (!dump.empty()) {
    const Status s = WriteTopologyFile(dump, t);
    if (!s.ok()) LOOM_WARN(log::kGraph, "LOOM_TOPO_DUMP_FILE: %s", s.ToString().c_str());
  }
  return t;
}

}  // namespace loom::topology
