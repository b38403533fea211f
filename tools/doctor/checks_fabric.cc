// Checks 5 and 9, the hardware side: the RDMA fabric (ports, link layer,
// GID subnets and rails, RoCE version and GID index across hosts) and the
// GPU side (peer paths, NIC placement, GPUDirect RDMA, PCIe ACS, IOMMU).
#include <arpa/inet.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include "topology/paths.h"
#include "tools/doctor/check_helpers.h"
#include "tools/doctor/checks.h"

namespace loom::doctor {

namespace {

using detail::BuildHasIb;
using detail::FingerprintValue;
using detail::Join;
using detail::RdmaNics;
using detail::Truthy;
using topology::NodeKind;
using topology::PathType;

using HostsByValue = std::map<std::string, std::vector<std::string>>;  // value -> host labels

std::string Detail(const HostsByValue& m) {
  std::string s;
  for (const auto& [v, labels] : m) s += (s.empty() ? "" : "; ") + v + " on " + Join(labels);
  return s;
}

// The GID a port would use and the network it places the port on.
struct GidChoice {
  std::string port;    // "mlx5_0:1"
  int index = -1;
  std::string type;    // "IB", "RoCE v1", "RoCE v2"
  std::string subnet;  // "fe80:0:0:0/64", "10.61.0.0/24"; "" when unknown
};

// IB: the GID's 64-bit subnet prefix. RoCE: the IPv4 subnet of the address
// inside the GID (from the interface that holds it), else its 64-bit prefix.
std::string GidSubnet(const HostFacts& f, const ib::PortInfo& p, const ib::GidEntry& e) {
  if (p.ethernet) {
    if (auto v4 = ib::MappedIpv4(e.gid)) {
      char addr[32];
      std::snprintf(addr, sizeof addr, "%u.%u.%u.%u", *v4 >> 24, *v4 >> 16 & 255, *v4 >> 8 & 255, *v4 & 255);
      for (const NetInterface& i : f.interfaces) {
        if (i.address != addr || i.prefix_len <= 0 || i.prefix_len > 32) continue;
        const uint32_t mask = i.prefix_len == 32 ? ~0u : ~(~0u >> i.prefix_len);
        const uint32_t net = *v4 & mask;
        std::snprintf(addr, sizeof addr, "%u.%u.%u.%u", net >> 24, net >> 16 & 255, net >> 8 & 255, net & 255);
        return std::string(addr) + "/" + std::to_string(i.prefix_len);
      }
      return "";  // the interface's prefix length is unknown: no subnet to compare
    }
  }
  char prefix[48];
  std::snprintf(prefix, sizeof prefix, "%x:%x:%x:%x/64", e.gid[0] << 8 | e.gid[1], e.gid[2] << 8 | e.gid[3],
                e.gid[4] << 8 | e.gid[5], e.gid[6] << 8 | e.gid[7]);
  return prefix;
}

// The active ports NCCL_IB_HCA selects on one host, each with the GID the
// runtime's rule (ib::ChooseGid with NCCL_IB_GID_INDEX) picks; a port whose
// table has no such GID becomes a FAIL in `out`.
std::vector<GidChoice> ChooseGids(const HostFacts& f, std::vector<Finding>* out) {
  std::vector<GidChoice> chosen;
  const std::string index_text = f.Param("IB_GID_INDEX");
  const int index = index_text.empty() ? -1 : std::atoi(index_text.c_str());
  const ib::PortChoice ports = ib::SelectPorts(f.rdma_ports, ib::HcaFilter::Parse(f.Param("IB_HCA")));
  // As the runtime (IbOptionsFromParams): RoCE prefers the GID on the socket
  // interface's IPv4 subnet.
  std::optional<ib::Ipv4Subnet> subnet;
  in_addr v4{};
  if (auto sel = SelectedInterface(f);
      sel.ok() && inet_pton(AF_INET, sel->address.c_str(), &v4) == 1) {
    subnet = ib::Ipv4Subnet{ntohl(v4.s_addr), sel->prefix_len};
  }
  for (const ib::PortInfo& p : ports.ports) {
    if (p.gids.empty()) continue;  // table unknown (a topology file): nothing to compare
    const std::string name = p.device + ":" + std::to_string(p.port);
    auto gid = ib::ChooseGid(p, index, subnet);
    if (!gid.ok()) {
      out->push_back(Fail(Check::kFabric, f.label, gid.status().message(),
                          !index_text.empty() ? "set NCCL_IB_GID_INDEX to an index listed there (show_gids), or unset it"
                          : p.ethernet ? "give " + name + " a RoCE v2 address (an IP on its netdev), or exclude it: "
                                         "NCCL_IB_HCA=^" + p.device
                                       : "check the port's GID table (show_gids; the subnet manager), or exclude it: "
                                         "NCCL_IB_HCA=^" + p.device));
      continue;
    }
    for (const ib::GidEntry& e : p.gids) {
      if (e.index != *gid) continue;
      const char* type = e.type == ib::GidEntry::Type::kIb       ? "IB"
                         : e.type == ib::GidEntry::Type::kRoceV1 ? "RoCE v1"
                                                                 : "RoCE v2";
      chosen.push_back({name, e.index, type, GidSubnet(f, p, e)});
    }
  }
  return chosen;
}

// RoCE GID indices that differ between hosts (WARN): the same index must
// name the same RoCE version and subnet everywhere.
void CompareGidIndices(const std::vector<const HostFacts*>& hosts, const std::vector<std::vector<GidChoice>>& gids,
                       std::vector<Finding>* out) {
  HostsByValue index_hosts;
  for (size_t h = 0; h < hosts.size(); ++h) {
    std::set<int> mine;
    for (const GidChoice& g : gids[h]) {
      if (g.type != "IB") mine.insert(g.index);
    }
    std::vector<std::string> text;
    for (int i : mine) text.push_back(std::to_string(i));
    if (!text.empty()) index_hosts[Join(text)].push_back(hosts[h]->label);
  }
  if (index_hosts.size() > 1) {
    const auto major = std::max_element(index_hosts.begin(), index_hosts.end(),
                                        [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
    out->push_back(Warn(Check::kFabric, "", "RoCE GID index differs between hosts: " + Detail(index_hosts),
                        "pin one index on every host, e.g. NCCL_IB_GID_INDEX=" + major->first.substr(0, major->first.find(',')) +
                            " (show_gids lists each table; the index must name the same RoCE version and subnet everywhere)"));
  }
}

// Cross-host GID findings: a port on a subnet no other host has (FAIL), a
// host whose rails come in another order (WARN: connections cross rails),
// and, through CompareGidIndices, GID indices that differ (WARN). RoCE
// versions are compared by the caller.
void CompareGids(const std::vector<const HostFacts*>& hosts, const std::vector<std::vector<GidChoice>>& gids,
                 std::vector<Finding>* out) {
  // With unequal port counts (a port down, filtered out, or without a GID)
  // the port findings already name the cause, and no subnet is comparable.
  for (const auto& g : gids) {
    if (g.size() != gids.front().size()) return CompareGidIndices(hosts, gids, out);
  }
  std::map<std::string, std::set<std::string>> subnet_hosts;  // subnet -> host labels
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (const GidChoice& g : gids[h]) {
      if (!g.subnet.empty()) subnet_hosts[g.subnet].insert(hosts[h]->label);
    }
  }
  std::set<std::string> lonely_ports;  // "host/port" already named
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (const GidChoice& g : gids[h]) {
      if (g.subnet.empty() || subnet_hosts[g.subnet].size() > 1) continue;
      std::string others;
      for (const auto& [s, labels] : subnet_hosts) {
        if (s != g.subnet) others += (others.empty() ? "" : "; ") + s + " on " + Join({labels.begin(), labels.end()});
      }
      lonely_ports.insert(hosts[h]->label + "/" + g.port);
      out->push_back(Fail(Check::kFabric, hosts[h]->label,
                          g.port + " (GID index " + std::to_string(g.index) + ") is on subnet " + g.subnet +
                              ", which no other host has (" + others + "): its connections cannot reach any peer NIC",
                          "check where " + g.port.substr(0, g.port.find(':')) + " on " + hosts[h]->label +
                              " is cabled and the subnet manager's prefix (or the netdev's address), or exclude it: "
                              "NCCL_IB_HCA=^" + g.port.substr(0, g.port.find(':'))));
    }
  }
  // Rails: the k-th selected port of every host should share one subnet.
  // Only meaningful with several subnets and equal port counts.
  bool rails = subnet_hosts.size() > 1;
  for (const auto& g : gids) rails = rails && g.size() == gids.front().size();
  for (size_t k = 0; rails && k < gids.front().size(); ++k) {
    std::map<std::string, int> votes;
    for (const auto& g : gids) ++votes[g[k].subnet];
    const auto major = std::max_element(votes.begin(), votes.end(),
                                        [](const auto& a, const auto& b) { return a.second < b.second; });
    if (major->second * 2 <= static_cast<int>(gids.size())) continue;  // no majority: nothing to compare with
    for (size_t h = 0; h < hosts.size(); ++h) {
      const GidChoice& g = gids[h][k];
      if (g.subnet == major->first || g.subnet.empty() || lonely_ports.count(hosts[h]->label + "/" + g.port)) continue;
      out->push_back(Warn(Check::kFabric, hosts[h]->label,
                          "rails in another order: " + g.port + " (NIC " + std::to_string(k) + ") is on " + g.subnet +
                              " while NIC " + std::to_string(k) + " of the other hosts is on " + major->first +
                              ": on a rail-optimised fabric connections cross rails ('ibv_modify_qp ... timed out')",
                          "list the HCAs in rail order with NCCL_IB_HCA on " + hosts[h]->label +
                              " (or recable); NCCL_CROSS_NIC=0 keeps each ring on one rail"));
    }
  }
  CompareGidIndices(hosts, gids, out);
}

}  // namespace

std::vector<Finding> CheckFabric(const std::vector<HostFacts>& hosts) {
  std::vector<Finding> out;
  std::vector<std::string> with, without;
  HostsByValue layers, roce;
  std::vector<const HostFacts*> gid_hosts;
  std::vector<std::vector<GidChoice>> gids;
  for (const HostFacts& f : hosts) {
    const auto nics = RdmaNics(f);
    const bool any = !nics.empty() || !f.rdma_ports.empty();
    (any ? with : without).push_back(f.label);
    if (!any) continue;
    const bool disabled = Truthy(f.Param("IB_DISABLE"));
    const std::string hca = f.Param("IB_HCA");
    std::vector<std::string> down, up, filtered_out;
    std::set<std::string> host_layers, host_roce;
    const ib::HcaFilter filter = ib::HcaFilter::Parse(hca);
    for (const ib::PortInfo& p : detail::RdmaPorts(f)) {
      const std::string port = p.device + ":" + std::to_string(p.port);
      if (!hca.empty() && !filter.Matches(p.device, p.port)) {
        filtered_out.push_back(port);
        continue;
      }
      (p.active ? up : down).push_back(port);
      if (p.active) host_layers.insert(p.ethernet ? "eth" : "ib");
    }
    if (!f.rdma_ports.empty()) {
      gid_hosts.push_back(&f);
      gids.push_back(ChooseGids(f, &out));
      for (const GidChoice& g : gids.back()) {
        if (g.type != "IB") host_roce.insert(g.type);
      }
    } else {
      for (const topology::Node* n : nics) {
        if (n->up && n->link_layer == topology::LinkLayer::kEthernet) host_roce.insert("RoCE v" + std::to_string(n->roce_version));
      }
    }
    for (const std::string& l : host_layers) layers[l].push_back(f.label);
    for (const std::string& r : host_roce) roce[r].push_back(f.label);
    if (!hca.empty() && up.empty() && down.empty()) {
      out.push_back(Fail(Check::kFabric, f.label,
                         "NCCL_IB_HCA='" + hca + "' matches none of " + Join(filtered_out),
                         "set NCCL_IB_HCA to one of " + Join(filtered_out) + " or unset it"));
    } else if (up.empty()) {
      out.push_back(Fail(Check::kFabric, f.label,
                         "every RDMA port is down (" + Join(down) + "): IB unusable here, loom falls back to sockets",
                         "fix the link (ibstat; cable, subnet manager), or set NCCL_IB_DISABLE=1 on every host "
                         "to use sockets knowingly"));
    } else if (!down.empty()) {
      out.push_back(Warn(Check::kFabric, f.label, "RDMA port(s) down: " + Join(down) + " (up: " + Join(up) + ")",
                         "fix the link or exclude it: NCCL_IB_HCA=^" + down.front().substr(0, down.front().find(':'))));
    }
    if (disabled && !up.empty()) {
      out.push_back(Warn(Check::kFabric, f.label,
                         "NCCL_IB_DISABLE is set although " + Join(up) + " are up: all traffic goes over sockets",
                         "unset NCCL_IB_DISABLE if the fabric is meant to be used"));
    } else if (!up.empty() && !BuildHasIb(f)) {
      out.push_back(Warn(Check::kFabric, f.label,
                         "RDMA ports " + Join(up) + " are up, but this loom build moves data over " +
                             FingerprintValue(f, "transports") + " only: expect socket bandwidth",
                         "accept sockets knowingly (NCCL_NET=Socket), or use a loom build with the ib transport"));
    }
  }
  if (!with.empty() && !without.empty()) {
    std::string reason;
    for (const HostFacts& f : hosts) {
      if (RdmaNics(f).empty() && f.rdma_ports.empty() && !f.no_rdma_reason.empty()) reason = " (" + f.no_rdma_reason + ")";
    }
    out.push_back(Fail(Check::kFabric, Join(without),
                       "RDMA NICs on " + Join(with) + " but none on " + Join(without) + reason +
                           ": a mixed job (one host on IB, another on sockets)",
                       "make the hosts alike (container: pass --device=/dev/infiniband and the verbs "
                       "libraries), or set NCCL_IB_DISABLE=1 on every host"));
  }
  if (layers.size() > 1) {
    out.push_back(Fail(Check::kFabric, "", "link layer differs between hosts: " + Detail(layers),
                       "use one fabric (all IB or all RoCE) or restrict NCCL_IB_HCA to the common one"));
  }
  if (roce.size() > 1) {
    out.push_back(Fail(Check::kFabric, "", "RoCE version differs between hosts: " + Detail(roce),
                       "pick the same GID type on every host, e.g. NCCL_IB_GID_INDEX=3 (RoCE v2)"));
  } else if (gid_hosts.size() > 1) {
    CompareGids(gid_hosts, gids, &out);
  }
  if (out.empty()) {
    std::string reason = hosts.empty() ? "" : hosts.front().no_rdma_reason;
    std::string gid_detail;
    if (!gids.empty() && !gids.front().empty()) {
      std::set<std::string> subnets;
      for (const auto& g : gids) {
        for (const GidChoice& c : g) subnets.insert(c.subnet);
      }
      gid_detail = " (" + gids.front().front().type + ", GID index " + std::to_string(gids.front().front().index) + ", " +
                   std::to_string(subnets.size()) + " subnet(s) shared by every host)";
    }
    out.push_back(Pass(Check::kFabric, with.empty()
                                           ? "no RDMA devices on any host" + (reason.empty() ? "" : " (" + reason + ")") +
                                                 ": sockets carry inter-host traffic, as expected"
                                           : "RDMA ports up and alike on " + Join(with) + gid_detail));
  }
  return out;
}

namespace {

// The bridges peer traffic between PCI functions a and b crosses below
// their lowest common bridge that have ACS redirect on ("" when the sysfs
// facts of either are missing or they share no bridge: the traffic goes
// through the root complex anyway, which the path class already says).
std::vector<std::string> AcsBetween(const HostFacts& f, const std::string& a, const std::string& b) {
  auto pa = f.pci.find(a), pb = f.pci.find(b);
  if (pa == f.pci.end() || pb == f.pci.end()) return {};
  const auto& ba = pa->second.bridges;
  const auto& bb = pb->second.bridges;
  size_t common = 0;
  while (common < ba.size() && common < bb.size() && ba[common] == bb[common]) ++common;
  if (common == 0) return {};
  std::vector<std::string> out;
  for (const PciFacts* p : {&pa->second, &pb->second}) {
    for (size_t i = common; i < p->bridges.size(); ++i) {
      const std::string& br = p->bridges[i];
      const bool redirect = std::find(p->acs_redirect.begin(), p->acs_redirect.end(), br) != p->acs_redirect.end();
      if (redirect && std::find(out.begin(), out.end(), br) == out.end()) out.push_back(br);
    }
  }
  return out;
}

// GPU side of one host: ACS on the bridges between GPU pairs and GPU->NIC
// pairs that should talk peer-to-peer, and an IOMMU translating their DMA.
void CheckPciPeerPaths(const HostFacts& f, const std::vector<int>& g, std::vector<Finding>* out) {
  const topology::Topology& t = *f.topology;
  std::vector<std::pair<int, int>> pairs;
  for (size_t a = 0; a < g.size(); ++a) {
    for (size_t b = a + 1; b < g.size(); ++b) pairs.emplace_back(g[a], g[b]);
    const int nic = topology::ClosestNic(t, g[a]);
    if (nic >= 0 && t.nodes[nic].rdma) pairs.emplace_back(g[a], nic);
  }
  std::vector<std::string> where, bridges;
  for (auto [a, b] : pairs) {
    const auto acs = AcsBetween(f, t.nodes[a].bus_id, t.nodes[b].bus_id);
    if (acs.empty()) continue;
    where.push_back(t.nodes[a].id + "<->" + t.nodes[b].id);
    for (const std::string& br : acs) {
      if (std::find(bridges.begin(), bridges.end(), br) == bridges.end()) bridges.push_back(br);
    }
  }
  if (!where.empty()) {
    out->push_back(Warn(Check::kGpu, f.label,
                        "PCIe ACS redirects peer traffic on bridge(s) " + Join(bridges) + " (between " + Join(where) +
                            "): P2P and GPUDirect RDMA detour through the root complex, slow or hanging "
                            "(NCCL_P2P_DISABLE=1 'fixes' it, slowly)",
                        "disable ACS on those bridges: the BIOS 'PCIe ACS' option, or as root after each boot "
                        "setpci -s " + bridges.front() + " ECAP_ACS+0x6.w=0000 (each bridge listed)"));
  }
  std::map<std::string, std::vector<std::string>> translated;  // domain type -> devices
  bool peers = g.size() > 1 || !RdmaNics(f).empty();
  for (int i : g) {
    auto it = f.pci.find(t.nodes[i].bus_id);
    if (peers && it != f.pci.end() && it->second.iommu.starts_with("DMA")) translated[it->second.iommu].push_back(t.nodes[i].id);
  }
  for (const auto& [type, devices] : translated) {
    out->push_back(Warn(Check::kGpu, f.label,
                        "the IOMMU translates DMA for " + Join(devices) + " (domain type " + type +
                            "): peer-to-peer and GPUDirect RDMA requests are remapped or blocked",
                        "boot with iommu=pt (intel_iommu=on iommu=pt, or amd_iommu=pt), or turn the IOMMU off in "
                        "the BIOS; in a VM keep it and enable ATS"));
  }
}

}  // namespace

std::vector<Finding> CheckGpu(const std::vector<HostFacts>& hosts) {
  std::vector<Finding> out;
  int gpus = 0;
  bool pci_known = false;
  for (const HostFacts& f : hosts) {
    if (!f.topology) continue;
    const topology::Topology& t = *f.topology;
    const std::vector<int> g = t.OfKind(NodeKind::kGpu);
    gpus += static_cast<int>(g.size());
    for (int i : g) pci_known |= f.pci.count(t.nodes[i].bus_id) > 0;
    std::vector<std::string> sys_pairs;
    for (size_t a = 0; a < g.size(); ++a) {
      for (size_t b = a + 1; b < g.size(); ++b) {
        if (topology::ClassifyPath(t, g[a], g[b]).type == PathType::kSys) {
          sys_pairs.push_back(t.nodes[g[a]].id + "-" + t.nodes[g[b]].id);
        }
      }
    }
    if (!sys_pairs.empty()) {
      out.push_back(Warn(Check::kGpu, f.label,
                         "GPU pairs across the SMP link (SYS): " + Join(sys_pairs) +
                             ": peer-to-peer is off there by default, traffic is staged through host memory",
                         "place communicating ranks on one socket, or allow it knowingly with NCCL_P2P_LEVEL=SYS"));
    }
    const bool rdma = !RdmaNics(f).empty();
    std::vector<std::string> far;
    for (int gi : g) {
      const int nic = topology::ClosestNic(t, gi);
      if (nic < 0 || !t.nodes[nic].rdma) continue;
      const PathType p = topology::ClassifyPath(t, gi, nic).type;
      if (p > PathType::kPxb) {
        far.push_back(t.nodes[gi].id + "->" + t.nodes[nic].id + " " + std::string(topology::Name(p)));
      }
    }
    if (!far.empty()) {
      out.push_back(Warn(Check::kGpu, f.label,
                         "nearest RDMA NIC is beyond a PCIe switch (" + Join(far) +
                             "): GPUDirect RDMA is off by default (NCCL_NET_GDR_LEVEL=PXB), data crosses host memory",
                         "put the NIC and GPU under one PCIe switch, or accept it knowingly with NCCL_NET_GDR_LEVEL=SYS"));
    }
    if (rdma && !g.empty() && !f.gdr_module) {
      out.push_back(Warn(Check::kGpu, f.label,
                         "GPUs and RDMA NICs present but no GPUDirect RDMA module (nvidia_peermem) is loaded",
                         "modprobe nvidia_peermem (or use a driver with dma-buf support)"));
    }
    CheckPciPeerPaths(f, g, &out);
  }
  if (out.empty()) {
    out.push_back(Pass(Check::kGpu, gpus == 0 ? "no GPUs on any host (peer paths, GPUDirect RDMA, ACS and IOMMU not examined)"
                                              : std::to_string(gpus) + " GPU(s): peer paths and NIC placement fine" +
                                                    (pci_known ? ", no ACS redirect or translating IOMMU on their paths"
                                                               : " (ACS and IOMMU unknown: no sysfs entries for them)")));
  }
  return out;
}

}  // namespace loom::doctor
