// The doctor agent and, on rank 0, the coordinator (protocol in agent.h).
#include "tools/doctor/agent.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "tools/doctor/gather.h"
#include "tools/doctor/net.h"

namespace loom::doctor {

namespace {

using json::Value;
using std::chrono::milliseconds;

std::string RootText(const LaunchEnv& l) {
  const bool v6 = l.root_host.find(':') != std::string::npos;
  return (v6 ? "[" + l.root_host + "]" : l.root_host) + ":" + std::to_string(l.root_port);
}

Result<std::string> MessageType(const Value& m) {
  const Value* t = m.Find("type");
  if (t == nullptr || !t->is_string()) return InvalidArgument("doctor: a message without a type");
  return t->string();
}

Result<Value> Expect(int fd, const std::string& type, Deadline deadline, const std::string& peer) {
  LOOM_ASSIGN_OR_RETURN(Value m, RecvMessage(fd, deadline, peer));
  LOOM_ASSIGN_OR_RETURN(std::string got, MessageType(m));
  if (got != type) return InvalidArgument("doctor: expected '" + type + "' from " + peer + ", got '" + got + "'");
  return m;
}

// The coordinator: collects hellos, hands out the peer list, gathers
// probes, runs the streams one pair at a time, judges, and says done.
class Coordinator {
 public:
  Coordinator(const AgentOptions& opt, Fd listener) : opt_(opt), listener_(std::move(listener)) {}

  Report Run() {
    const Deadline hellos = Deadline::After(milliseconds(opt_.wait_ms));
    while (static_cast<int>(agents_.size()) < opt_.launch.size) {
      auto conn = AcceptBefore(listener_.get(), hellos);
      if (!conn.ok()) break;
      auto hello = Expect(conn->get(), "hello", Deadline::After(milliseconds(5000)), "a new agent");
      if (!hello.ok()) continue;  // a stranger or a stale agent: ignore it
      const Value* fv = hello->Find("facts");
      auto facts = fv ? FactsFromJson(*fv) : Result<HostFacts>(InvalidArgument("doctor: hello without facts"));
      if (!facts.ok() || facts->rank < 0 || facts->rank >= opt_.launch.size || agents_.count(facts->rank)) continue;
      const int rank = facts->rank;
      agents_[rank] = Agent{std::move(conn).value(), std::move(facts).value()};
    }
    std::vector<Finding> extra;
    for (int r = 0; r < opt_.launch.size; ++r) {
      if (agents_.count(r)) continue;
      extra.push_back(Fail(Check::kAgents, "rank " + std::to_string(r),
                           "never reached the coordinator at " + RootText(opt_.launch) + " within " +
                               std::to_string(opt_.wait_ms / 1000) + " s",
                           "start loom doctor on every host with the same launcher and LOOM_ROOT; rank " +
                               std::to_string(r) + "'s own output names why it could not connect"));
    }
    Value::Array all;
    for (auto& [r, a] : agents_) all.push_back(ToJson(a.facts));
    Broadcast(Value::Object{{"type", "peers"}, {"hosts", all}});
    const Deadline probes = Deadline::After(milliseconds(opt_.wait_ms + 4 * opt_.connect_timeout_ms));
    for (auto& [r, a] : agents_) {
      auto m = Expect(a.conn.get(), "probes", probes, a.facts.label);
      const Value* pv = m.ok() ? m->Find("facts") : nullptr;
      auto f = pv ? FactsFromJson(*pv) : Result<HostFacts>(m.status());
      if (f.ok()) {
        a.facts.probes = std::move(f->probes);
      } else {
        a.lost = true;
        extra.push_back(Fail(Check::kAgents, a.facts.label, "did not report its probes: " + m.status().message(),
                             "rerun; if it repeats, run loom doctor on " + a.facts.label + " alone"));
      }
    }
    if (opt_.stream_seconds > 0) RunStreams();
    std::vector<HostFacts> hosts;
    for (auto& [r, a] : agents_) hosts.push_back(a.facts);
    Report report;
    report.mode = "agents";
    // Hosts by identity: several agents of one machine are one host.
    std::vector<std::string> seen;
    for (const HostFacts& h : hosts) {
      if (std::find(seen.begin(), seen.end(), h.host_id) != seen.end()) continue;
      seen.push_back(h.host_id);
      report.hosts.push_back(h.label);
    }
    report.findings = extra;
    const CheckOptions& checks = opt_.checks;
    for (Finding& f : RunAllChecks(hosts, checks)) report.findings.push_back(std::move(f));
    // The report first: under a launcher the agents exit with the verdict,
    // and the launcher may then end this process before it printed.
    if (opt_.print_report) opt_.print_report(report);
    const Finding* cause = MostLikelyCause(report.findings);
    Broadcast(Value::Object{{"type", "done"},
                            {"exit_code", ExitCode(report.findings)},
                            {"verdict", Name(Verdict(report.findings))},
                            {"cause", cause ? cause->summary : ""}});
    return report;
  }

 private:
  struct Agent {
    Fd conn;
    HostFacts facts;
    bool lost = false;
  };

  void Broadcast(const Value& msg) {
    for (auto& [r, a] : agents_) {
      if (!a.lost && !SendMessage(a.conn.get(), msg, Deadline::After(milliseconds(5000)), a.facts.label).ok()) {
        a.lost = true;
      }
    }
  }

  // One timed stream per ordered pair of distinct hosts, to the address the
  // runtime would use, and when the sender has several data NICs one more
  // per other NIC (to the receiver's address on that NIC's subnet); one
  // stream at a time, skipping targets whose probe failed.
  void RunStreams() {
    std::vector<HostFacts> all;
    for (auto& [r, a] : agents_) all.push_back(a.facts);
    const bool multi = MultiHost(all);
    for (auto& [from, a] : agents_) {
      for (auto& [to, b] : agents_) {
        if (from == to || a.lost || a.facts.host_id == b.facts.host_id) continue;
        std::vector<std::pair<NetInterface, NetInterface>> links;  // (sender's NIC, receiver's NIC)
        auto sel_from = SelectedInterface(a.facts);
        auto sel_to = SelectedInterface(b.facts);
        if (sel_to.ok()) links.emplace_back(sel_from.ok() ? *sel_from : NetInterface{}, *sel_to);
        const std::vector<NetInterface> nics = DataNics(a.facts, multi);
        for (size_t i = 1; i < nics.size() && i < kMaxNicsPerHost; ++i) {
          if (auto target = PeerNicOnSubnet(b.facts, nics[i], multi)) links.emplace_back(nics[i], *target);
        }
        for (const auto& [nic, target] : links) Stream1(a, b, to, nic.name, target);
      }
    }
  }

  // One timed stream from agent `a` to `target` of agent `b` (rank `to`).
  void Stream1(Agent& a, const Agent& b, int to, const std::string& nic, const NetInterface& target) {
    const std::string addr = target.address.substr(0, target.address.find('%'));
    bool reached = false;
    for (const Probe& p : a.facts.probes) reached |= p.to_rank == to && p.address == addr && p.outcome == ProbeOutcome::kOk;
    if (!reached || a.lost) return;
    const Value cmd = Value::Object{{"type", "stream"},     {"to_rank", to},
                                    {"address", addr},      {"port", b.facts.probe_port},
                                    {"seconds", opt_.stream_seconds}};
    const Deadline d = Deadline::After(milliseconds(static_cast<int64_t>(opt_.stream_seconds * 5000) +
                                                    2 * opt_.connect_timeout_ms + 5000));
    if (!SendMessage(a.conn.get(), cmd, d, a.facts.label).ok()) {
      a.lost = true;
      return;
    }
    auto res = Expect(a.conn.get(), "stream_result", d, a.facts.label);
    const Value* sv = res.ok() ? res->Find("facts") : nullptr;
    auto f = sv ? FactsFromJson(*sv) : Result<HostFacts>(res.status());
    if (!f.ok() || f->streams.empty()) return;
    Stream s = f->streams.front();
    if (!nic.empty()) s.ifname = nic;  // routing by the target's subnet sends it out of this NIC
    s.to_ifname = target.name;
    a.facts.streams.push_back(std::move(s));
  }

  // Streams per host pair are bounded: the selected NIC and a few more.
  static constexpr size_t kMaxNicsPerHost = 8;

  const AgentOptions& opt_;
  Fd listener_;
  std::map<int, Agent> agents_;
};

// Facts carrying only probes or one stream, for the messages that send them
// (FactsFromJson reads them back on the coordinator).
Value Carrier(const HostFacts& base, std::vector<Probe> probes, std::vector<Stream> streams) {
  HostFacts f;
  f.rank = base.rank;
  f.label = base.label;
  f.probes = std::move(probes);
  f.streams = std::move(streams);
  return ToJson(f);
}

// Connects to the rendezvous, retrying while nobody listens yet (rank 0 may
// start last). The probe records how the last attempt ended.
Probe ReachRoot(const AgentOptions& opt, const std::string& address, Fd* conn) {
  const Deadline until = Deadline::After(milliseconds(opt.wait_ms));
  Probe p;
  do {
    p = ConnectProbe(address, opt.launch.root_port, opt.connect_timeout_ms, conn);
    if (p.outcome == ProbeOutcome::kOk) break;
    std::this_thread::sleep_for(milliseconds(200));
  } while (!until.expired());
  p.to_rank = -1;
  return p;
}

// Runs the probes of one agent: every candidate address of every other rank.
std::vector<Probe> ProbePeers(const HostFacts& me, const std::vector<HostFacts>& hosts, const AgentOptions& opt) {
  const bool multi = MultiHost(hosts) || opt.launch.size > 1;
  std::vector<Probe> out;
  std::vector<std::thread> threads;
  struct Job {
    int rank;
    std::string ifname, address;
    int port;
  };
  std::vector<Job> jobs;
  for (const HostFacts& h : hosts) {
    if (h.rank == me.rank) continue;
    for (const NetInterface& i : ProbeCandidates(h, multi && h.host_id != me.host_id)) {
      jobs.push_back({h.rank, i.name, i.address.substr(0, i.address.find('%')), h.probe_port});
    }
  }
  out.resize(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    threads.emplace_back([&, j] {
      out[j] = ConnectProbe(jobs[j].address, jobs[j].port, opt.connect_timeout_ms);
      out[j].to_rank = jobs[j].rank;
      out[j].ifname = jobs[j].ifname;
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

// What an agent that lost the coordinator prints: its own checks plus why.
AgentResult Alone(const AgentOptions& opt, HostFacts facts, Finding why) {
  AgentResult r;
  r.full_report = true;
  r.report.mode = "agents";
  r.report.hosts = {facts.label};
  CheckOptions checks = opt.checks;
  checks.multi_host = checks.multi_host || opt.launch.size > 1;
  r.report.findings.push_back(std::move(why));
  for (Finding& f : RunAllChecks({facts}, checks)) r.report.findings.push_back(std::move(f));
  r.exit_code = ExitCode(r.report.findings);
  return r;
}

}  // namespace

Result<AgentResult> RunAgent(const AgentOptions& opt) {
  const LaunchEnv& l = opt.launch;
  if (l.root_port == 0) return InvalidArgument("loom doctor: no rendezvous port (set LOOM_ROOT=host:port)");
  const int probe_port = opt.probe_port != 0 ? opt.probe_port : l.root_port + 1;
  GatherOptions g{l.rank, RootText(l), opt.hostfile_names, probe_port};
  HostFacts me = GatherLocalFacts(g);

  std::unique_ptr<Coordinator> coord;
  Report full;
  std::thread coord_thread;
  if (l.rank == 0) {
    auto lis = ListenAny(l.root_port);
    if (!lis.ok()) {
      return Alone(opt, me, Fail(Check::kAgents, me.label, lis.status().message(),
                                 "free TCP port " + std::to_string(l.root_port) + " or choose another LOOM_ROOT port"));
    }
    coord = std::make_unique<Coordinator>(opt, std::move(lis).value());
    coord_thread = std::thread([&] { full = coord->Run(); });
  }
  // Joins the coordinator (if any) on every path out.
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{coord_thread};

  auto listener = ProbeListener::Start(probe_port);
  if (!listener.ok() && opt.probe_port == 0) {
    // Another agent on this machine has the default port: any port will do,
    // the others learn it from the hello.
    listener = ProbeListener::Start(0);
  }
  if (!listener.ok()) {
    return Alone(opt, me, Fail(Check::kAgents, me.label, listener.status().message(),
                               "free TCP port " + std::to_string(probe_port) + " or pass --probe-port"));
  }
  me.probe_port = (*listener)->port();
  Resolution root_res = ResolveName(l.root_host);
  if (root_res.addresses.empty()) {
    return Alone(opt, me, Fail(Check::kReachability, me.label,
                               "rendezvous host '" + l.root_host + "' does not resolve (" + root_res.error + ")",
                               "set LOOM_ROOT / MASTER_ADDR to an address of rank 0's host"));
  }
  Fd conn;
  Probe root = ReachRoot(opt, root_res.addresses.front(), &conn);
  if (root.outcome != ProbeOutcome::kOk) {
    // A connect that times out got no answer at all: a firewall dropped the
    // request or the reply (replies come back to an ephemeral port here).
    const std::string firewall =
        root.outcome == ProbeOutcome::kTimeout
            ? "; a firewall may drop TCP to port " + std::to_string(root.port) + " on " +
                  root.address + ", or the replies to this host's ephemeral ports"
            : "";
    return Alone(opt, me, Fail(Check::kReachability, me.label,
                               "could not reach the coordinator: connecting to rendezvous " +
                                   root.address + ":" + std::to_string(root.port) + " ended in " +
                                   Name(root.outcome) + " (" + root.detail + ") for " +
                                   std::to_string(opt.wait_ms / 1000) + " s" + firewall,
                               "pass an address of rank 0's host that this host routes to (LOOM_ROOT or "
                               "MASTER_ADDR), check that rank 0 runs, and open TCP port " +
                                   std::to_string(root.port) + " there and the ephemeral ports "
                                   "(net.ipv4.ip_local_port_range) here"));
  }
  const std::string coord_name = "the coordinator at " + RootText(l);
  auto lost = [&](const Status& s) {
    return Alone(opt, me, Fail(Check::kAgents, me.label, "lost " + coord_name + ": " + s.message(),
                               "see rank 0's output; rerun with a longer --wait"));
  };
  Value hello_facts = ToJson(me);
  if (Status s = SendMessage(conn.get(), Value::Object{{"type", "hello"}, {"facts", hello_facts}},
                             Deadline::After(milliseconds(5000)), coord_name);
      !s.ok()) {
    return lost(s);
  }
  auto peers = Expect(conn.get(), "peers", Deadline::After(milliseconds(opt.wait_ms + 10000)), coord_name);
  if (!peers.ok()) return lost(peers.status());
  std::vector<HostFacts> hosts;
  if (const Value* hv = peers->Find("hosts"); hv != nullptr && hv->is_array()) {
    for (const Value& h : hv->array()) {
      if (auto f = FactsFromJson(h); f.ok()) hosts.push_back(std::move(f).value());
    }
  }
  std::vector<Probe> probes = ProbePeers(me, hosts, opt);
  root.ifname = "";
  probes.push_back(root);
  if (Status s = SendMessage(conn.get(), Value::Object{{"type", "probes"}, {"facts", Carrier(me, probes, {})}},
                             Deadline::After(milliseconds(5000)), coord_name);
      !s.ok()) {
    return lost(s);
  }
  AgentResult result;
  for (;;) {
    auto m = RecvMessage(conn.get(), Deadline::After(milliseconds(opt.wait_ms + 60000)), coord_name);
    if (!m.ok()) return lost(m.status());
    auto type = MessageType(m.value());
    if (!type.ok()) return lost(type.status());
    if (type.value() == "done") {
      const Value* code = m->Find("exit_code");
      const Value* verdict = m->Find("verdict");
      result.exit_code = code && code->is_number() ? static_cast<int>(code->number()) : 2;
      result.note = "loom doctor: the report is printed by rank 0; verdict " +
                    std::string(verdict && verdict->is_string() ? verdict->string() : "?");
      break;
    }
    if (type.value() != "stream") continue;
    const Value* to = m->Find("to_rank");
    const Value* addr = m->Find("address");
    const Value* port = m->Find("port");
    const Value* secs = m->Find("seconds");
    if (!to || !addr || !port || !secs || !to->is_number() || !addr->is_string() || !port->is_number() ||
        !secs->is_number()) {
      return lost(InvalidArgument("malformed stream request"));
    }
    Stream s = StreamTo(addr->string(), static_cast<int>(port->number()), secs->number(), opt.stream_max_bytes,
                        opt.connect_timeout_ms);
    s.to_rank = static_cast<int>(to->number());
    if (auto sel = SelectedInterface(me); sel.ok()) s.ifname = sel->name;
    if (Status st = SendMessage(conn.get(), Value::Object{{"type", "stream_result"}, {"facts", Carrier(me, {}, {s})}},
                                Deadline::After(milliseconds(5000)), coord_name);
        !st.ok()) {
      return lost(st);
    }
  }
  if (coord_thread.joinable()) {
    coord_thread.join();
    result.report = std::move(full);
    result.full_report = true;
    result.printed = static_cast<bool>(opt.print_report);
    result.exit_code = ExitCode(result.report.findings);
  }
  return result;
}

Report RunLocal(const std::vector<std::string>& hostfile_names, const std::string& root, const CheckOptions& checks) {
  GatherOptions g;
  g.root = root;
  g.names = hostfile_names;
  const HostFacts me = GatherLocalFacts(g);
  Report r;
  r.mode = hostfile_names.empty() ? "local" : "hostfile";
  r.hosts = {me.label};
  r.findings = RunAllChecks({me}, checks);
  return r;
}

}  // namespace loom::doctor
