// The host topology model: names, invariants, bandwidth figures (model.h).
#include "topology/model.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <set>

namespace loom::topology {
namespace {

template <typename Enum, size_t N>
Result<Enum> ParseName(std::string_view s, const std::string_view (&names)[N], const char* what) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == s) return static_cast<Enum>(i);
  }
  std::string list;
  for (size_t i = 0; i < N; ++i) list += (i ? ", " : "") + std::string(names[i]);
  return InvalidArgument("unknown " + std::string(what) + " '" + std::string(s) + "' (one of " +
                         list + ")");
}

constexpr std::string_view kNodeKindNames[] = {"machine", "numa", "pci", "gpu", "nic", "nvswitch"};
constexpr std::string_view kLinkKindNames[] = {"nvlink", "smp"};
constexpr std::string_view kLinkLayerNames[] = {"unknown", "ib", "eth"};

bool IsLeaf(NodeKind k) {
  return k == NodeKind::kGpu || k == NodeKind::kNic || k == NodeKind::kNvSwitch;
}

bool ParseHex(std::string_view s, size_t max_digits, unsigned* out) {
  if (s.empty() || s.size() > max_digits) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

std::string_view Name(NodeKind kind) { return kNodeKindNames[static_cast<int>(kind)]; }
std::string_view Name(LinkKind kind) { return kLinkKindNames[static_cast<int>(kind)]; }
std::string_view Name(LinkLayer layer) { return kLinkLayerNames[static_cast<int>(layer)]; }
Result<NodeKind> ParseNodeKind(std::string_view s) {
  return ParseName<NodeKind>(s, kNodeKindNames, "node kind");
}
Result<LinkKind> ParseLinkKind(std::string_view s) {
  return ParseName<LinkKind>(s, kLinkKindNames, "link kind");
}
Result<LinkLayer> ParseLinkLayer(std::string_view s) {
  return ParseName<LinkLayer>(s, kLinkLayerNames, "link layer");
}

int Topology::Add(Node node) {
  nodes.push_back(std::move(node));
  return static_cast<int>(nodes.size()) - 1;
}

Topology Topology::WithMachine(std::string hostname) {
  Topology t;
  t.hostname = std::move(hostname);
  Node m;
  m.kind = NodeKind::kMachine;
  m.id = "machine";
  t.Add(std::move(m));
  return t;
}

int Topology::Find(std::string_view id) const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

int Topology::FindBusId(std::string_view bus_id) const {
  if (bus_id.empty()) return -1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].bus_id == bus_id) return static_cast<int>(i);
  }
  return -1;
}

std::vector<int> Topology::OfKind(NodeKind kind) const {
  std::vector<int> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].kind == kind) out.push_back(static_cast<int>(i));
  }
  return out;
}

int Topology::NumaOf(int index) const {
  for (int i = index; i >= 0; i = nodes[static_cast<size_t>(i)].parent) {
    if (nodes[static_cast<size_t>(i)].kind == NodeKind::kNuma) return i;
  }
  return -1;
}

Status Topology::Validate() const {
  if (nodes.empty() || nodes[0].kind != NodeKind::kMachine || nodes[0].parent != -1)
    return InvalidArgument("topology: the first node must be the machine, without a parent");
  std::set<std::string_view> ids;
  std::set<std::string_view> bus_ids;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    const std::string who = "topology node " + std::to_string(i) + " '" + n.id + "'";
    if (n.id.empty()) return InvalidArgument(who + ": empty id");
    if (!ids.insert(n.id).second) return InvalidArgument(who + ": duplicate id");
    if (i > 0) {
      if (n.kind == NodeKind::kMachine) return InvalidArgument(who + ": a second machine");
      if (n.parent < 0 || static_cast<size_t>(n.parent) >= i)
        return InvalidArgument(who + ": its parent must be listed before it");
      if (IsLeaf(nodes[static_cast<size_t>(n.parent)].kind))
        return InvalidArgument(who + ": parent '" + nodes[static_cast<size_t>(n.parent)].id +
                               "' is a " + std::string(Name(nodes[static_cast<size_t>(n.parent)].kind)) +
                               " and cannot have children");
    }
    if (!n.bus_id.empty()) {
      auto norm = NormalizeBusId(n.bus_id);
      if (!norm.ok() || *norm != n.bus_id)
        return InvalidArgument(who + ": bus id '" + n.bus_id + "' is not of the form 0000:3b:00.0");
      // The ports of one adapter are separate NIC nodes on one PCI function.
      if (n.kind != NodeKind::kNic && !bus_ids.insert(n.bus_id).second)
        return InvalidArgument(who + ": duplicate bus id " + n.bus_id);
    }
    if (n.pcie_gen < 0 || n.pcie_gen > 6 || n.pcie_width < 0 || n.pcie_width > 32)
      return InvalidArgument(who + ": PCIe generation must be 0..6 and width 0..32");
    if (n.rate_gbps < 0) return InvalidArgument(who + ": negative rate");
  }
  for (size_t i = 0; i < links.size(); ++i) {
    const Link& l = links[i];
    const std::string who = "topology link " + std::to_string(i);
    const int n = static_cast<int>(nodes.size());
    if (l.a < 0 || l.a >= n || l.b < 0 || l.b >= n || l.a == l.b)
      return InvalidArgument(who + ": must join two different existing nodes");
    if (l.count < 1 || !(l.bw_gbs > 0))
      return InvalidArgument(who + ": count and bandwidth must be positive");
    const NodeKind ka = nodes[static_cast<size_t>(l.a)].kind;
    const NodeKind kb = nodes[static_cast<size_t>(l.b)].kind;
    auto nv = [](NodeKind k) { return k == NodeKind::kGpu || k == NodeKind::kNvSwitch; };
    if (l.kind == LinkKind::kNvLink && !(nv(ka) && nv(kb)))
      return InvalidArgument(who + ": NVLink joins GPUs and NVSwitches only");
    if (l.kind == LinkKind::kSmp && !(ka == NodeKind::kNuma && kb == NodeKind::kNuma))
      return InvalidArgument(who + ": an SMP link joins two NUMA nodes");
  }
  return Status::Ok();
}

Result<std::string> NormalizeBusId(std::string_view s) {
  // [domain:]bus:device.function, hex; domain up to 8 digits (NVML), bus 2,
  // device 2, function 1.
  const Status bad = InvalidArgument("'" + std::string(s) + "' is not a PCI bus id like 0000:3b:00.0");
  const size_t dot = s.rfind('.');
  if (dot == std::string_view::npos) return bad;
  const size_t c2 = s.rfind(':', dot);
  if (c2 == std::string_view::npos) return bad;
  const size_t c1 = c2 == 0 ? std::string_view::npos : s.rfind(':', c2 - 1);
  unsigned domain = 0;
  unsigned bus = 0;
  unsigned dev = 0;
  unsigned fn = 0;
  const std::string_view bus_s =
      c1 == std::string_view::npos ? s.substr(0, c2) : s.substr(c1 + 1, c2 - c1 - 1);
  if (c1 != std::string_view::npos && !ParseHex(s.substr(0, c1), 8, &domain)) return bad;
  if (!ParseHex(bus_s, 2, &bus) || !ParseHex(s.substr(c2 + 1, dot - c2 - 1), 2, &dev) ||
      !ParseHex(s.substr(dot + 1), 1, &fn) || dev > 0x1f || fn > 7 || domain > 0xffff) {
    return bad;
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", domain, bus, dev, fn);
  return std::string(buf);
}

double PcieLinkGbs(int gen, int width) {
  // Usable bytes per lane per direction after encoding, as NCCL counts them.
  static constexpr double kLaneGbs[] = {0, 0.1875, 0.375, 0.75, 1.5, 3.0, 6.0};
  if (gen < 1 || gen > 6 || width < 1) return kDefaultPcieGbs;
  return kLaneGbs[gen] * width;
}

double NvLinkLaneGbs(int sm) {
  if (sm >= 100) return 40.1;
  if (sm >= 90) return 20.6;
  if (sm >= 70) return 20.0;
  return 18.0;
}

double UplinkGbs(const Topology& t, int index) {
  const Node& n = t.nodes[static_cast<size_t>(index)];
  if (n.pcie_gen > 0 && n.pcie_width > 0) return PcieLinkGbs(n.pcie_gen, n.pcie_width);
  if (n.kind == NodeKind::kNuma || n.kind == NodeKind::kMachine ||
      (n.kind == NodeKind::kPci && n.host_bridge)) {
    return kLocalGbs;
  }
  // A NIC without a PCI address (a virtual device) hangs off the CPU directly.
  if (n.kind == NodeKind::kNic && n.bus_id.empty()) return kLocalGbs;
  return kDefaultPcieGbs;
}

}  // namespace loom::topology
