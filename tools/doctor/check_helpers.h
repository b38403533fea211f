// Small helpers the doctor's check files share (checks_*.cc only; not part
// of the checks' interface in checks.h). All pure.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "tools/doctor/facts.h"

namespace loom::doctor::detail {

inline std::string Join(const std::vector<std::string>& v, const char* sep = ",") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

inline std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// A knob's value as params.h reads a boolean: anything but "", 0, false, no, off.
inline bool Truthy(const std::string& v) { return !v.empty() && v != "0" && v != "false" && v != "no" && v != "off"; }

inline std::string FingerprintValue(const HostFacts& f, const std::string& key) {
  for (const auto& [k, v] : f.fingerprint) {
    if (k == key) return v;
  }
  return "";
}

// Whether this build carries an RDMA data path (the fingerprint's transports).
inline bool BuildHasIb(const HostFacts& f) { return FingerprintValue(f, "transports").find("ib") != std::string::npos; }

// The RDMA NIC ports of a host's topology.
inline std::vector<const topology::Node*> RdmaNics(const HostFacts& f) {
  std::vector<const topology::Node*> out;
  if (!f.topology) return out;
  for (int i : f.topology->OfKind(topology::NodeKind::kNic)) {
    if (f.topology->nodes[i].rdma) out.push_back(&f.topology->nodes[i]);
  }
  return out;
}

// The host's RDMA ports as verbs describes them: the discovered ones with
// their GID tables, else (a topology file, or an older agent) the topology's
// RDMA NICs without GIDs.
inline std::vector<ib::PortInfo> RdmaPorts(const HostFacts& f) {
  if (!f.rdma_ports.empty()) return f.rdma_ports;
  std::vector<ib::PortInfo> out;
  for (const topology::Node* n : RdmaNics(f)) {
    ib::PortInfo p;
    p.device = n->id;
    p.port = n->port;
    p.active = n->up;
    p.ethernet = n->link_layer == topology::LinkLayer::kEthernet;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace loom::doctor::detail
