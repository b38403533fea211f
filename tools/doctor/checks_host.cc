// Checks 4, 5, 6, 8, 9 and 10 (fingerprint, fabric, bandwidth, limits, GPU
// side, transport plan) and RunAllChecks.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "topology/paths.h"
#include "topology/socket_ifname.h"
#include "tools/doctor/checks.h"

namespace loom::doctor {

namespace {

using topology::NodeKind;
using topology::PathType;

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s;
}

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// "512 MiB", "64 GiB".
std::string Bytes(int64_t b) {
  if (b == kUnlimited) return "unlimited";
  if (b >= (int64_t{1} << 30)) return Fmt("%.1f GiB", static_cast<double>(b) / (1 << 30));
  return Fmt("%.0f MiB", static_cast<double>(b) / (1 << 20));
}

std::string Rate(double gbps) { return gbps >= 1 ? Fmt("%.2f Gbit/s", gbps) : Fmt("%.0f Mbit/s", gbps * 1000); }

// Environment that legitimately differs per rank or host.
bool PerHostVariable(const std::string& k) {
  static const std::set<std::string> kPerHost = {
      "LOOM_RANK",       "LOOM_LOCAL_RANK",  "LOOM_HOSTID",       "NCCL_HOSTID",
      "LOOM_TOPO_FILE",  "NCCL_TOPO_FILE",   "LOOM_TOPO_DUMP_FILE", "NCCL_TOPO_DUMP_FILE",
      "NCCL_DEBUG_FILE", "LOOM_DEBUG_FILE",  "LOOM_JOB_ID"};
  return kPerHost.count(k) > 0 || k.ends_with("_RANK");
}

// The RDMA NIC ports of a host's topology.
std::vector<const topology::Node*> RdmaNics(const HostFacts& f) {
  std::vector<const topology::Node*> out;
  if (!f.topology) return out;
  for (int i : f.topology->OfKind(NodeKind::kNic)) {
    if (f.topology->nodes[i].rdma) out.push_back(&f.topology->nodes[i]);
  }
  return out;
}

bool Truthy(const std::string& v) { return !v.empty() && v != "0" && v != "false" && v != "no" && v != "off"; }

std::string FingerprintValue(const HostFacts& f, const std::string& key) {
  for (const auto& [k, v] : f.fingerprint) {
    if (k == key) return v;
  }
  return "";
}

// Whether this build carries an RDMA data path (the fingerprint's transports).
bool BuildHasIb(const HostFacts& f) { return FingerprintValue(f, "transports").find("ib") != std::string::npos; }

}  // namespace

std::vector<Finding> CheckFingerprint(const std::vector<HostFacts>& hosts) {
  std::vector<Finding> out;
  // Fingerprint keys must match (FAIL); other environment should (WARN).
  std::set<std::string> must_match, env_keys;
  for (const HostFacts& f : hosts) {
    for (const auto& [k, v] : f.fingerprint) must_match.insert(k);
  }
  for (const HostFacts& f : hosts) {
    for (const auto& [k, v] : f.env) {
      const bool twin = k.rfind("LOOM_", 0) == 0 && must_match.count("NCCL_" + k.substr(5));
      if (!PerHostVariable(k) && !must_match.count(k) && !twin) env_keys.insert(k);
    }
  }
  auto value = [](const HostFacts& f, const std::string& key, bool fingerprint) {
    if (fingerprint) {
      for (const auto& [k, v] : f.fingerprint) {
        if (k == key) return v;
      }
    } else if (auto it = f.env.find(key); it != f.env.end()) {
      return it->second;
    }
    return std::string("(unset)");
  };
  size_t compared = 0;
  for (const std::set<std::string>* keys : {&must_match, &env_keys}) {
    const bool fail = keys == &must_match;
    for (const std::string& key : *keys) {
      ++compared;
      std::map<std::string, std::vector<std::string>> values;  // value -> hosts
      for (const HostFacts& f : hosts) values[value(f, key, fail)].push_back(f.label);
      if (values.size() < 2) continue;
      // The odd one out: the value the fewest hosts hold.
      std::vector<std::string> odd_hosts;
      std::string detail;
      for (const auto& [v, labels] : values) {
        detail += (detail.empty() ? "" : "; ") + std::string("'") + v + "' on " + Join(labels);
        if (odd_hosts.empty() || labels.size() < odd_hosts.size()) odd_hosts = labels;
      }
      const bool env = key.rfind("NCCL_", 0) == 0 || key.rfind("LOOM_", 0) == 0 || key.rfind("UCX_", 0) == 0;
      const std::string fix =
          env ? "set " + key + " the same on every host (export it through the launcher, e.g. mpirun -x " + key +
                    "; or fix it on " + Join(odd_hosts) + ")"
              : "install the same loom build on every host (" + Join(odd_hosts) + " differs)";
      out.push_back((fail ? Fail : Warn)(Check::kFingerprint, Join(odd_hosts), key + " differs: " + detail, fix));
    }
  }
  if (out.empty()) {
    out.push_back(Pass(Check::kFingerprint, "version " + (hosts.empty() ? "" : FingerprintValue(hosts.front(), "version")) +
                                                " and " + std::to_string(compared) +
                                                " settings identical on every host"));
  }
  return out;
}

std::vector<Finding> CheckFabric(const std::vector<HostFacts>& hosts) {
  std::vector<Finding> out;
  std::vector<std::string> with, without;
  std::map<std::string, std::vector<std::string>> layers, roce;  // value -> hosts
  for (const HostFacts& f : hosts) {
    const auto nics = RdmaNics(f);
    (nics.empty() ? without : with).push_back(f.label);
    if (nics.empty()) continue;
    const bool disabled = Truthy(f.Param("IB_DISABLE"));
    const std::string hca = f.Param("IB_HCA");
    std::vector<std::string> down, up, filtered_out;
    std::set<std::string> host_layers, host_roce;
    const SocketIfnameFilter filter = SocketIfnameFilter::Parse(hca);
    for (const topology::Node* n : nics) {
      const std::string port = n->id + ":" + std::to_string(n->port);
      if (!hca.empty() && !filter.Matches(n->id, n->port)) {
        filtered_out.push_back(port);
        continue;
      }
      (n->up ? up : down).push_back(port);
      if (!n->up) continue;
      host_layers.insert(std::string(Name(n->link_layer)));
      if (n->link_layer == topology::LinkLayer::kEthernet) host_roce.insert("RoCE v" + std::to_string(n->roce_version));
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
                         "NCCL_IB_DISABLE is set although " + Join(up) +
                             " are up: all traffic goes over sockets",
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
      if (RdmaNics(f).empty() && !f.no_rdma_reason.empty()) reason = " (" + f.no_rdma_reason + ")";
    }
    out.push_back(Fail(Check::kFabric, Join(without),
                       "RDMA NICs on " + Join(with) + " but none on " + Join(without) + reason +
                           ": a mixed job (one host on IB, another on sockets)",
                       "make the hosts alike (container: pass --device=/dev/infiniband and the verbs "
                       "libraries), or set NCCL_IB_DISABLE=1 on every host"));
  }
  auto differ = [&](const std::map<std::string, std::vector<std::string>>& m, const std::string& what,
                    const std::string& fix) {
    if (m.size() < 2) return;
    std::string detail;
    for (const auto& [v, labels] : m) detail += (detail.empty() ? "" : "; ") + v + " on " + Join(labels);
    out.push_back(Fail(Check::kFabric, "", what + " differs between hosts: " + detail, fix));
  };
  differ(layers, "link layer", "use one fabric (all IB or all RoCE) or restrict NCCL_IB_HCA to the common one");
  differ(roce, "RoCE version", "pick the same GID type on every host, e.g. NCCL_IB_GID_INDEX=3 (RoCE v2)");
  if (out.empty()) {
    std::string reason = hosts.empty() ? "" : hosts.front().no_rdma_reason;
    out.push_back(Pass(Check::kFabric, with.empty()
                                           ? "no RDMA devices on any host" + (reason.empty() ? "" : " (" + reason + ")") +
                                                 ": sockets carry inter-host traffic, as expected"
                                           : "RDMA ports up and alike on " + Join(with)));
  }
  return out;
}

std::vector<Finding> CheckBandwidth(const std::vector<HostFacts>& hosts, const CheckOptions& opt) {
  std::vector<Finding> out;
  struct Measured {
    const HostFacts* from;
    const HostFacts* to;
    const Stream* s;
    double expect;  // Gb/s, 0 = unknown
  };
  std::vector<Measured> all;
  for (const HostFacts& f : hosts) {
    for (const Stream& s : f.streams) {
      auto it = std::find_if(hosts.begin(), hosts.end(), [&](const HostFacts& h) { return h.rank == s.to_rank; });
      if (it == hosts.end()) continue;
      const HostFacts& to = *it;
      if (!s.error.empty()) {
        out.push_back(Fail(Check::kBandwidth, f.label, "stream to " + to.label + " on " + s.ifname +
                                                           " failed: " + s.error,
                           "see the reachability check for " + to.label));
        continue;
      }
      double expect = opt.expect_gbps;
      if (expect <= 0) {
        // The slower end's link speed, when both are real NICs with a known speed.
        auto sel_from = SelectedInterface(f);
        auto sel_to = SelectedInterface(to);
        if (sel_from.ok() && sel_to.ok() && !sel_from->is_virtual && !sel_to->is_virtual &&
            sel_from->speed_mbps > 0 && sel_to->speed_mbps > 0) {
          expect = static_cast<double>(std::min(sel_from->speed_mbps, sel_to->speed_mbps)) / 1000;
        }
      }
      all.push_back({&f, &to, &s, expect});
    }
  }
  auto slow = [](const Measured& m, double frac) { return m.expect > 0 && m.s->Gbps() < frac * m.expect; };
  // A host all of whose outgoing (or incoming) streams are slow, while
  // others are not, is the one to name.
  std::set<const Measured*> named;
  for (const HostFacts& h : hosts) {
    for (bool egress : {true, false}) {
      std::vector<const Measured*> mine;
      bool others_fast = false;
      for (const Measured& m : all) {
        const bool touches = (egress ? m.from : m.to) == &h;
        if (touches) mine.push_back(&m);
        else if (!slow(m, 0.8) && m.expect > 0 && m.from != &h && m.to != &h) others_fast = true;
      }
      if (mine.empty() || !others_fast) continue;
      if (!std::all_of(mine.begin(), mine.end(), [&](const Measured* m) { return slow(*m, 0.8); })) continue;
      double worst = 1e30;
      for (const Measured* m : mine) worst = std::min(worst, m->s->Gbps()), named.insert(m);
      const Measured& m0 = *mine.front();
      const std::string ifname = egress ? m0.s->ifname : "its selected interface";
      const double pct = 100 * worst / m0.expect;
      out.push_back((pct < 50 ? Fail : Warn)(
          Check::kBandwidth, h.label,
          std::string(egress ? "sends" : "receives") + " at " + Rate(worst) + " on " + ifname + ", " +
              Fmt("%.0f%%", pct) + " of the expected " + Rate(m0.expect) + " (every " +
              (egress ? "outgoing" : "incoming") + " stream is slow, the others are not)",
          "inspect " + h.label + "'s link: 'ethtool " + m0.s->ifname + "' (speed, duplex), 'tc qdisc show dev " +
              m0.s->ifname + "' (a rate limit), the switch port"));
    }
  }
  for (const Measured& m : all) {
    if (named.count(&m) || !slow(m, 0.8)) continue;
    const double pct = 100 * m.s->Gbps() / m.expect;
    out.push_back((pct < 50 ? Fail : Warn)(
        Check::kBandwidth, m.from->label,
        "to " + m.to->label + " on " + m.s->ifname + ": " + Rate(m.s->Gbps()) + ", " + Fmt("%.0f%%", pct) +
            " of the expected " + Rate(m.expect),
        "inspect the link between " + m.from->label + " and " + m.to->label +
            " (ethtool, tc qdisc show, switch counters)"));
  }
  if (out.empty()) {
    double lo = 1e30, hi = 0;
    bool any_expect = false;
    for (const Measured& m : all) {
      lo = std::min(lo, m.s->Gbps()), hi = std::max(hi, m.s->Gbps());
      any_expect = any_expect || m.expect > 0;
    }
    out.push_back(Pass(Check::kBandwidth,
                       all.empty() ? "no streams measured"
                                   : std::to_string(all.size()) + " streams: " + Rate(lo) + " .. " + Rate(hi) +
                                         (any_expect ? ", at least 80% of the expected rate"
                                                     : " (no expected rate: virtual links; pass --expect RATE)")));
  }
  return out;
}

std::vector<Finding> CheckLimits(const std::vector<HostFacts>& hosts) {
  std::vector<Finding> out;
  constexpr int64_t kMiB = int64_t{1} << 20;
  for (const HostFacts& f : hosts) {
    const Limits& l = f.limits;
    if (l.shm_bytes >= 0 && l.shm_bytes < 256 * kMiB) {
      out.push_back(Fail(Check::kLimits, f.label, "/dev/shm is " + Bytes(l.shm_bytes) +
                                                      ": too small for shared-memory buffers ('failed to extend /dev/shm')",
                         "give the container more: docker run --shm-size=8g (Kubernetes: an emptyDir "
                         "with medium Memory on /dev/shm), or mount -o remount,size=8G /dev/shm"));
    } else if (l.shm_bytes >= 0 && l.shm_bytes < 1024 * kMiB) {
      out.push_back(Warn(Check::kLimits, f.label, "/dev/shm is only " + Bytes(l.shm_bytes),
                         "docker run --shm-size=8g, or mount -o remount,size=8G /dev/shm"));
    }
    const bool rdma = !RdmaNics(f).empty();
    if (rdma && l.memlock_bytes >= 0 && l.memlock_bytes < 64 * kMiB) {
      out.push_back(Fail(Check::kLimits, f.label,
                         "memlock limit " + Bytes(l.memlock_bytes) +
                             " with RDMA NICs present: registering buffers fails ('ibv_reg_mr ... Cannot allocate memory')",
                         "ulimit -l unlimited (limits.conf 'memlock unlimited'; docker --ulimit memlock=-1)"));
    } else if (rdma && l.memlock_bytes != kUnlimited && l.memlock_bytes >= 0) {
      out.push_back(Warn(Check::kLimits, f.label, "memlock limit " + Bytes(l.memlock_bytes) + " with RDMA NICs present",
                         "ulimit -l unlimited"));
    }
    // Sockets: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD per peer, plus bootstrap and slack.
    const int64_t per_peer = std::max(1, std::atoi(f.Param("SOCKET_NTHREADS").c_str())) *
                             std::max(1, std::atoi(f.Param("NSOCKS_PERTHREAD").c_str()));
    const int64_t need = 64 + 2 * per_peer * static_cast<int64_t>(hosts.size());
    if (l.nofile >= 0 && l.nofile < need) {
      out.push_back(Fail(Check::kLimits, f.label,
                         "open files limit " + std::to_string(l.nofile) + " is below the ~" + std::to_string(need) +
                             " sockets and files this job needs",
                         "ulimit -n 65536 (docker --ulimit nofile=65536)"));
    }
  }
  if (out.empty()) {
    std::string detail;
    if (!hosts.empty()) {
      const Limits& l = hosts.front().limits;
      detail = " (" + hosts.front().label + ": /dev/shm " + (l.shm_bytes < 0 ? "unknown" : Bytes(l.shm_bytes)) +
               ", memlock " + (l.memlock_bytes < 0 ? "unknown" : Bytes(l.memlock_bytes)) + ", nofile " +
               (l.nofile == kUnlimited ? "unlimited" : std::to_string(l.nofile)) + ")";
    }
    out.push_back(Pass(Check::kLimits, "/dev/shm, memlock and open files are sufficient" + detail));
  }
  return out;
}

std::vector<Finding> CheckGpu(const std::vector<HostFacts>& hosts) {
  std::vector<Finding> out;
  int gpus = 0;
  for (const HostFacts& f : hosts) {
    if (!f.topology) continue;
    const topology::Topology& t = *f.topology;
    const std::vector<int> g = t.OfKind(NodeKind::kGpu);
    gpus += static_cast<int>(g.size());
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
  }
  if (out.empty()) {
    out.push_back(Pass(Check::kGpu, gpus == 0 ? "no GPUs on any host"
                                              : std::to_string(gpus) + " GPU(s): peer paths and NIC placement fine"));
  }
  return out;
}

std::vector<Finding> CheckTransportPlan(const std::vector<HostFacts>& hosts) {
  std::vector<Finding> out;
  std::vector<std::string> lines;
  for (size_t a = 0; a < hosts.size(); ++a) {
    for (size_t b = a + 1; b < hosts.size(); ++b) {
      const HostFacts& x = hosts[a];
      const HostFacts& y = hosts[b];
      const std::string pair = x.label + "<->" + y.label;
      const std::string net = x.Param("NET");
      if (x.host_id == y.host_id && !Truthy(x.Param("SHM_DISABLE"))) {
        lines.push_back(pair + ": SHM (same host; NCCL_SHM_DISABLE)");
        continue;
      }
      if (!net.empty() && net != "Socket" && net != "socket" && net != "SOCKET") {
        const bool ib = (net == "IB" || net == "ib") && BuildHasIb(x) && !RdmaNics(x).empty() && !RdmaNics(y).empty();
        if (!ib) {
          out.push_back(Fail(Check::kTransportPlan, x.label,
                             pair + ": NCCL_NET=" + net + " selects a transport this build or these hosts cannot use (" +
                                 FingerprintValue(x, "transports") + "); loom does not fall back when NCCL_NET is set",
                             "unset NCCL_NET, or NCCL_NET=Socket"));
          continue;
        }
        lines.push_back(pair + ": IB (NCCL_NET=" + net + ")");
        continue;
      }
      auto sx = SelectedInterface(x);
      auto sy = SelectedInterface(y);
      if (!sx.ok() || !sy.ok()) {
        out.push_back(Fail(Check::kTransportPlan, (!sx.ok() ? x : y).label,
                           pair + ": no transport: no socket interface on " + (!sx.ok() ? x : y).label,
                           "see the interfaces check"));
        continue;
      }
      std::string why = x.host_id == y.host_id ? "same host but NCCL_SHM_DISABLE=1; " : "";
      if (Truthy(x.Param("IB_DISABLE"))) {
        why += "NCCL_IB_DISABLE=1; ";
      } else if (RdmaNics(x).empty() || RdmaNics(y).empty()) {
        why += "no RDMA NIC on " + std::string(RdmaNics(x).empty() ? x.label : y.label) + "; ";
      } else if (!BuildHasIb(x)) {
        why += "build without IB; ";
      } else {
        lines.push_back(pair + ": IB (auto; NCCL_IB_DISABLE, NCCL_IB_HCA)");
        continue;
      }
      lines.push_back(pair + ": Socket " + sx->name + "->" + sy->name + " " + sy->address + " (" + why +
                      "NCCL_SOCKET_IFNAME" + (x.Param("SOCKET_IFNAME").empty() ? " unset" : "=" + x.Param("SOCKET_IFNAME")) +
                      ")");
    }
  }
  if (out.empty()) {
    std::string summary;
    const size_t kShown = 6;
    for (size_t i = 0; i < lines.size() && i < kShown; ++i) summary += (i ? "; " : "") + lines[i];
    if (lines.size() > kShown) summary += "; ... (" + std::to_string(lines.size()) + " pairs)";
    out.push_back(Pass(Check::kTransportPlan, lines.empty() ? "a single agent: no links" : summary));
  }
  return out;
}

std::vector<Finding> RunAllChecks(const std::vector<HostFacts>& hosts, const CheckOptions& opt) {
  std::vector<Finding> out;
  auto add = [&](std::vector<Finding> f) { out.insert(out.end(), f.begin(), f.end()); };
  bool probed = false, streamed = false;
  for (const HostFacts& f : hosts) probed |= !f.probes.empty(), streamed |= !f.streams.empty();
  add(CheckNames(hosts, opt));
  add(CheckInterfaces(hosts, opt));
  if (probed) add(CheckReachability(hosts));
  add(CheckFingerprint(hosts));
  add(CheckFabric(hosts));
  if (streamed) add(CheckBandwidth(hosts, opt));
  add(CheckMtuAndRoutes(hosts));
  add(CheckLimits(hosts));
  add(CheckGpu(hosts));
  add(CheckTransportPlan(hosts));
  return out;
}

}  // namespace loom::doctor
