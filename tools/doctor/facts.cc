// HostFacts to and from JSON, the form agents send to the coordinator.
#include "tools/doctor/facts.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "topology/topo_file.h"

namespace loom::doctor {

namespace {

using json::Value;

// Readers that name the member on a type error; a missing member is an
// error too (agents of one build always write every member).
Result<const Value*> Member(const Value& v, const char* key, Value::Type type) {
  const Value* m = v.Find(key);
  if (m == nullptr || m->type() != type) {
    return InvalidArgument(std::string("doctor facts: member '") + key + "' missing or of the wrong type");
  }
  return m;
}
Result<std::string> Str(const Value& v, const char* key) {
  LOOM_ASSIGN_OR_RETURN(const Value* m, Member(v, key, Value::Type::kString));
  return m->string();
}
Result<double> Num(const Value& v, const char* key) {
  LOOM_ASSIGN_OR_RETURN(const Value* m, Member(v, key, Value::Type::kNumber));
  return m->number();
}
Result<int64_t> Int(const Value& v, const char* key) {
  LOOM_ASSIGN_OR_RETURN(double d, Num(v, key));
  if (d != std::floor(d) || std::fabs(d) > 9.2e18) {
    return InvalidArgument(std::string("doctor facts: member '") + key + "' is not an integer");
  }
  return static_cast<int64_t>(d);
}
Result<bool> Bool(const Value& v, const char* key) {
  LOOM_ASSIGN_OR_RETURN(const Value* m, Member(v, key, Value::Type::kBool));
  return m->boolean();
}
Result<const Value::Array*> Arr(const Value& v, const char* key) {
  LOOM_ASSIGN_OR_RETURN(const Value* m, Member(v, key, Value::Type::kArray));
  return &m->array();
}

Result<std::vector<std::string>> Strings(const Value& v, const char* key) {
  LOOM_ASSIGN_OR_RETURN(const Value::Array* a, Arr(v, key));
  std::vector<std::string> out;
  for (const Value& e : *a) {
    if (!e.is_string()) return InvalidArgument(std::string("doctor facts: '") + key + "' holds a non-string");
    out.push_back(e.string());
  }
  return out;
}

// GIDs travel as 32 hex digits, types as ib's names ("IB", "RoCEv1", "RoCEv2").
constexpr const char* kGidTypes[] = {"IB", "RoCEv1", "RoCEv2"};

std::string GidHex(const std::array<uint8_t, 16>& gid) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : gid) s += {kHex[b >> 4], kHex[b & 15]};
  return s;
}

Result<std::array<uint8_t, 16>> GidFromHex(const std::string& s) {
  std::array<uint8_t, 16> gid{};
  auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  if (s.size() != 32) return InvalidArgument("doctor facts: GID '" + s + "' is not 32 hex digits");
  for (size_t i = 0; i < 16; ++i) {
    const int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgument("doctor facts: GID '" + s + "' is not 32 hex digits");
    gid[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return gid;
}

Value ToJson(const ib::PortInfo& p) {
  Value::Array gids;
  for (const ib::GidEntry& g : p.gids) {
    gids.push_back(Value::Object{{"index", g.index},
                                 {"gid", GidHex(g.gid)},
                                 {"type", kGidTypes[static_cast<int>(g.type)]},
                                 {"netdev", g.netdev}});
  }
  return Value::Object{{"device", p.device}, {"port", p.port},       {"active", p.active},
                       {"ethernet", p.ethernet}, {"lid", p.lid}, {"gids", gids}};
}

Result<ib::PortInfo> PortFromJson(const Value& v) {
  ib::PortInfo p;
  LOOM_ASSIGN_OR_RETURN(p.device, Str(v, "device"));
  LOOM_ASSIGN_OR_RETURN(int64_t port, Int(v, "port"));
  p.port = static_cast<int>(port);
  LOOM_ASSIGN_OR_RETURN(p.active, Bool(v, "active"));
  LOOM_ASSIGN_OR_RETURN(p.ethernet, Bool(v, "ethernet"));
  LOOM_ASSIGN_OR_RETURN(int64_t lid, Int(v, "lid"));
  p.lid = static_cast<uint16_t>(lid);
  LOOM_ASSIGN_OR_RETURN(const Value::Array* gids, Arr(v, "gids"));
  for (const Value& g : *gids) {
    ib::GidEntry e;
    LOOM_ASSIGN_OR_RETURN(int64_t index, Int(g, "index"));
    e.index = static_cast<int>(index);
    LOOM_ASSIGN_OR_RETURN(std::string hex, Str(g, "gid"));
    LOOM_ASSIGN_OR_RETURN(e.gid, GidFromHex(hex));
    LOOM_ASSIGN_OR_RETURN(std::string type, Str(g, "type"));
    const auto* it = std::find(std::begin(kGidTypes), std::end(kGidTypes), type);
    if (it == std::end(kGidTypes)) return InvalidArgument("doctor facts: unknown GID type '" + type + "'");
    e.type = static_cast<ib::GidEntry::Type>(it - std::begin(kGidTypes));
    LOOM_ASSIGN_OR_RETURN(e.netdev, Str(g, "netdev"));
    p.gids.push_back(std::move(e));
  }
  return p;
}

// Limits travel as numbers; "unlimited" as -2 so that doubles stay exact.
Value LimitToJson(int64_t v) { return v == kUnlimited ? Value(-2) : Value(v); }
int64_t LimitFromJson(int64_t v) { return v == -2 ? kUnlimited : v; }

}  // namespace

const char* Name(ProbeOutcome outcome) {
  switch (outcome) {
    case ProbeOutcome::kOk: return "ok";
    case ProbeOutcome::kRefused: return "refused";
    case ProbeOutcome::kTimeout: return "timeout";
    case ProbeOutcome::kUnreachable: return "unreachable";
    case ProbeOutcome::kError: return "error";
  }
  return "error";
}

Result<ProbeOutcome> ParseProbeOutcome(std::string_view s) {
  for (ProbeOutcome o : {ProbeOutcome::kOk, ProbeOutcome::kRefused, ProbeOutcome::kTimeout,
                         ProbeOutcome::kUnreachable, ProbeOutcome::kError}) {
    if (s == Name(o)) return o;
  }
  return InvalidArgument("doctor facts: unknown probe outcome '" + std::string(s) + "'");
}

std::string HostFacts::Env(const std::string& name) const {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

std::string HostFacts::Param(const std::string& name) const {
  std::string v = Env("LOOM_" + name);
  return v.empty() ? Env("NCCL_" + name) : v;
}

Value ToJson(const NetInterface& i) {
  std::string addr = i.address;
  if (auto pct = addr.find('%'); pct != std::string::npos) addr.resize(pct);
  return Value::Object{{"name", i.name},          {"cidr", addr + "/" + std::to_string(i.prefix_len)},
                       {"up", i.up},              {"loopback", i.loopback},
                       {"mtu", i.mtu},            {"speed_mbps", i.speed_mbps},
                       {"virtual", i.is_virtual}};
}

Result<NetInterface> InterfaceFromJson(const Value& v) {
  LOOM_ASSIGN_OR_RETURN(std::string name, Str(v, "name"));
  LOOM_ASSIGN_OR_RETURN(std::string cidr, Str(v, "cidr"));
  LOOM_ASSIGN_OR_RETURN(NetInterface i, MakeNetInterface(name, cidr));
  LOOM_ASSIGN_OR_RETURN(i.up, Bool(v, "up"));
  LOOM_ASSIGN_OR_RETURN(i.loopback, Bool(v, "loopback"));
  LOOM_ASSIGN_OR_RETURN(int64_t mtu, Int(v, "mtu"));
  i.mtu = static_cast<int>(mtu);
  LOOM_ASSIGN_OR_RETURN(i.speed_mbps, Int(v, "speed_mbps"));
  LOOM_ASSIGN_OR_RETURN(i.is_virtual, Bool(v, "virtual"));
  return i;
}

Value ToJson(const HostFacts& f) {
  Value::Array ifs, res, probes, streams, fp, ports;
  Value::Object pci;
  for (const ib::PortInfo& p : f.rdma_ports) ports.push_back(ToJson(p));
  for (const auto& [bus, p] : f.pci) {
    pci.emplace_back(bus, Value::Object{{"bridges", Value::Array(p.bridges.begin(), p.bridges.end())},
                                        {"acs_redirect", Value::Array(p.acs_redirect.begin(), p.acs_redirect.end())},
                                        {"iommu", p.iommu}});
  }
  for (const NetInterface& i : f.interfaces) ifs.push_back(ToJson(i));
  for (const Resolution& r : f.resolutions) {
    Value::Array addrs(r.addresses.begin(), r.addresses.end());
    res.push_back(Value::Object{{"name", r.name}, {"addresses", addrs}, {"error", r.error}});
  }
  for (const Probe& p : f.probes) {
    probes.push_back(Value::Object{{"to_rank", p.to_rank}, {"ifname", p.ifname},
                                   {"address", p.address}, {"port", p.port},
                                   {"outcome", Name(p.outcome)}, {"detail", p.detail},
                                   {"ms", p.ms}});
  }
  for (const Stream& s : f.streams) {
    streams.push_back(Value::Object{{"to_rank", s.to_rank}, {"ifname", s.ifname}, {"to_ifname", s.to_ifname}, {"bytes", s.bytes},
                                    {"seconds", s.seconds}, {"error", s.error}});
  }
  for (const auto& [k, v] : f.fingerprint) fp.push_back(Value::Array{k, v});
  Value::Object env;
  for (const auto& [k, v] : f.env) env.emplace_back(k, v);
  return Value::Object{
      {"rank", f.rank},
      {"label", f.label},
      {"hostname", f.hostname},
      {"host_id", f.host_id},
      {"root", f.root},
      {"probe_port", f.probe_port},
      {"interfaces", ifs},
      {"env", env},
      {"fingerprint", fp},
      {"resolutions", res},
      {"limits", Value::Object{{"shm_bytes", LimitToJson(f.limits.shm_bytes)},
                               {"memlock_bytes", LimitToJson(f.limits.memlock_bytes)},
                               {"nofile", LimitToJson(f.limits.nofile)}}},
      {"gdr_module", f.gdr_module},
      {"no_rdma_reason", f.no_rdma_reason},
      {"topology", f.topology ? topology::ToJson(*f.topology) : Value()},
      {"rdma_ports", ports},
      {"pci", pci},
      {"probes", probes},
      {"streams", streams},
  };
}

Result<HostFacts> FactsFromJson(const Value& v) {
  HostFacts f;
  LOOM_ASSIGN_OR_RETURN(int64_t rank, Int(v, "rank"));
  f.rank = static_cast<int>(rank);
  LOOM_ASSIGN_OR_RETURN(f.label, Str(v, "label"));
  LOOM_ASSIGN_OR_RETURN(f.hostname, Str(v, "hostname"));
  LOOM_ASSIGN_OR_RETURN(f.host_id, Str(v, "host_id"));
  LOOM_ASSIGN_OR_RETURN(f.root, Str(v, "root"));
  LOOM_ASSIGN_OR_RETURN(int64_t port, Int(v, "probe_port"));
  f.probe_port = static_cast<int>(port);
  LOOM_ASSIGN_OR_RETURN(const Value::Array* ifs, Arr(v, "interfaces"));
  for (const Value& i : *ifs) {
    LOOM_ASSIGN_OR_RETURN(NetInterface ni, InterfaceFromJson(i));
    f.interfaces.push_back(std::move(ni));
  }
  LOOM_ASSIGN_OR_RETURN(const Value* env, Member(v, "env", Value::Type::kObject));
  for (const auto& [k, val] : env->object()) {
    if (!val.is_string()) return InvalidArgument("doctor facts: env '" + k + "' is not a string");
    f.env[k] = val.string();
  }
  LOOM_ASSIGN_OR_RETURN(const Value::Array* fp, Arr(v, "fingerprint"));
  for (const Value& kv : *fp) {
    if (!kv.is_array() || kv.array().size() != 2 || !kv.array()[0].is_string() ||
        !kv.array()[1].is_string()) {
      return InvalidArgument("doctor facts: a fingerprint entry is not a [key, value] pair");
    }
    f.fingerprint.emplace_back(kv.array()[0].string(), kv.array()[1].string());
  }
  LOOM_ASSIGN_OR_RETURN(const Value::Array* res, Arr(v, "resolutions"));
  for (const Value& r : *res) {
    Resolution out;
    LOOM_ASSIGN_OR_RETURN(out.name, Str(r, "name"));
    LOOM_ASSIGN_OR_RETURN(out.error, Str(r, "error"));
    LOOM_ASSIGN_OR_RETURN(const Value::Array* addrs, Arr(r, "addresses"));
    for (const Value& a : *addrs) {
      if (!a.is_string()) return InvalidArgument("doctor facts: an address is not a string");
      out.addresses.push_back(a.string());
    }
    f.resolutions.push_back(std::move(out));
  }
  LOOM_ASSIGN_OR_RETURN(const Value* lim, Member(v, "limits", Value::Type::kObject));
  LOOM_ASSIGN_OR_RETURN(int64_t shm, Int(*lim, "shm_bytes"));
  LOOM_ASSIGN_OR_RETURN(int64_t memlock, Int(*lim, "memlock_bytes"));
  LOOM_ASSIGN_OR_RETURN(int64_t nofile, Int(*lim, "nofile"));
  f.limits = {LimitFromJson(shm), LimitFromJson(memlock), LimitFromJson(nofile)};
  LOOM_ASSIGN_OR_RETURN(f.gdr_module, Bool(v, "gdr_module"));
  LOOM_ASSIGN_OR_RETURN(f.no_rdma_reason, Str(v, "no_rdma_reason"));
  if (const Value* t = v.Find("topology"); t != nullptr && !t->is_null()) {
    LOOM_ASSIGN_OR_RETURN(topology::Topology topo, topology::FromJson(*t));
    f.topology = std::move(topo);
  }
  LOOM_ASSIGN_OR_RETURN(const Value::Array* ports, Arr(v, "rdma_ports"));
  for (const Value& p : *ports) {
    LOOM_ASSIGN_OR_RETURN(ib::PortInfo port, PortFromJson(p));
    f.rdma_ports.push_back(std::move(port));
  }
  LOOM_ASSIGN_OR_RETURN(const Value* pci, Member(v, "pci", Value::Type::kObject));
  for (const auto& [bus, p] : pci->object()) {
    PciFacts out;
    LOOM_ASSIGN_OR_RETURN(out.bridges, Strings(p, "bridges"));
    LOOM_ASSIGN_OR_RETURN(out.acs_redirect, Strings(p, "acs_redirect"));
    LOOM_ASSIGN_OR_RETURN(out.iommu, Str(p, "iommu"));
    f.pci[bus] = std::move(out);
  }
  LOOM_ASSIGN_OR_RETURN(const Value::Array* probes, Arr(v, "probes"));
  for (const Value& p : *probes) {
    Probe out;
    LOOM_ASSIGN_OR_RETURN(int64_t to, Int(p, "to_rank"));
    out.to_rank = static_cast<int>(to);
    LOOM_ASSIGN_OR_RETURN(out.ifname, Str(p, "ifname"));
    LOOM_ASSIGN_OR_RETURN(out.address, Str(p, "address"));
    LOOM_ASSIGN_OR_RETURN(int64_t pp, Int(p, "port"));
    out.port = static_cast<int>(pp);
    LOOM_ASSIGN_OR_RETURN(std::string outcome, Str(p, "outcome"));
    LOOM_ASSIGN_OR_RETURN(out.outcome, ParseProbeOutcome(outcome));
    LOOM_ASSIGN_OR_RETURN(out.detail, Str(p, "detail"));
    LOOM_ASSIGN_OR_RETURN(out.ms, Num(p, "ms"));
    f.probes.push_back(std::move(out));
  }
  LOOM_ASSIGN_OR_RETURN(const Value::Array* streams, Arr(v, "streams"));
  for (const Value& s : *streams) {
    Stream out;
    LOOM_ASSIGN_OR_RETURN(int64_t to, Int(s, "to_rank"));
    out.to_rank = static_cast<int>(to);
    LOOM_ASSIGN_OR_RETURN(out.ifname, Str(s, "ifname"));
    LOOM_ASSIGN_OR_RETURN(out.to_ifname, Str(s, "to_ifname"));
    LOOM_ASSIGN_OR_RETURN(out.bytes, Int(s, "bytes"));
    LOOM_ASSIGN_OR_RETURN(out.seconds, Num(s, "seconds"));
    LOOM_ASSIGN_OR_RETURN(out.error, Str(s, "error"));
    f.streams.push_back(std::move(out));
  }
  return f;
}

}  // namespace loom::doctor
