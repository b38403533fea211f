// Checks 4, 5, 6, 8, 9 and 10 over hand-built facts and topology fixtures.
#include <gtest/gtest.h>

#include "topology/topo_file.h"
#include "tools/doctor/checks.h"
#include "tools/doctor/test_facts.h"

namespace loom::doctor {
namespace {

using namespace testing;  // NOLINT
using topology::LinkLayer;
using topology::Node;
using topology::NodeKind;

TEST(DoctorFingerprint, IdenticalPasses) {
  auto hosts = Cluster(3);
  for (HostFacts& h : hosts) h.env = {{"NCCL_DEBUG", "WARN"}, {"LOOM_RANK", std::to_string(h.rank)}};
  auto f = CheckFingerprint(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kPass);
}

TEST(DoctorFingerprint, OddHostOutOnAKeySetting) {
  auto hosts = Cluster(3);
  hosts[2].fingerprint[2].second = "1";  // NCCL_IB_DISABLE=1 on h3 only
  hosts[2].env["NCCL_IB_DISABLE"] = "1";  // reported once, by the fingerprint
  auto f = CheckFingerprint(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kFail);
  EXPECT_EQ(f[0].host, "h3");
  EXPECT_EQ(f[0].summary, "NCCL_IB_DISABLE differs: '(unset)' on h1,h2; '1' on h3");
  EXPECT_NE(f[0].fix.find("mpirun -x NCCL_IB_DISABLE"), std::string::npos);
}

TEST(DoctorFingerprint, VersionMismatchAndLooseEnvironment) {
  auto hosts = Cluster(3);
  hosts[0].fingerprint[0].second = "0.2.9";
  hosts[1].env["UCX_TLS"] = "tcp";
  hosts[1].env["LOOM_LOCAL_RANK"] = "7";  // per rank: never compared
  auto f = CheckFingerprint(hosts);
  ASSERT_EQ(f.size(), 2u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kFail);
  EXPECT_EQ(f[0].host, "h1");
  EXPECT_NE(f[0].fix.find("same loom build"), std::string::npos);
  EXPECT_EQ(f[1].severity, Severity::kWarn);
  EXPECT_EQ(f[1].summary, "UCX_TLS differs: '(unset)' on h1,h3; 'tcp' on h2");
}

// A host topology with the given RDMA ports (and optional GPUs under the same switch).
topology::Topology WithNics(const std::vector<Node>& nics) {
  auto t = topology::Topology::WithMachine("x");
  Node numa;
  numa.kind = NodeKind::kNuma;
  numa.id = "numa0";
  numa.parent = 0;
  numa.numa_id = 0;
  const int n = t.Add(numa);
  int bus = 0x10;
  for (Node nic : nics) {
    nic.kind = NodeKind::kNic;
    nic.parent = n;
    nic.rdma = true;
    char b[32];
    std::snprintf(b, sizeof b, "0000:%02x:00.0", bus++);
    nic.bus_id = b;
    t.Add(nic);
  }
  EXPECT_TRUE(t.Validate().ok()) << t.Validate().ToString();
  return t;
}

Node Port(const std::string& id, bool up, LinkLayer layer = LinkLayer::kInfiniBand, int roce = 0) {
  Node n;
  n.id = id;
  n.port = 1;
  n.up = up;
  n.link_layer = layer;
  n.rate_gbps = 200;
  n.roce_version = roce;
  return n;
}

TEST(DoctorFabric, NoRdmaAnywherePassesWithTheReason) {
  auto f = CheckFabric(Cluster(2));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kPass);
  EXPECT_NE(f[0].summary.find("libibverbs.so.1 not found"), std::string::npos);
}

TEST(DoctorFabric, MixedJobFailsNamingTheHostWithout) {
  auto hosts = Cluster(3);
  hosts[0].topology = WithNics({Port("mlx5_0", true)});
  hosts[1].topology = WithNics({Port("mlx5_0", true)});
  hosts[0].fingerprint[1].second = hosts[1].fingerprint[1].second = "shm,tcp,ib";
  hosts[2].fingerprint[1].second = "shm,tcp,ib";
  auto f = Of(CheckFabric(hosts), Severity::kFail);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].host, "h3");
  EXPECT_NE(f[0].fix.find("NCCL_IB_DISABLE=1 on every host"), std::string::npos);
}

TEST(DoctorFabric, AllPortsDownMeansIbUnusable) {
  auto hosts = Cluster(1);
  hosts[0].topology = WithNics({Port("mlx5_0", false), Port("mlx5_1", false)});
  auto f = Of(CheckFabric(hosts), Severity::kFail);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].summary.find("every RDMA port is down (mlx5_0:1,mlx5_1:1)"), std::string::npos) << f[0].summary;
  EXPECT_NE(f[0].fix.find("NCCL_IB_DISABLE=1"), std::string::npos);
}

TEST(DoctorFabric, OnePortDownWarnsWithAnHcaExclusion) {
  auto hosts = Cluster(1);
  hosts[0].fingerprint[1].second = "shm,tcp,ib";
  hosts[0].topology = WithNics({Port("mlx5_0", true), Port("mlx5_1", false)});
  auto f = CheckFabric(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kWarn);
  EXPECT_NE(f[0].fix.find("NCCL_IB_HCA=^mlx5_1"), std::string::npos);
}

TEST(DoctorFabric, HcaFilterMatchingNothingFails) {
  auto hosts = Cluster(1);
  hosts[0].topology = WithNics({Port("mlx5_0", true)});
  hosts[0].env["NCCL_IB_HCA"] = "mlx4";
  auto f = Of(CheckFabric(hosts), Severity::kFail);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].summary.find("NCCL_IB_HCA='mlx4' matches none of mlx5_0:1"), std::string::npos);
}

TEST(DoctorFabric, RoceVersionAndLinkLayerMismatch) {
  auto hosts = Cluster(2);
  for (HostFacts& h : hosts) h.fingerprint[1].second = "shm,tcp,ib";
  hosts[0].topology = WithNics({Port("mlx5_0", true, LinkLayer::kEthernet, 2)});
  hosts[1].topology = WithNics({Port("mlx5_0", true, LinkLayer::kEthernet, 1)});
  auto f = Of(CheckFabric(hosts), Severity::kFail);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_NE(f[0].summary.find("RoCE version differs between hosts: RoCE v1 on h2; RoCE v2 on h1"), std::string::npos);
  EXPECT_NE(f[0].fix.find("NCCL_IB_GID_INDEX=3"), std::string::npos);
  hosts[1].topology = WithNics({Port("mlx5_0", true, LinkLayer::kInfiniBand)});
  f = Of(CheckFabric(hosts), Severity::kFail);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_NE(f[0].summary.find("link layer differs"), std::string::npos);
}

TEST(DoctorFabric, IbUpButUnusedWarns) {
  auto hosts = Cluster(1);
  hosts[0].topology = WithNics({Port("mlx5_0", true)});
  auto f = CheckFabric(hosts);  // build without ib
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kWarn);
  EXPECT_NE(f[0].summary.find("moves data over shm,tcp only"), std::string::npos);
  hosts[0].env["NCCL_IB_DISABLE"] = "1";
  f = CheckFabric(hosts);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].summary.find("NCCL_IB_DISABLE is set although mlx5_0:1 are up"), std::string::npos);
}

Stream S(int to, double gbps, const std::string& nic = "data0") {
  return {to, nic, nic, static_cast<int64_t>(gbps * 1e9 / 8), 1.0, ""};
}

TEST(DoctorBandwidth, ShapedEgressNamesTheHost) {
  auto hosts = Cluster(3);
  hosts[0].streams = {S(1, 9.0), S(2, 9.5)};
  hosts[1].streams = {S(0, 0.095), S(2, 0.096)};  // h2 shaped to 100 Mbit/s
  hosts[2].streams = {S(0, 9.1), S(1, 9.2)};
  CheckOptions opt;
  opt.expect_gbps = 1;
  auto f = CheckBandwidth(hosts, opt);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kFail);
  EXPECT_EQ(f[0].host, "h2");
  EXPECT_NE(f[0].summary.find("sends at 95 Mbit/s on data0, 10% of the expected 1.00 Gbit/s"), std::string::npos)
      << f[0].summary;
  EXPECT_NE(f[0].fix.find("tc qdisc show dev data0"), std::string::npos);
}

TEST(DoctorBandwidth, OneSlowPairAndNoExpectation) {
  auto hosts = Cluster(3);
  hosts[0].streams = {S(1, 9.0), S(2, 6.0)};
  hosts[1].streams = {S(0, 9.0), S(2, 9.0)};
  hosts[2].streams = {S(0, 9.0), S(1, 9.0)};
  CheckOptions opt;
  opt.expect_gbps = 10;
  auto f = CheckBandwidth(hosts, opt);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kWarn);
  EXPECT_NE(f[0].summary.find("to h3 on data0: 6.00 Gbit/s, 60%"), std::string::npos) << f[0].summary;
  // Without --expect and on virtual/unknown-speed links nothing is judged.
  f = CheckBandwidth(hosts, {});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kPass);
  EXPECT_NE(f[0].summary.find("no expected rate"), std::string::npos);
  // A real NIC's sysfs speed is the expectation.
  for (HostFacts& h : hosts) h.interfaces[2].speed_mbps = 10000;  // data0, the streams' NIC
  EXPECT_EQ(Of(CheckBandwidth(hosts, {}), Severity::kWarn).size(), 1u);
}

TEST(DoctorBandwidth, FailedStreamFails) {
  auto hosts = Cluster(2);
  hosts[0].streams = {{1, "data0", "data0", 0, 0, "connect timeout"}};
  auto f = CheckBandwidth(hosts, {});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kFail);
}

TEST(DoctorLimits, ContainerDefaults) {
  auto hosts = Cluster(2);
  hosts[0].limits.shm_bytes = 64 << 20;  // docker's default
  hosts[1].limits.nofile = 40;
  hosts[1].topology = WithNics({Port("mlx5_0", true)});
  hosts[1].limits.memlock_bytes = 8 << 20;
  auto f = CheckLimits(hosts);
  ASSERT_EQ(f.size(), 3u) << Dump(f);
  EXPECT_EQ(f[0].host, "h1");
  EXPECT_NE(f[0].summary.find("/dev/shm is 64 MiB"), std::string::npos);
  EXPECT_NE(f[0].fix.find("--shm-size"), std::string::npos);
  EXPECT_NE(f[1].summary.find("memlock limit 8 MiB"), std::string::npos);
  EXPECT_NE(f[1].fix.find("ulimit -l unlimited"), std::string::npos);
  EXPECT_NE(f[2].fix.find("ulimit -n"), std::string::npos);
}

TEST(DoctorLimits, MemlockOnlyMattersWithRdmaAndUnknownIsNotAFailure) {
  auto hosts = Cluster(1);
  hosts[0].limits = {-1, 8 << 20, -1};
  auto f = CheckLimits(hosts);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kPass);
  hosts[0].limits.shm_bytes = 512 << 20;
  EXPECT_EQ(CheckLimits(hosts).front().severity, Severity::kWarn);
}

topology::Topology Fixture(const std::string& name) {
  auto t = topology::LoadTopologyFile(std::string(LOOM_TOPO_FIXTURE_DIR) + "/" + name);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.value();
}

TEST(DoctorGpu, FarNicAndMissingPeermem) {
  auto hosts = Cluster(1);
  hosts[0].topology = Fixture("far_nic.json");
  auto f = CheckGpu(hosts);
  ASSERT_EQ(f.size(), 2u) << Dump(f);
  EXPECT_NE(f[0].summary.find("gpu0->mlx5_0 SYS"), std::string::npos) << f[0].summary;
  EXPECT_NE(f[1].summary.find("nvidia_peermem"), std::string::npos);
  hosts[0].gdr_module = true;
  EXPECT_EQ(CheckGpu(hosts).size(), 1u);
}

TEST(DoctorGpu, DgxIsCleanAndCpuOnlyHasNoGpus) {
  auto hosts = Cluster(1);
  hosts[0].topology = Fixture("dgx_h100.json");
  hosts[0].gdr_module = true;
  auto f = CheckGpu(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kPass);
  hosts[0].topology = Fixture("cpu_only.json");
  EXPECT_NE(CheckGpu(hosts).front().summary.find("no GPUs on any host"), std::string::npos);
}

TEST(DoctorGpu, NicOffTheGpuSwitchWarns) {
  auto hosts = Cluster(1);
  hosts[0].topology = Fixture("pcie_4gpu.json");  // GPUs under hb0's switches, the NIC on hb1
  hosts[0].gdr_module = true;
  auto f = CheckGpu(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_NE(f[0].summary.find("gpu0->mlx5_0 NODE"), std::string::npos) << f[0].summary;
}

TEST(DoctorGpu, GpusAcrossSocketsWarn) {
  auto t = topology::Topology::WithMachine("two-socket");
  for (int s = 0; s < 2; ++s) {
    Node numa;
    numa.kind = NodeKind::kNuma;
    numa.id = "numa" + std::to_string(s);
    numa.parent = 0;
    numa.numa_id = s;
    const int n = t.Add(numa);
    Node hb;
    hb.id = "hb" + std::to_string(s);
    hb.parent = n;
    hb.host_bridge = true;
    hb.bus_id = s == 0 ? "0000:00:01.0" : "0000:80:01.0";
    const int h = t.Add(hb);
    Node gpu;
    gpu.kind = NodeKind::kGpu;
    gpu.id = "gpu" + std::to_string(s);
    gpu.parent = h;
    gpu.gpu_index = s;
    gpu.bus_id = s == 0 ? "0000:01:00.0" : "0000:81:00.0";
    t.Add(gpu);
  }
  ASSERT_TRUE(t.Validate().ok()) << t.Validate().ToString();
  auto hosts = Cluster(1);
  hosts[0].topology = t;
  auto f = CheckGpu(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_NE(f[0].summary.find("across the SMP link (SYS): gpu0-gpu1"), std::string::npos) << f[0].summary;
  EXPECT_NE(f[0].fix.find("NCCL_P2P_LEVEL=SYS"), std::string::npos);
}

TEST(DoctorPlan, SocketBetweenHostsShmWithinAndTheKnob) {
  auto hosts = Cluster(3);
  hosts[2].host_id = "h1";  // rank 2 shares h1's machine
  auto f = CheckTransportPlan(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kPass);
  EXPECT_NE(f[0].summary.find("h1<->h2: Socket mgmt0->mgmt0 10.60.0.2 (auto: IB is absent on rank 0 (h1): "
                              "libibverbs.so.1 not found; NCCL_SOCKET_IFNAME unset)"),
            std::string::npos)
      << f[0].summary;
  EXPECT_NE(f[0].summary.find("h1<->h3: SHM (same host; NCCL_SHM_DISABLE)"), std::string::npos);
  // Each end decides from its own knobs: disabling SHM on one end only is
  // the runtime's error naming both ends.
  hosts[0].env["NCCL_SHM_DISABLE"] = "1";
  f = CheckTransportPlan(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kFail);
  EXPECT_NE(f[0].summary.find("h1<->h3: rank 0 (h1) would reach rank 2 (h3) via Socket"), std::string::npos)
      << f[0].summary;
  hosts[2].env["NCCL_SHM_DISABLE"] = "1";
  f = CheckTransportPlan(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_NE(f[0].summary.find("h1<->h3: Socket mgmt0->mgmt0 10.60.0.3 (same host, NCCL_SHM_DISABLE=1; "), std::string::npos)
      << f[0].summary;
}

TEST(DoctorPlan, NetNamingAnAbsentTransportFails) {
  auto hosts = Cluster(2);
  hosts[0].env["NCCL_NET"] = "IB";
  auto f = CheckTransportPlan(hosts);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kFail);
  EXPECT_EQ(f[0].host, "h1");
  EXPECT_NE(f[0].summary.find("NCCL_NET=IB selects IB, but IB is absent on rank 0 (h1)"), std::string::npos)
      << f[0].summary;
}

TEST(DoctorPlan, TheRuntimesRuleDecidesIbAndItsFallbacks) {
  auto hosts = Cluster(2);
  for (HostFacts& h : hosts) {
    h.no_rdma_reason.clear();
    h.rdma_ports = {{"mlx5_0", 1, true, false, 1, {}}};
    h.fingerprint[1].second = "shm,tcp,ib";
  }
  // Found, but the IB path is only used when asked for by name: the runtime
  // falls back to sockets, loudly, and says how to opt in.
  auto f = CheckTransportPlan(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kWarn);
  EXPECT_NE(f[0].summary.find("found mlx5_0:1, but loom's IB connection has not run on RDMA hardware yet; "
                              "set NCCL_NET=IB"),
            std::string::npos)
      << f[0].summary;
  // Asked for on every host: IB.
  for (HostFacts& h : hosts) h.env["NCCL_NET"] = "IB";
  f = CheckTransportPlan(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kPass) << Dump(f);
  EXPECT_EQ(f[0].summary.rfind("h1<->h2: IB", 0), 0u) << f[0].summary;
  // NCCL_IB_HCA matching nothing on h2: NCCL_NET=IB cannot be met there.
  hosts[1].env["NCCL_IB_HCA"] = "mlx4";
  f = CheckTransportPlan(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kFail);
  EXPECT_NE(f[0].summary.find("h2"), std::string::npos) << f[0].summary;
  // A build without the IB data path: found ports are unusable even when asked for.
  hosts[1].env.erase("NCCL_IB_HCA");
  for (HostFacts& h : hosts) h.fingerprint[1].second = "shm,tcp";
  f = CheckTransportPlan(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kFail);
  EXPECT_NE(f[0].summary.find("this loom build moves data over shm,tcp only"), std::string::npos)
      << f[0].summary;
}

TEST(DoctorBandwidth, SlowSecondNicNamedOnItsHost) {
  // Every host streams on mgmt0 and data0; h2's data0 is shaped.
  auto hosts = Cluster(3);
  for (HostFacts& h : hosts) {
    for (int to = 0; to < 3; ++to) {
      if (to == h.rank) continue;
      h.streams.push_back(S(to, 9.0, "mgmt0"));
      h.streams.push_back(S(to, h.rank == 1 ? 0.04 : 9.0, "data0"));
    }
  }
  CheckOptions opt;
  opt.expect_gbps = 1;
  auto f = CheckBandwidth(hosts, opt);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kFail);
  EXPECT_EQ(f[0].host, "h2");
  EXPECT_EQ(f[0].summary,
            "sends at 40 Mbit/s on data0, 4% of the expected 1.00 Gbit/s (every outgoing stream on data0 is slow, "
            "the others are not)");
  // Without --expect each NIC is held to its own sysfs speed.
  for (HostFacts& h : hosts) h.interfaces[2].speed_mbps = 100;  // data0: 100 Mbit/s NICs
  f = CheckBandwidth(hosts, {});
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kFail);
  EXPECT_NE(f[0].summary.find("40% of the expected 100 Mbit/s"), std::string::npos) << f[0].summary;
}

TEST(DoctorAll, HealthyClusterIsAllPass) {
  auto hosts = Cluster(3);
  ResolveAll(&hosts);
  ProbeAll(&hosts);
  for (HostFacts& h : hosts) h.streams = {S((h.rank + 1) % 3, 5)};
  auto f = RunAllChecks(hosts, {});
  EXPECT_EQ(ExitCode(f), 0) << Dump(f);
  EXPECT_EQ(f.size(), 10u) << Dump(f);  // one line per check
}

}  // namespace
}  // namespace loom::doctor
