// Checks 4, 6, 8 and 10 (fingerprint, bandwidth, limits, transport plan)
// and RunAllChecks; the hardware checks 5 and 9 are in checks_fabric.cc.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "comm/transport_plan.h"
#include "topology/socket_ifname.h"
#include "tools/doctor/check_helpers.h"
#include "tools/doctor/checks.h"

namespace loom::doctor {

namespace {

using detail::BuildHasIb;
using detail::FingerprintValue;
using detail::Fmt;
using detail::Join;
using detail::RdmaNics;
using detail::Truthy;

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

// What the runtime's setup would publish for this host (comm/setup.cc), so
// that the runtime's own rule, PlanLink, decides each link. Built from the
// facts, since the doctor gathers them once and judges them on rank 0:
//  - SHM is always offered (the runtime offers it unconditionally);
//  - Socket: the interface NCCL's rules select, or why none;
//  - UCX: only when the build has it (the doctor does not start a worker);
//  - IB: the runtime's own IbAvailabilityOf on the gathered ports; found
//    ports are unusable when the build carries no IB data path.
TransportRecord TransportRecordOf(const HostFacts& f) {
  TransportRecord r;
  r.host_id = f.host_id;
  r.hostname = f.label;
  r.shm = Availability::Usable("/dev/shm");
  if (auto sel = SelectedInterface(f); sel.ok()) {
    r.socket = Availability::Usable(sel->name);
    const std::string addr = sel->address.substr(0, sel->address.find('%'));
    r.socket_address = (addr.find(':') != std::string::npos ? "[" + addr + "]" : addr) + ":" + std::to_string(f.probe_port);
  } else {
    r.socket = Availability::Unusable(sel.status().message());
  }
  const std::string transports = FingerprintValue(f, "transports");
  r.ucx = transports.find("ucx") != std::string::npos ? Availability::Usable("UCX (not probed by the doctor)")
                                                      : Availability::Absent("loom was built without UCX");
  r.knobs.shm_disable = Truthy(f.Param("SHM_DISABLE"));
  r.knobs.ib_disable = Truthy(f.Param("IB_DISABLE"));
  r.knobs.net = f.Param("NET");
  r.knobs.require = f.Env("LOOM_REQUIRE_TRANSPORT");
  ib::Discovery found;
  found.ports = detail::RdmaPorts(f);
  if (found.ports.empty()) found.absent_reason = f.no_rdma_reason;
  if (r.knobs.ib_disable) {
    r.ib = Availability::Absent(kIbDisabledReason);
  } else {
    r.ib = GateUnprovenIb(IbAvailabilityOf(found, f.Param("IB_HCA")), r.knobs);
    if (r.ib.usable() && !BuildHasIb(f)) {
      r.ib = Availability::Unusable("found " + r.ib.detail + ", but this loom build moves data over " +
                                    transports + " only");
    }
  }
  return r;
}

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

std::vector<Finding> CheckBandwidth(const std::vector<HostFacts>& hosts, const CheckOptions& opt) {
  std::vector<Finding> out;
  struct Measured {
    const HostFacts* from;
    const HostFacts* to;
    const Stream* s;
    std::string to_ifname;  // the receiver's NIC ("" unknown)
    double expect;          // Gb/s, 0 = unknown
  };
  // A stream's NIC at one end: the named interface, else (older agents) the selected one.
  auto nic = [](const HostFacts& f, const std::string& name) -> std::optional<NetInterface> {
    for (const NetInterface& i : f.interfaces) {
      if (!name.empty() && i.name == name) return i;
    }
    if (!name.empty()) return std::nullopt;
    auto sel = SelectedInterface(f);
    return sel.ok() ? std::optional<NetInterface>(*sel) : std::nullopt;
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
      const auto from_nic = nic(f, s.ifname);
      const auto to_nic = nic(to, s.to_ifname);
      double expect = opt.expect_gbps;
      if (expect <= 0 && from_nic && to_nic && !from_nic->is_virtual && !to_nic->is_virtual &&
          from_nic->speed_mbps > 0 && to_nic->speed_mbps > 0) {
        // The slower end's link speed, when both are real NICs with a known speed.
        expect = static_cast<double>(std::min(from_nic->speed_mbps, to_nic->speed_mbps)) / 1000;
      }
      all.push_back({&f, &to, &s, to_nic ? to_nic->name : "", expect});
    }
  }
  auto slow = [](const Measured& m, double frac) { return m.expect > 0 && m.s->Gbps() < frac * m.expect; };
  // The NIC of one host at one end of a stream.
  auto end = [](const Measured& m, bool egress) {
    return std::make_pair(egress ? m.from : m.to, egress ? m.s->ifname : m.to_ifname);
  };
  // A NIC all of whose outgoing (or incoming) streams are slow, while
  // streams that do not touch it are not, is the one to name; with one
  // NIC per host that names the host.
  std::set<std::pair<const HostFacts*, std::string>> nics;
  for (const Measured& m : all) nics.insert(end(m, true)), nics.insert(end(m, false));
  std::set<const Measured*> named;
  for (const auto& [h, ifname] : nics) {
    const HostFacts* host = h;  // a lambda cannot capture a structured binding before clang 16
    const bool several =
        std::count_if(nics.begin(), nics.end(), [&](const auto& n) { return n.first == host; }) > 1;
    for (bool egress : {true, false}) {
      std::vector<const Measured*> mine;
      bool others_fast = false;
      for (const Measured& m : all) {
        const auto key = std::make_pair(h, ifname);
        if (end(m, egress) == key) mine.push_back(&m);
        else if (end(m, !egress) != key && m.expect > 0 && !slow(m, 0.8)) others_fast = true;
      }
      if (mine.empty() || !others_fast || named.count(mine.front())) continue;
      if (!std::all_of(mine.begin(), mine.end(), [&](const Measured* m) { return slow(*m, 0.8); })) continue;
      double worst = 1e30;
      for (const Measured* m : mine) worst = std::min(worst, m->s->Gbps()), named.insert(m);
      const Measured& m0 = *mine.front();
      const std::string shown = ifname.empty() ? "its selected interface" : ifname;
      const double pct = 100 * worst / m0.expect;
      out.push_back((pct < 50 ? Fail : Warn)(
          Check::kBandwidth, h->label,
          std::string(egress ? "sends" : "receives") + " at " + Rate(worst) + " on " + shown + ", " +
              Fmt("%.0f%%", pct) + " of the expected " + Rate(m0.expect) + " (every " +
              (egress ? "outgoing" : "incoming") + " stream" + (several ? " on " + shown : "") +
              " is slow, the others are not)",
          "inspect " + h->label + "'s link: 'ethtool " + shown + "' (speed, duplex), 'tc qdisc show dev " + shown +
              "' (a rate limit), the switch port"));
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
    std::set<std::string> ifnames;
    for (const Measured& m : all) {
      lo = std::min(lo, m.s->Gbps()), hi = std::max(hi, m.s->Gbps());
      any_expect = any_expect || m.expect > 0;
      if (!m.s->ifname.empty()) ifnames.insert(m.s->ifname);
    }
    out.push_back(Pass(Check::kBandwidth,
                       all.empty() ? "no streams measured"
                                   : std::to_string(all.size()) + " streams on " + Join({ifnames.begin(), ifnames.end()}) +
                                         ": " + Rate(lo) + " .. " + Rate(hi) +
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
    // Sockets: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD per peer and direction, and one
    // for small messages both ways (so twice that plus one per peer host), plus bootstrap and
    // slack.
    const int64_t per_peer = std::max(1, std::atoi(f.Param("SOCKET_NTHREADS").c_str())) *
                             std::max(1, std::atoi(f.Param("NSOCKS_PERTHREAD").c_str()));
    const int64_t need = 64 + (2 * per_peer + 1) * static_cast<int64_t>(hosts.size());
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

std::vector<Finding> CheckTransportPlan(const std::vector<HostFacts>& hosts) {
  std::vector<TransportRecord> records;
  for (const HostFacts& f : hosts) records.push_back(TransportRecordOf(f));
  std::vector<Finding> out;
  std::vector<std::string> lines;
  std::map<std::string, std::vector<std::string>> fallbacks;  // host -> the runtime's warnings
  // The end a runtime message is about: the one of the pair it names last.
  auto about = [](const std::string& msg, const HostFacts& x, const HostFacts& y) {
    const size_t px = msg.rfind("(" + x.label + ")"), py = msg.rfind("(" + y.label + ")");
    return py != std::string::npos && (px == std::string::npos || py > px) ? y.label : x.label;
  };
  for (size_t a = 0; a < hosts.size(); ++a) {
    for (size_t b = a + 1; b < hosts.size(); ++b) {
      const HostFacts& x = hosts[a];
      const HostFacts& y = hosts[b];
      const std::string pair = x.label + "<->" + y.label;
      auto plan = PlanLink(records, static_cast<int>(a), static_cast<int>(b));
      if (!plan.ok()) {
        const std::string& msg = plan.status().message();
        const std::string fix = msg.find("no network transport") != std::string::npos ? "see the interfaces check"
                                : msg.find("loopback") != std::string::npos
                                    ? "name the data interface on every host: NCCL_SOCKET_IFNAME==" +
                                          (SuggestIfname(hosts).empty() ? "<data interface>" : SuggestIfname(hosts).substr(1))
                                    : "unset NCCL_NET and LOOM_REQUIRE_TRANSPORT to let loom choose, or NCCL_NET=Socket; "
                                      "set these knobs alike on every host";
        out.push_back(Fail(Check::kTransportPlan, about(msg, x, y), pair + ": " + msg, fix));
        continue;
      }
      for (const std::string& w : plan->warnings) fallbacks[about(w, x, y)].push_back(w);
      // The runtime's reason ends with the transport it settled on; the line starts with it.
      std::string why = plan->reason;
      for (const std::string tail : {"; Socket", "Socket"}) {
        if (why.ends_with(tail)) why.resize(why.size() - tail.size());
      }
      std::string line = pair + ": " + TransportName(plan->kind);
      switch (plan->kind) {
        case TransportKind::kShm: line += " (" + why + "; NCCL_SHM_DISABLE)"; break;
        case TransportKind::kIb: line += " (" + why + "; NCCL_IB_DISABLE, NCCL_IB_HCA)"; break;
        case TransportKind::kUcx: line += " (" + why + "; NCCL_NET)"; break;
        case TransportKind::kSocket: {
          const std::string spec = x.Param("SOCKET_IFNAME");
          line += " " + records[a].socket.detail + "->" + records[b].socket.detail + " " +
                  records[b].socket_address.substr(0, records[b].socket_address.rfind(':')) + " (" + why +
                  (why.empty() ? "" : "; ") + "NCCL_SOCKET_IFNAME" + (spec.empty() ? " unset" : "=" + spec) + ")";
          break;
        }
      }
      lines.push_back(line);
    }
  }
  for (const auto& [host, warnings] : fallbacks) {
    out.push_back(Warn(Check::kTransportPlan, host,
                       warnings.front() + (warnings.size() > 1 ? " (and " + std::to_string(warnings.size() - 1) +
                                                                     " more link(s) alike)"
                                                               : ""),
                       "fix the transport on " + host + ", or choose knowingly: NCCL_IB_DISABLE=1 (or NCCL_NET=Socket) "
                       "on every host; LOOM_REQUIRE_TRANSPORT makes a fallback an error"));
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
