// Reads this host's facts for the doctor from the live system.
#include "tools/doctor/gather.h"

#include <netdb.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "comm/fingerprint.h"
#include "topology/discover.h"
#include "topology/host.h"
#include "topology/inet_address.h"
#include "topology/netif.h"
#include "transports/ib/gdr.h"
#include "transports/ib/verbs.h"

namespace loom::doctor {

namespace {

int64_t Limit(int resource) {
  rlimit rl{};
  if (getrlimit(resource, &rl) != 0) return -1;
  if (rl.rlim_cur == RLIM_INFINITY) return kUnlimited;
  return static_cast<int64_t>(rl.rlim_cur);
}

// How reports name this host: the identity override tests and operators set,
// else the hostname.
std::string Label() {
  for (const char* v : {"LOOM_HOSTID", "NCCL_HOSTID"}) {
    const char* id = std::getenv(v);
    if (id != nullptr && *id != '\0') return id;
  }
  return Hostname();
}

}  // namespace

Result<std::vector<std::string>> ParseHostfile(std::string_view text) {
  std::vector<std::string> out;
  int lineno = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    ++lineno;
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string_view::npos) continue;
    line = line.substr(b);
    std::string host(line.substr(0, line.find_first_of(" \t\r")));
    if (host.find('=') != std::string::npos) {
      return InvalidArgument("hostfile line " + std::to_string(lineno) + ": '" + host +
                             "' is not a host name (expected 'host [slots=N]' or 'host:N')");
    }
    if (host.front() == '[') {
      const size_t close = host.find(']');
      if (close == std::string::npos) {
        return InvalidArgument("hostfile line " + std::to_string(lineno) + ": unclosed '[' in '" + host + "'");
      }
      host = host.substr(1, close - 1);
    } else if (std::count(host.begin(), host.end(), ':') == 1) {
      host = host.substr(0, host.find(':'));  // MPICH "host:slots"
    }
    if (host.empty()) return InvalidArgument("hostfile line " + std::to_string(lineno) + ": empty host");
    if (std::find(out.begin(), out.end(), host) == out.end()) out.push_back(host);
    if (nl == text.size()) break;
  }
  return out;
}

Resolution ResolveName(const std::string& name) {
  Resolution r;
  r.name = name;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    r.error = gai_strerror(rc);
    return r;
  }
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const std::string addr = FormatAddress(a->ai_addr);
    if (!addr.empty() && std::find(r.addresses.begin(), r.addresses.end(), addr) == r.addresses.end()) {
      r.addresses.push_back(addr);
    }
  }
  freeaddrinfo(res);
  if (r.addresses.empty()) r.error = "no IPv4 or IPv6 address";
  return r;
}

std::map<std::string, std::string> RelevantEnv(char** vars) {
  std::map<std::string, std::string> out;
  for (char** e = vars; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq + 1 == kv.size()) continue;
    const std::string k = kv.substr(0, eq);
    if (k.rfind("NCCL_", 0) == 0 || k.rfind("LOOM_", 0) == 0 || k.rfind("UCX_", 0) == 0) {
      out[k] = kv.substr(eq + 1);
    }
  }
  return out;
}

std::optional<bool> AcsRedirects(std::string_view config) {
  constexpr size_t kExtended = 0x100;
  constexpr uint16_t kAcsId = 0x000d;
  // ACS Control (capability + 6): bit 2 P2P Request Redirect, bit 3 P2P
  // Completion Redirect, bit 5 P2P Egress Control.
  constexpr uint16_t kRedirectBits = 1u << 2 | 1u << 3 | 1u << 5;
  auto le = [&](size_t off, int bytes) {
    uint32_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(config[off + i]);
    return v;
  };
  if (config.size() < kExtended + 4) return std::nullopt;
  size_t off = kExtended;
  for (int hops = 0; hops < 64 && off != 0; ++hops) {  // a loop in the list must not hang us
    if (off < kExtended || off + 8 > config.size()) return std::nullopt;
    const uint32_t header = le(off, 4);
    if (header == 0 || header == 0xffffffff) return false;  // no extended capabilities
    if ((header & 0xffff) == kAcsId) return (le(off + 6, 2) & kRedirectBits) != 0;
    off = (header >> 20) & 0xffc;
  }
  return false;
}

PciFacts ReadPciFacts(const std::string& bus_id, const std::string& sysfs_root) {
  namespace fs = std::filesystem;
  PciFacts out;
  std::error_code ec;
  const fs::path dev = fs::canonical(fs::path(sysfs_root) / bus_id, ec);
  if (ec) return out;
  static const std::regex kPciAddress("[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-7]");
  for (const fs::path& part : dev.parent_path()) {
    const std::string name = part.filename().string();
    if (!std::regex_match(name, kPciAddress)) continue;
    out.bridges.push_back(name);
    std::ifstream in(fs::path(sysfs_root) / name / "config", std::ios::binary);
    std::stringstream config;
    config << in.rdbuf();
    if (AcsRedirects(config.str()).value_or(false)) out.acs_redirect.push_back(name);
  }
  std::ifstream type(dev / "iommu_group" / "type");
  std::getline(type, out.iommu);
  return out;
}

Limits ReadLimits(const char* shm_path) {
  Limits l;
  struct statvfs vfs {};
  if (statvfs(shm_path, &vfs) == 0) {
    l.shm_bytes = static_cast<int64_t>(vfs.f_blocks) * static_cast<int64_t>(vfs.f_frsize);
  }
  l.memlock_bytes = Limit(RLIMIT_MEMLOCK);
  l.nofile = Limit(RLIMIT_NOFILE);
  return l;
}

HostFacts GatherLocalFacts(const GatherOptions& opt) {
  HostFacts f;
  f.rank = opt.rank;
  f.label = Label();
  f.hostname = Hostname();
  f.host_id = HostIdentity();
  f.root = opt.root;
  f.probe_port = opt.probe_port;
  if (auto ifs = ListInterfaces(); ifs.ok()) f.interfaces = std::move(ifs).value();
  f.env = RelevantEnv(environ);
  f.fingerprint = LocalFingerprint();
  std::vector<std::string> names = opt.names;
  if (!opt.root.empty()) {
    std::string host = opt.root.substr(0, opt.root.rfind(':'));
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    if (!ParseIpAddress(host).ok() && std::find(names.begin(), names.end(), host) == names.end()) {
      names.push_back(host);
    }
  }
  for (const std::string& n : names) f.resolutions.push_back(ResolveName(n));
  f.limits = ReadLimits();
  f.gdr_module = ib::PeerMemLoaded();
  // The topology file (LOOM_TOPO_FILE) wins, as for the runtime; verbs'
  // reason for finding nothing is asked separately since the model drops it.
  if (auto t = topology::LocalTopology(); t.ok()) f.topology = std::move(t).value();
  f.no_rdma_reason = topology::ProbeVerbs().no_ib_reason;
  f.rdma_ports = ib::DiscoverPorts().ports;
  if (f.topology) {
    for (const topology::Node& n : f.topology->nodes) {
      const bool relevant = n.kind == topology::NodeKind::kGpu || (n.kind == topology::NodeKind::kNic && n.rdma);
      if (relevant && !n.bus_id.empty()) f.pci[n.bus_id] = ReadPciFacts(n.bus_id);
    }
  }
  return f;
}

}  // namespace loom::doctor
