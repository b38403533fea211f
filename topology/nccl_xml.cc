// NCCL topology XML → loom topology (nccl_xml.h).
#include "topology/nccl_xml.h"

#include <charconv>
#include <climits>
#include <cstdlib>
#include <string>

#include "topology/xml.h"

namespace loom::topology {
namespace {

using xml::Element;

Status Bad(const Element& e, const std::string& what) {
  return InvalidArgument("NCCL topology XML line " + std::to_string(e.line) + " <" + e.name +
                         ">: " + what);
}

std::string AttrOr(const Element& e, std::string_view key, std::string_view def = "") {
  const std::string* v = e.Attr(key);
  return v != nullptr ? *v : std::string(def);
}

// An integer attribute (decimal or 0x-hex); `def` when absent.
Status IntAttr(const Element& e, std::string_view key, long def, long* out) {
  const std::string* v = e.Attr(key);
  if (v == nullptr || v->empty()) {
    *out = def;
    return Status::Ok();
  }
  const bool hex = v->size() > 2 && (*v)[0] == '0' && ((*v)[1] == 'x' || (*v)[1] == 'X');
  const char* b = v->data() + (hex ? 2 : 0);
  auto [p, ec] = std::from_chars(b, v->data() + v->size(), *out, hex ? 16 : 10);
  // Every attribute ends up in an int (an index, a count, a rate).
  if (ec != std::errc() || p != v->data() + v->size() || *out < INT_MIN || *out > INT_MAX) {
    return Bad(e, std::string(key) + "=\"" + *v + "\" is not an integer that fits an int");
  }
  return Status::Ok();
}

// "16.0 GT/s PCIe" → 4; "Unknown" or absent → 0.
int PcieGen(const std::string& speed) {
  const double gts = std::strtod(speed.c_str(), nullptr);
  if (gts >= 60) return 6;
  if (gts >= 30) return 5;
  if (gts >= 15) return 4;
  if (gts >= 7) return 3;
  if (gts >= 4) return 2;
  if (gts >= 2) return 1;
  return 0;
}

// NCCL's affinity mask "0000ffff,ffffffff" (32-bit words, most significant
// first) → a cpulist "0-47".
std::string MaskToCpuList(const std::string& mask) {
  std::string hex;
  for (char c : mask) {
    if (c != ',') hex.push_back(c);
  }
  if (hex.size() > 2 && hex[0] == '0' && (hex[1] == 'x' || hex[1] == 'X')) hex.erase(0, 2);
  std::string out;
  int run_start = -1;
  int cpu = 0;
  auto close_run = [&](int end) {
    if (run_start < 0) return;
    if (!out.empty()) out += ",";
    out += std::to_string(run_start);
    if (end - 1 > run_start) out += "-" + std::to_string(end - 1);
    run_start = -1;
  };
  for (auto it = hex.rbegin(); it != hex.rend(); ++it) {
    unsigned nibble = 0;
    std::from_chars(&*it, &*it + 1, nibble, 16);
    for (int bit = 0; bit < 4; ++bit, ++cpu) {
      if ((nibble >> bit) & 1u) {
        if (run_start < 0) run_start = cpu;
      } else {
        close_run(cpu);
      }
    }
  }
  close_run(cpu);
  return out;
}

bool IsVerbsName(const std::string& name) {
  for (const char* p : {"mlx4_", "mlx5_", "bnxt_re", "irdma", "efa", "qedr", "hns_", "rxe", "siw"}) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

double SmpGbsFor(const Element& cpu) {
  const std::string vendor = AttrOr(cpu, "vendor");
  if (vendor == "AuthenticAMD" || vendor == "AMD") return 16;
  if (vendor == "GenuineIntel") {
    long model = 0;
    if (IntAttr(cpu, "modelid", 0, &model).ok() && model >= 0x55) return 10;
    return 6;
  }
  return kDefaultSmpGbs;
}

struct PendingNvLink {
  int gpu;
  std::string target;
  bool to_switch;
  int count;
};

class Importer {
 public:
  Result<Topology> Run(const Element& root) {
    if (root.name != "system") return Bad(root, "the root element must be <system>");
    t_ = Topology::WithMachine("");
    std::vector<int> numas;
    std::vector<double> smp;
    for (const Element& cpu : root.children) {
      if (cpu.name != "cpu") continue;
      long numa_id = 0;
      LOOM_TRY(IntAttr(cpu, "numaid", static_cast<long>(numas.size()), &numa_id));
      Node n;
      n.kind = NodeKind::kNuma;
      n.id = "numa" + std::to_string(numa_id);
      n.parent = 0;
      n.numa_id = static_cast<int>(numa_id);
      n.cpuset = MaskToCpuList(AttrOr(cpu, "affinity"));
      if (t_.Find(n.id) >= 0) return Bad(cpu, "duplicate numaid " + std::to_string(numa_id));
      const int idx = t_.Add(std::move(n));
      numas.push_back(idx);
      smp.push_back(SmpGbsFor(cpu));
      for (const Element& child : cpu.children) LOOM_TRY(Child(child, idx));
    }
    for (size_t i = 0; i < numas.size(); ++i) {
      for (size_t j = i + 1; j < numas.size(); ++j) {
        t_.links.push_back(Link{numas[i], numas[j], LinkKind::kSmp, 1, std::min(smp[i], smp[j])});
      }
    }
    LOOM_TRY(ResolveNvLinks());
    LOOM_TRY(t_.Validate());
    return std::move(t_);
  }

 private:
  Status Child(const Element& e, int parent) {
    if (e.name == "pci") return Pci(e, parent);
    if (e.name == "nic") return Nic(e, parent, Node{});
    return Status::Ok();  // other elements (NCCL's "pcilink", "c2c", ...) carry nothing we model
  }

  Status Pci(const Element& e, int parent) {
    auto bus = NormalizeBusId(AttrOr(e, "busid"));
    if (!bus.ok()) return Bad(e, bus.status().message());
    Node pci;
    pci.bus_id = *bus;
    pci.pcie_gen = PcieGen(AttrOr(e, "link_speed"));
    long width = 0;
    LOOM_TRY(IntAttr(e, "link_width", 0, &width));
    pci.pcie_width = pci.pcie_gen > 0 ? static_cast<int>(width) : 0;
    pci.parent = parent;
    const std::string cls = AttrOr(e, "class");
    for (const Element& c : e.children) {
      if (c.name == "gpu") return Gpu(c, pci);
      if (c.name == "nic") {
        pci.link_layer = cls.rfind("0x0207", 0) == 0   ? LinkLayer::kInfiniBand
                         : cls.rfind("0x0200", 0) == 0 ? LinkLayer::kEthernet
                                                       : LinkLayer::kUnknown;
        return Nic(c, parent, pci);
      }
    }
    if (cls.rfind("0x0604", 0) != 0) return Status::Ok();  // neither bridge, GPU nor NIC
    pci.kind = NodeKind::kPci;
    pci.id = "pci-" + pci.bus_id;
    const int idx = t_.Add(pci);
    for (const Element& c : e.children) LOOM_TRY(Child(c, idx));
    return Status::Ok();
  }

  Status Gpu(const Element& e, Node n) {
    long dev = 0;
    long sm = 0;
    LOOM_TRY(IntAttr(e, "dev", static_cast<long>(t_.OfKind(NodeKind::kGpu).size()), &dev));
    LOOM_TRY(IntAttr(e, "sm", 0, &sm));
    if (dev < 0) return Bad(e, "dev=\"" + std::to_string(dev) + "\" is not a GPU index (0 or more)");
    n.kind = NodeKind::kGpu;
    n.id = "gpu" + std::to_string(dev);
    n.gpu_index = static_cast<int>(dev);
    n.sm = static_cast<int>(sm);
    if (t_.Find(n.id) >= 0) return Bad(e, "duplicate GPU dev " + std::to_string(dev));
    const int idx = t_.Add(std::move(n));
    for (const Element& l : e.children) {
      if (l.name != "nvlink") continue;
      long count = 1;
      LOOM_TRY(IntAttr(l, "count", 1, &count));
      const std::string tclass = AttrOr(l, "tclass", "0x030200");
      // NVLink to a POWER CPU (tclass 0x0680 is NVSwitch; other 0x06 are CPUs)
      // has no counterpart in the model.
      const bool to_switch = tclass == "0x068000";
      if (!to_switch && tclass.rfind("0x03", 0) != 0) continue;
      pending_.push_back(PendingNvLink{idx, AttrOr(l, "target"), to_switch, static_cast<int>(count)});
    }
    return Status::Ok();
  }

  // `proto` carries the PCI attributes of the adapter (empty when the <nic>
  // sits directly under a <cpu>).
  Status Nic(const Element& e, int parent, Node proto) {
    for (const Element& net : e.children) {
      if (net.name != "net") continue;
      Node n = proto;
      n.kind = NodeKind::kNic;
      n.parent = parent;
      n.id = AttrOr(net, "name");
      if (n.id.empty()) return Bad(net, "needs a name");
      if (t_.Find(n.id) >= 0) return Bad(net, "duplicate net name " + n.id);
      long port = 0;
      long speed = 0;
      LOOM_TRY(IntAttr(net, "port", 0, &port));
      LOOM_TRY(IntAttr(net, "speed", 0, &speed));
      n.port = static_cast<int>(port);
      n.rate_gbps = static_cast<double>(speed) / 1000.0;
      n.rdma = IsVerbsName(n.id);
      if (n.link_layer == LinkLayer::kUnknown && !n.rdma) n.link_layer = LinkLayer::kEthernet;
      if (!n.rdma) {
        // A socket device: the name is the kernel interface, and ports are a verbs notion.
        n.netdev = n.id;
        n.port = 0;
      }
      t_.Add(std::move(n));
    }
    return Status::Ok();
  }

  Status ResolveNvLinks() {
    for (const PendingNvLink& p : pending_) {
      auto bus = NormalizeBusId(p.target);
      if (!bus.ok()) return InvalidArgument("NCCL topology XML: nvlink target: " + bus.status().message());
      const double lane = NvLinkLaneGbs(t_.nodes[static_cast<size_t>(p.gpu)].sm);
      int peer = t_.FindBusId(*bus);
      if (p.to_switch && peer < 0) {
        Node s;
        s.kind = NodeKind::kNvSwitch;
        s.id = "nvs" + std::to_string(t_.OfKind(NodeKind::kNvSwitch).size());
        s.bus_id = *bus;
        s.parent = 0;
        peer = t_.Add(std::move(s));
      }
      if (peer < 0) continue;  // a peer GPU that is not in the file (trimmed by NCCL)
      if (!p.to_switch && t_.nodes[static_cast<size_t>(peer)].kind != NodeKind::kGpu) continue;
      // Both GPUs of a pair list their link; keep it once.
      bool seen = false;
      for (const Link& l : t_.links) {
        seen = seen || (l.kind == LinkKind::kNvLink && ((l.a == p.gpu && l.b == peer) ||
                                                         (l.a == peer && l.b == p.gpu)));
      }
      if (seen) continue;
      t_.links.push_back(Link{p.gpu, peer, LinkKind::kNvLink, p.count, p.count * lane});
    }
    return Status::Ok();
  }

  Topology t_;
  std::vector<PendingNvLink> pending_;
};

}  // namespace

Result<Topology> ParseNcclTopoXml(std::string_view text) {
  LOOM_ASSIGN_OR_RETURN(xml::Element root, xml::Parse(text));
  return Importer().Run(root);
}

}  // namespace loom::topology
