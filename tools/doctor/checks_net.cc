// Checks 1, 2, 3 and 7 (names, interface selection, reachability, MTU and
// routes) and the helpers they share with the agent.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "topology/inet_address.h"
#include "topology/socket_ifname.h"
#include "tools/doctor/checks.h"

namespace loom::doctor {

namespace {

// "h1, h2 and h3" style lists for summaries.
std::string JoinLabels(const std::vector<std::string>& labels) {
  std::string s;
  for (size_t i = 0; i < labels.size(); ++i) s += (i ? "," : "") + labels[i];
  return s;
}

// The address of the rendezvous host as this agent resolved it (the root
// hint of NCCL's selection), when it did.
std::optional<sockaddr_storage> RootAddress(const HostFacts& f) {
  if (f.root.empty()) return std::nullopt;
  std::string host = f.root.substr(0, f.root.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (auto numeric = ParseIpAddress(host); numeric.ok()) return numeric.value();
  for (const Resolution& r : f.resolutions) {
    if (r.name != host || r.addresses.empty()) continue;
    if (auto a = ParseIpAddress(r.addresses.front()); a.ok()) return a.value();
  }
  return std::nullopt;
}

bool IsLoopbackText(const std::string& addr) {
  auto a = ParseIpAddress(addr);
  return a.ok() && IsLoopbackAddress(reinterpret_cast<const sockaddr*>(&a.value()));
}

const sockaddr* Sa(const sockaddr_storage& s) { return reinterpret_cast<const sockaddr*>(&s); }

// The network an interface's address lies in, "10.61.0.0/24".
std::string NetworkOf(const NetInterface& i) {
  sockaddr_storage s = i.addr;
  int bits = i.prefix_len;
  if (s.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&s);
    uint32_t mask = bits <= 0 ? 0 : bits >= 32 ? 0xffffffffu : ~((1u << (32 - bits)) - 1);
    a->sin_addr.s_addr = htonl(ntohl(a->sin_addr.s_addr) & mask);
  } else if (s.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&s);
    for (int byte = 0; byte < 16; ++byte) {
      int keep = std::clamp(bits - byte * 8, 0, 8);
      a->sin6_addr.s6_addr[byte] &= static_cast<uint8_t>(0xff00 >> keep);
    }
    a->sin6_scope_id = 0;
  }
  return FormatAddress(Sa(s)) + "/" + std::to_string(bits);
}

bool Routable(const NetInterface& i) {
  return i.up && !i.loopback && !IsLinkLocalAddress(i.sockaddr_ptr());
}

}  // namespace

bool MultiHost(const std::vector<HostFacts>& hosts) {
  std::set<std::string> ids;
  for (const HostFacts& f : hosts) ids.insert(f.host_id);
  return ids.size() > 1;
}

Result<NetInterface> SelectedInterface(const HostFacts& f) {
  std::optional<sockaddr_storage> root = RootAddress(f);
  LOOM_ASSIGN_OR_RETURN(auto chosen, SelectSocketInterfaces(f.interfaces, f.Param("SOCKET_IFNAME"),
                                                            f.Param("SOCKET_FAMILY"), 1,
                                                            root ? Sa(*root) : nullptr));
  return chosen.front();
}

std::vector<NetInterface> DataNics(const HostFacts& f, bool multi_host) {
  std::vector<NetInterface> out;
  auto add = [&](const NetInterface& i) {
    if (!Routable(i) || (multi_host && IsHostPrivateName(i.name))) return;
    for (const NetInterface& o : out) {
      if (o.name == i.name) return;
    }
    out.push_back(i);
  };
  std::optional<sockaddr_storage> root = RootAddress(f);
  if (auto socket = SelectSocketInterfaces(f.interfaces, f.Param("SOCKET_IFNAME"), f.Param("SOCKET_FAMILY"), 64,
                                           root ? Sa(*root) : nullptr);
      socket.ok()) {
    for (const NetInterface& i : *socket) add(i);
  }
  if (f.topology) {
    for (int n : f.topology->OfKind(topology::NodeKind::kNic)) {
      const topology::Node& nic = f.topology->nodes[n];
      if (!nic.rdma || nic.netdev.empty()) continue;
      for (const NetInterface& i : f.interfaces) {
        if (i.name == nic.netdev) add(i);
      }
    }
  }
  return out;
}

std::optional<NetInterface> PeerNicOnSubnet(const HostFacts& peer, const NetInterface& nic, bool multi_host) {
  const std::string net = NetworkOf(nic);
  for (const std::vector<NetInterface>& pool : {DataNics(peer, multi_host), peer.interfaces}) {
    for (const NetInterface& i : pool) {
      if (Routable(i) && NetworkOf(i) == net) return i;
    }
  }
  return std::nullopt;
}

bool IsHostPrivateName(const std::string& ifname) {
  for (const char* p : {"lo", "docker", "virbr", "br-", "veth", "cni", "flannel", "cali", "vxlan",
                        "tun", "tap"}) {
    if (ifname.rfind(p, 0) == 0) return true;
  }
  return false;
}

std::vector<NetInterface> ProbeCandidates(const HostFacts& f, bool multi_host) {
  std::vector<NetInterface> out;
  std::set<std::string> seen;
  for (const NetInterface& i : f.interfaces) {
    if (!i.up || IsLinkLocalAddress(i.sockaddr_ptr())) continue;
    if (multi_host && i.loopback) continue;
    if (seen.insert(i.name + "|" + i.address).second) out.push_back(i);
  }
  return out;
}

std::string SuggestIfname(const std::vector<HostFacts>& hosts) {
  if (hosts.empty()) return "";
  std::map<std::string, int> picked;  // name -> hosts that already select it
  for (const HostFacts& f : hosts) {
    if (auto s = SelectedInterface(f); s.ok()) ++picked[s->name];
  }
  std::string best;
  int best_votes = -1;
  int64_t best_speed = -2;
  for (const NetInterface& cand : hosts.front().interfaces) {
    if (!Routable(cand) || IsHostPrivateName(cand.name)) continue;
    // The name must exist on every host with an address on cand's subnet.
    bool everywhere = true;
    int64_t slowest = cand.speed_mbps;
    for (const HostFacts& f : hosts) {
      bool found = false;
      for (const NetInterface& i : f.interfaces) {
        if (i.name == cand.name && Routable(i) &&
            InSameSubnet(cand.sockaddr_ptr(), cand.prefix_len, i.sockaddr_ptr())) {
          found = true;
          slowest = std::min(slowest, i.speed_mbps);
        }
      }
      everywhere = everywhere && found;
    }
    if (!everywhere) continue;
    int votes = picked.count(cand.name) ? picked[cand.name] : 0;
    if (votes > best_votes || (votes == best_votes && slowest > best_speed)) {
      best = cand.name;
      best_votes = votes;
      best_speed = slowest;
    }
  }
  return best.empty() ? "" : "=" + best;
}

std::vector<Finding> CheckNames(const std::vector<HostFacts>& hosts, const CheckOptions& opt) {
  std::vector<Finding> out;
  const bool multi = opt.multi_host || MultiHost(hosts);
  std::vector<std::string> names;  // in first-seen order
  for (const HostFacts& f : hosts) {
    for (const Resolution& r : f.resolutions) {
      if (std::find(names.begin(), names.end(), r.name) == names.end()) names.push_back(r.name);
    }
  }
  for (const std::string& name : names) {
    std::vector<std::string> failed, loopback;
    std::string error, loop_addr;
    std::map<std::string, std::vector<std::string>> first_answer;  // address -> hosts
    for (const HostFacts& f : hosts) {
      for (const Resolution& r : f.resolutions) {
        if (r.name != name) continue;
        if (!r.error.empty() || r.addresses.empty()) {
          failed.push_back(f.label);
          error = r.error;
          continue;
        }
        first_answer[r.addresses.front()].push_back(f.label);
        for (const std::string& a : r.addresses) {
          if (multi && IsLoopbackText(a)) {
            loopback.push_back(f.label);
            loop_addr = a;
            break;
          }
        }
      }
    }
    if (!failed.empty()) {
      out.push_back(Fail(Check::kNames, JoinLabels(failed),
                         "'" + name + "' does not resolve (" + (error.empty() ? "no address" : error) + ")",
                         "put IP addresses in the hostfile, or add '<address> " + name +
                             "' to /etc/hosts (or DNS) on " + JoinLabels(failed)));
    }
    if (!loopback.empty()) {
      std::string others;
      for (const auto& [addr, labels] : first_answer) {
        if (!IsLoopbackText(addr)) others += (others.empty() ? "" : ", ") + addr;
      }
      out.push_back(Fail(Check::kNames, JoinLabels(loopback),
                         "'" + name + "' resolves to loopback " + loop_addr +
                             (others.empty() ? "" : " (other hosts get " + others + ")") +
                             ": peers would be handed an address they cannot reach",
                         "remove the '" + loop_addr + " " + name + "' line from /etc/hosts on " +
                             JoinLabels(loopback) +
                             " (Debian's installer adds it), or use IP addresses in the hostfile"));
    } else if (first_answer.size() > 1) {
      std::string detail;
      for (const auto& [addr, labels] : first_answer) {
        detail += (detail.empty() ? "" : "; ") + addr + " on " + JoinLabels(labels);
      }
      out.push_back(Warn(Check::kNames, "", "'" + name + "' resolves differently: " + detail,
                         "make /etc/hosts or DNS agree on every host, or use IP addresses in the hostfile"));
    }
  }
  if (out.empty()) {
    out.push_back(Pass(Check::kNames, names.empty() ? "no host names to resolve"
                                                    : std::to_string(names.size()) +
                                                          " name(s) resolve to the same non-loopback "
                                                          "address on every host"));
  }
  return out;
}

std::vector<Finding> CheckInterfaces(const std::vector<HostFacts>& hosts, const CheckOptions& opt) {
  std::vector<Finding> out;
  const bool multi = opt.multi_host || MultiHost(hosts);
  const std::string suggestion = SuggestIfname(hosts);
  const std::string set_it = suggestion.empty()
                                 ? "set NCCL_SOCKET_IFNAME to an interface every host has on one subnet"
                                 : "export NCCL_SOCKET_IFNAME=" + suggestion + " on every host";
  std::map<std::string, std::vector<std::string>> choice;  // ifname -> hosts
  std::map<std::string, NetInterface> chosen_by_host;
  for (const HostFacts& f : hosts) {
    const std::string spec = f.Param("SOCKET_IFNAME");
    for (const std::string& w : SocketIfnameFilter::Parse(spec).Warnings()) {
      out.push_back(Warn(Check::kInterfaces, f.label, "NCCL_SOCKET_IFNAME='" + spec + "': " + w, set_it));
    }
    Result<NetInterface> sel = SelectedInterface(f);
    if (!sel.ok()) {
      out.push_back(Fail(Check::kInterfaces, f.label, sel.status().message(), set_it));
      continue;
    }
    chosen_by_host[f.label] = sel.value();
    choice[sel->name].push_back(f.label);
    if (!multi) continue;
    const std::string what = DescribeInterface(sel.value());
    if (sel->loopback) {
      out.push_back(Fail(Check::kInterfaces, f.label,
                         "selects loopback " + what + " in a multi-host job: peers cannot reach it",
                         set_it));
    } else if (IsHostPrivateName(sel->name)) {
      out.push_back(Warn(Check::kInterfaces, f.label,
                         "selects " + what + ", a container/virtual interface usually private to the host",
                         set_it));
    } else if (IsLinkLocalAddress(sel->sockaddr_ptr())) {
      out.push_back(Warn(Check::kInterfaces, f.label,
                         "selects link-local " + what + ", rarely reachable from other hosts", set_it));
    }
  }
  // A subnet shared with no peer's choice: traffic must be routed, if it can be at all.
  if (multi) {
    for (const auto& [label, mine] : chosen_by_host) {
      if (mine.loopback) continue;
      bool shares = false;
      for (const auto& [other, theirs] : chosen_by_host) {
        shares = shares || (other != label && InSameSubnet(mine.sockaddr_ptr(), mine.prefix_len,
                                                           theirs.sockaddr_ptr()));
      }
      if (!shares && chosen_by_host.size() > 1) {
        out.push_back(Warn(Check::kInterfaces, label,
                           "selects " + DescribeInterface(mine) +
                               ", whose subnet holds no other host's selected address (routed at best)",
                           set_it));
      }
    }
  }
  if (choice.size() > 1) {
    std::string detail;
    for (const auto& [name, labels] : choice) detail += (detail.empty() ? "" : "; ") + name + " on " + JoinLabels(labels);
    out.push_back(Warn(Check::kInterfaces, "", "hosts select different interfaces: " + detail, set_it));
  }
  if (out.empty()) {
    std::string detail;
    for (const auto& [label, i] : chosen_by_host) {
      detail += (detail.empty() ? "" : ", ") + label + " " + i.name + " " + i.address + "/" +
                std::to_string(i.prefix_len);
    }
    out.push_back(Pass(Check::kInterfaces, "socket interface per host: " + detail));
  }
  return out;
}

std::vector<Finding> CheckReachability(const std::vector<HostFacts>& hosts) {
  std::vector<Finding> out;
  int probes = 0;
  double worst_ms = 0;
  // Rendezvous first: nothing else works without it.
  for (const HostFacts& f : hosts) {
    for (const Probe& p : f.probes) {
      if (p.to_rank != -1) continue;
      ++probes;
      if (p.outcome == ProbeOutcome::kOk) continue;
      out.push_back(Fail(Check::kReachability, f.label,
                         "rendezvous " + p.address + ":" + std::to_string(p.port) + " " + Name(p.outcome) +
                             " (" + p.detail + ")",
                         "pass an address of rank 0's host that every host routes to (LOOM_ROOT or "
                         "MASTER_ADDR), and open TCP port " + std::to_string(p.port) + " there"));
    }
  }
  for (const HostFacts& target : hosts) {
    Result<NetInterface> sel = SelectedInterface(target);
    // outcome -> sources, for probes to the address the runtime would use.
    std::map<ProbeOutcome, std::vector<std::string>> used, other;
    std::string detail;
    std::set<std::string> other_ifs;
    for (const HostFacts& src : hosts) {
      for (const Probe& p : src.probes) {
        if (p.to_rank != target.rank) continue;
        ++probes;
        worst_ms = std::max(worst_ms, p.ms);
        if (p.outcome == ProbeOutcome::kOk) continue;
        const bool on_selected = sel.ok() && p.address == sel->address.substr(0, sel->address.find('%'));
        (on_selected ? used : other)[p.outcome].push_back(src.label);
        if (on_selected) detail = p.detail;
        if (!on_selected) other_ifs.insert(p.ifname);
      }
    }
    const std::string port = std::to_string(target.probe_port);
    for (const auto& [outcome, sources] : used) {
      const std::string where = "port " + port + " on " + sel->name + " " + sel->address;
      std::string summary, fix;
      switch (outcome) {
        case ProbeOutcome::kTimeout:
          summary = where + " dropped: no answer from " + JoinLabels(sources) + " (" + detail + ")";
          fix = "a firewall on " + target.label + " or between the hosts drops TCP port " + port +
                ": open the ports loom listens on (e.g. iptables -I INPUT -p tcp --dport " + port +
                " -j ACCEPT; loom's data ports come from net.ipv4.ip_local_port_range)";
          break;
        case ProbeOutcome::kRefused:
          summary = where + " refused (RST) to " + JoinLabels(sources) +
                    " although the doctor agent listens there: a REJECT rule";
          fix = "remove the REJECT rule for TCP port " + port + " on " + target.label +
                " (iptables -L INPUT -n on " + target.label + ")";
          break;
        case ProbeOutcome::kUnreachable:
          summary = where + " unreachable from " + JoinLabels(sources) + " (" + detail + ")";
          fix = "no route to " + sel->address + ": choose an interface on a network all hosts share (" +
                (SuggestIfname(hosts).empty() ? std::string("NCCL_SOCKET_IFNAME")
                                              : "NCCL_SOCKET_IFNAME=" + SuggestIfname(hosts)) +
                ") or fix the routes";
          break;
        default:
          summary = where + " failed from " + JoinLabels(sources) + " (" + detail + ")";
          fix = "retry with NCCL_DEBUG=INFO; check the firewall and routes of " + target.label;
      }
      out.push_back(Fail(Check::kReachability, target.label, summary, fix));
    }
    if (used.empty() && !other.empty()) {
      std::string detail2;
      for (const auto& [outcome, sources] : other) {
        detail2 += (detail2.empty() ? "" : "; ") + std::string(Name(outcome)) + " from " + JoinLabels(sources);
      }
      std::string ifs;
      for (const std::string& i : other_ifs) ifs += (ifs.empty() ? "" : ",") + i;
      out.push_back(Warn(Check::kReachability, target.label,
                         "port " + port + " on " + ifs + " (not the selected interface): " + detail2,
                         "keep NCCL_SOCKET_IFNAME off " + ifs + " on every host"));
    }
  }
  if (out.empty()) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.1f", worst_ms);
    out.push_back(Pass(Check::kReachability,
                       probes == 0 ? "no probes were run"
                                   : std::to_string(probes) + " TCP connects (every host to every peer "
                                                              "candidate and the rendezvous) succeeded, slowest " +
                                         ms + " ms"));
  }
  return out;
}

std::vector<Finding> CheckMtuAndRoutes(const std::vector<HostFacts>& hosts) {
  std::vector<Finding> out;
  // network -> mtu -> (host, ifname)
  std::map<std::string, std::map<int, std::vector<std::pair<std::string, std::string>>>> nets;
  for (const HostFacts& f : hosts) {
    std::set<std::string> seen;
    for (const NetInterface& i : f.interfaces) {
      if (!Routable(i) || i.mtu <= 0) continue;
      const std::string net = NetworkOf(i);
      if (seen.insert(net + "|" + i.name).second) nets[net][i.mtu].push_back({f.label, i.name});
    }
  }
  for (const auto& [net, by_mtu] : nets) {
    if (by_mtu.size() < 2) continue;
    // The odd hosts are those with the least common MTU; they get the usual value.
    int common = 0;
    size_t most = 0;
    for (const auto& [mtu, ifs] : by_mtu) {
      if (ifs.size() > most) common = mtu, most = ifs.size();
    }
    std::string detail, odd_hosts, fix;
    for (const auto& [mtu, ifs] : by_mtu) {
      std::vector<std::string> labels;
      for (const auto& [host, ifname] : ifs) labels.push_back(host + "/" + ifname);
      detail += (detail.empty() ? "" : "; ") + std::string("mtu ") + std::to_string(mtu) + " on " + JoinLabels(labels);
      if (mtu == common) continue;
      for (const auto& [host, ifname] : ifs) {
        odd_hosts += (odd_hosts.empty() ? "" : ",") + host;
        fix += (fix.empty() ? "" : "; ") + std::string("on ") + host + ": ip link set dev " + ifname +
               " mtu " + std::to_string(common);
      }
    }
    out.push_back(Fail(Check::kMtuRoutes, odd_hosts,
                       "MTU mismatch on " + net + ": " + detail +
                           " (frames above the smallest MTU are dropped: small messages pass, large "
                           "transfers hang)",
                       fix + " (or raise every host and the switch to the larger MTU)"));
  }
  for (const HostFacts& f : hosts) {
    std::vector<const NetInterface*> ifs;
    for (const NetInterface& i : f.interfaces) {
      if (Routable(i)) ifs.push_back(&i);
    }
    for (size_t a = 0; a < ifs.size(); ++a) {
      for (size_t b = a + 1; b < ifs.size(); ++b) {
        const NetInterface& x = *ifs[a];
        const NetInterface& y = *ifs[b];
        auto base = [](const std::string& n) { return n.substr(0, n.find(':')); };
        if (base(x.name) == base(y.name) || x.family != y.family) continue;
        const NetInterface& wide = x.prefix_len <= y.prefix_len ? x : y;
        const NetInterface& narrow = &wide == &x ? y : x;
        if (!InSameSubnet(wide.sockaddr_ptr(), wide.prefix_len, narrow.sockaddr_ptr())) continue;
        out.push_back(Warn(Check::kMtuRoutes, f.label,
                           "overlapping subnets: " + DescribeInterface(x) + " and " + DescribeInterface(y) +
                               " both claim " + NetworkOf(narrow) +
                               ": the kernel sends traffic for it through one of them only",
                           "give each NIC its own subnet, or pin NCCL_SOCKET_IFNAME==" + narrow.name +
                               " and check 'ip route get <peer address>' on " + f.label));
      }
    }
  }
  if (out.empty()) {
    out.push_back(Pass(Check::kMtuRoutes, std::to_string(nets.size()) +
                                              " subnet(s) with one MTU each across hosts; no overlapping subnets"));
  }
  return out;
}

}  // namespace loom::doctor
