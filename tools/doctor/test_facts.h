// Hand-built HostFacts for the doctor's unit tests: a netsim-like cluster
// (mgmt0 10.60.0.N/24, data0 10.61.0.N/24, lo) that each test then breaks
// in one way.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/doctor/facts.h"
#include "tools/doctor/report.h"

namespace loom::doctor::testing {

inline NetInterface If(const std::string& name, const std::string& cidr, int mtu = 1500, int64_t speed = -1) {
  auto i = MakeNetInterface(name, cidr);
  EXPECT_TRUE(i.ok()) << cidr;
  NetInterface out = i.value();
  out.mtu = mtu;
  out.speed_mbps = speed;
  out.loopback = name == "lo";
  return out;
}

// Host n (1-based) of a healthy cluster, rank n-1, rendezvous on host 1's mgmt0.
inline HostFacts Host(int n) {
  HostFacts f;
  f.rank = n - 1;
  f.label = "h" + std::to_string(n);
  f.hostname = "node" + std::to_string(n);
  f.host_id = f.label;
  f.root = "10.60.0.1:29400";
  f.probe_port = 29401;
  f.interfaces = {If("lo", "127.0.0.1/8", 65536), If("mgmt0", "10.60.0." + std::to_string(n) + "/24"),
                  If("data0", "10.61.0." + std::to_string(n) + "/24")};
  f.fingerprint = {{"version", "0.3.0"}, {"transports", "shm,tcp"}, {"NCCL_IB_DISABLE", "(unset)"}};
  f.limits = {int64_t{8} << 30, kUnlimited, 65536};
  f.no_rdma_reason = "libibverbs.so.1 not found";
  return f;
}

inline std::vector<HostFacts> Cluster(int n) {
  std::vector<HostFacts> v;
  for (int i = 1; i <= n; ++i) v.push_back(Host(i));
  return v;
}

// Every host resolves node1..nodeN to its mgmt address.
inline void ResolveAll(std::vector<HostFacts>* hosts) {
  for (HostFacts& f : *hosts) {
    for (size_t j = 1; j <= hosts->size(); ++j) {
      f.resolutions.push_back({"node" + std::to_string(j), {"10.60.0." + std::to_string(j)}, ""});
    }
  }
}

// Every host connects to every other host's candidates with `outcome`.
inline void ProbeAll(std::vector<HostFacts>* hosts) {
  for (HostFacts& f : *hosts) {
    f.probes.push_back({-1, "", "10.60.0.1", 29400, ProbeOutcome::kOk, "", 0.2});
    for (const HostFacts& t : *hosts) {
      if (t.rank == f.rank) continue;
      for (const NetInterface& i : t.interfaces) {
        if (i.loopback) continue;
        f.probes.push_back({t.rank, i.name, i.address, t.probe_port, ProbeOutcome::kOk, "", 0.3});
      }
    }
  }
}

inline std::vector<Finding> Of(const std::vector<Finding>& all, Severity s) {
  std::vector<Finding> out;
  for (const Finding& f : all) {
    if (f.severity == s) out.push_back(f);
  }
  return out;
}

inline std::string Dump(const std::vector<Finding>& all) {
  std::string s;
  for (const Finding& f : all) s += std::string(Name(f.severity)) + " " + f.host + ": " + f.summary + " | " + f.fix + "\n";
  return s;
}

}  // namespace loom::doctor::testing
