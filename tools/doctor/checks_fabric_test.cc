// Checks 5 and 9 over injected verbs discovery (GID tables) and PCI facts
// (ACS, IOMMU); the port-state and placement cases are in checks_host_test.cc.
#include <gtest/gtest.h>

#include "topology/topo_file.h"
#include "tools/doctor/checks.h"
#include "tools/doctor/test_facts.h"

namespace loom::doctor {
namespace {

using namespace testing;  // NOLINT
using GidType = ib::GidEntry::Type;

// An IB GID on subnet prefix fe80:0:0:<rail>, interface id <guid>.
ib::GidEntry IbGid(int index, uint8_t rail, uint8_t guid) {
  ib::GidEntry e;
  e.index = index;
  e.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, rail, 0, 0, 0, 0, 0, 0, 0, guid};
  return e;
}

// A RoCE GID holding the IPv4 address a.b.c.d (::ffff:a.b.c.d).
ib::GidEntry V4Gid(int index, GidType type, uint8_t c, uint8_t d, const std::string& netdev = "data0") {
  ib::GidEntry e;
  e.index = index;
  e.type = type;
  e.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 61, c, d};
  e.netdev = netdev;
  return e;
}

ib::PortInfo IbPort(const std::string& device, std::vector<ib::GidEntry> gids) {
  return {device, 1, true, false, 1, std::move(gids)};
}

// h1..hn with IB ports mlx5_0 on rail 0 and mlx5_1 on rail 1, built with IB.
std::vector<HostFacts> IbCluster(int n) {
  auto hosts = Cluster(n);
  for (HostFacts& h : hosts) {
    const auto id = static_cast<uint8_t>(h.rank + 1);
    h.fingerprint[1].second = "shm,tcp,ib";
    h.no_rdma_reason.clear();
    h.rdma_ports = {IbPort("mlx5_0", {IbGid(0, 0, id)}), IbPort("mlx5_1", {IbGid(0, 1, id)})};
  }
  return hosts;
}

TEST(DoctorFabricGid, RailsAlikePass) {
  auto f = CheckFabric(IbCluster(3));
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kPass);
  EXPECT_NE(f[0].summary.find("(IB, GID index 0, 2 subnet(s) shared by every host)"), std::string::npos) << f[0].summary;
}

TEST(DoctorFabricGid, PortOnASubnetNoOtherHostHasFailsNamingHostAndNic) {
  auto hosts = IbCluster(3);
  hosts[2].rdma_ports[1].gids = {IbGid(0, 9, 3)};  // h3's mlx5_1 went to another subnet manager
  auto f = CheckFabric(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kFail);
  EXPECT_EQ(f[0].host, "h3");
  EXPECT_NE(f[0].summary.find("mlx5_1:1 (GID index 0) is on subnet fe80:0:0:9/64, which no other host has"),
            std::string::npos)
      << f[0].summary;
  EXPECT_NE(f[0].fix.find("NCCL_IB_HCA=^mlx5_1"), std::string::npos);
}

TEST(DoctorFabricGid, SwappedRailsWarnWithCrossNic) {
  auto hosts = IbCluster(3);
  std::swap(hosts[1].rdma_ports[0].gids, hosts[1].rdma_ports[1].gids);  // h2 cabled the other way round
  auto f = CheckFabric(hosts);
  ASSERT_EQ(f.size(), 2u) << Dump(f);  // NIC 0 and NIC 1 of h2
  for (const Finding& x : f) {
    EXPECT_EQ(x.severity, Severity::kWarn);
    EXPECT_EQ(x.host, "h2");
    EXPECT_NE(x.fix.find("NCCL_CROSS_NIC=0"), std::string::npos);
  }
  EXPECT_NE(f[0].summary.find("rails in another order: mlx5_0:1 (NIC 0) is on fe80:0:0:1/64 while NIC 0 of the other "
                              "hosts is on fe80:0:0:0/64"),
            std::string::npos)
      << f[0].summary;
}

TEST(DoctorFabricGid, HcaFilterAndDownPortsAreLeftOutOfTheComparison) {
  auto hosts = IbCluster(2);
  hosts[1].rdma_ports[1].gids = {IbGid(0, 9, 2)};
  hosts[1].env["NCCL_IB_HCA"] = "mlx5_0";  // the odd port is not used
  EXPECT_EQ(ExitCode(CheckFabric(hosts)), 0) << Dump(CheckFabric(hosts));
  hosts[1].env.clear();
  hosts[1].rdma_ports[1].active = false;  // down: a WARN about the port, not about its subnet
  auto f = CheckFabric(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_NE(f[0].summary.find("RDMA port(s) down: mlx5_1:1"), std::string::npos);
}

// RoCE hosts whose data0 carries 10.61.0.N/24 and a GID table as given.
std::vector<HostFacts> RoceCluster(int n, const std::vector<std::vector<ib::GidEntry>>& tables) {
  auto hosts = Cluster(n);
  for (HostFacts& h : hosts) {
    h.fingerprint[1].second = "shm,tcp,ib";
    h.rdma_ports = {{"mlx5_0", 1, true, true, 0, tables[h.rank]}};
  }
  return hosts;
}

TEST(DoctorFabricGid, RoceVersionDiffersByTheChosenGid) {
  // h1 has v1 and v2 entries (auto picks the v2 IPv4 one, index 3); h2 only v1.
  auto hosts = RoceCluster(2, {{V4Gid(0, GidType::kRoceV1, 0, 1), V4Gid(3, GidType::kRoceV2, 0, 1)},
                               {V4Gid(0, GidType::kRoceV1, 0, 2)}});
  auto f = Of(CheckFabric(hosts), Severity::kFail);
  ASSERT_EQ(f.size(), 1u) << Dump(CheckFabric(hosts));
  EXPECT_EQ(f[0].summary, "RoCE version differs between hosts: RoCE v1 on h2; RoCE v2 on h1");
  EXPECT_NE(f[0].fix.find("NCCL_IB_GID_INDEX=3"), std::string::npos);
}

TEST(DoctorFabricGid, RoceGidIndexDiffersWarns) {
  auto hosts = RoceCluster(3, {{V4Gid(3, GidType::kRoceV2, 0, 1)},
                               {V4Gid(3, GidType::kRoceV2, 0, 2)},
                               {V4Gid(1, GidType::kRoceV2, 0, 3)}});
  auto f = CheckFabric(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kWarn);
  EXPECT_EQ(f[0].summary, "RoCE GID index differs between hosts: 1 on h3; 3 on h1,h2");
  EXPECT_NE(f[0].fix.find("NCCL_IB_GID_INDEX=3"), std::string::npos);
}

TEST(DoctorFabricGid, RoceSubnetComesFromTheInterfaceHoldingTheAddress) {
  auto hosts = RoceCluster(3, {{V4Gid(3, GidType::kRoceV2, 0, 1)},
                               {V4Gid(3, GidType::kRoceV2, 7, 2)},
                               {V4Gid(3, GidType::kRoceV2, 0, 3)}});
  // h2's RoCE address 10.61.7.2 lies on its own /24: no peer there.
  hosts[1].interfaces.push_back(If("data1", "10.61.7.2/24"));
  auto f = CheckFabric(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kFail);
  EXPECT_EQ(f[0].host, "h2");
  EXPECT_NE(f[0].summary.find("is on subnet 10.61.7.0/24, which no other host has (10.61.0.0/24 on h1,h3)"),
            std::string::npos)
      << f[0].summary;
  // On one /24 the two are alike.
  hosts[1].rdma_ports[0].gids = {V4Gid(3, GidType::kRoceV2, 0, 2)};
  EXPECT_EQ(ExitCode(CheckFabric(hosts)), 0) << Dump(CheckFabric(hosts));
}

TEST(DoctorFabricGid, MissingGidIndexFailsOnThatHost) {
  auto hosts = RoceCluster(2, {{V4Gid(3, GidType::kRoceV2, 0, 1)}, {V4Gid(3, GidType::kRoceV2, 0, 2)}});
  hosts[0].env["NCCL_IB_GID_INDEX"] = "5";
  auto f = Of(CheckFabric(hosts), Severity::kFail);
  ASSERT_EQ(f.size(), 1u) << Dump(CheckFabric(hosts));
  EXPECT_EQ(f[0].host, "h1");
  EXPECT_NE(f[0].summary.find("has no GID at index 5 (NCCL_IB_GID_INDEX)"), std::string::npos) << f[0].summary;
  EXPECT_NE(f[0].fix.find("show_gids"), std::string::npos);
}

topology::Topology Fixture(const std::string& name) {
  auto t = topology::LoadTopologyFile(std::string(LOOM_TOPO_FIXTURE_DIR) + "/" + name);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.value();
}

// pcie_4gpu.json: gpu0,gpu1 under sw1, gpu2,gpu3 under sw2, both under sw0;
// each GPU behind its own downstream port (02:0N.0 / 02:1N.0 here).
HostFacts FourGpus() {
  HostFacts h = Host(1);
  h.topology = Fixture("pcie_4gpu.json");
  h.gdr_module = true;
  const std::vector<std::string> up = {"0000:00:01.0", "0000:01:00.0"};
  auto chain = [&](const std::string& sw, const std::string& port) {
    std::vector<std::string> c = up;
    c.push_back(sw);
    c.push_back(port);
    return c;
  };
  h.pci["0000:03:00.0"] = {chain("0000:02:00.0", "0000:03:08.0"), {}, "identity"};
  h.pci["0000:04:00.0"] = {chain("0000:02:00.0", "0000:03:10.0"), {}, "identity"};
  h.pci["0000:05:00.0"] = {chain("0000:02:01.0", "0000:04:08.0"), {}, "identity"};
  h.pci["0000:06:00.0"] = {chain("0000:02:01.0", "0000:04:10.0"), {}, "identity"};
  return h;
}

TEST(DoctorGpuPci, CleanPathsPassWithTheReason) {
  auto hosts = std::vector<HostFacts>{FourGpus()};
  hosts[0].topology->nodes[hosts[0].topology->Find("mlx5_0")].rdma = false;  // keep the NIC placement out of it
  auto f = CheckGpu(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kPass);
  EXPECT_NE(f[0].summary.find("no ACS redirect or translating IOMMU on their paths"), std::string::npos) << f[0].summary;
}

TEST(DoctorGpuPci, AcsOnASwitchPortBetweenGpusWarnsNamingTheBridge) {
  auto hosts = std::vector<HostFacts>{FourGpus()};
  hosts[0].topology->nodes[hosts[0].topology->Find("mlx5_0")].rdma = false;
  hosts[0].pci["0000:03:00.0"].acs_redirect = {"0000:03:08.0"};  // gpu0's downstream port
  // ACS above the switch (on the root port) is not crossed by peer traffic.
  hosts[0].pci["0000:05:00.0"].acs_redirect = {"0000:00:01.0"};
  auto f = CheckGpu(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kWarn);
  EXPECT_NE(f[0].summary.find("PCIe ACS redirects peer traffic on bridge(s) 0000:03:08.0 (between "
                              "gpu0<->gpu1,gpu0<->gpu2,gpu0<->gpu3)"),
            std::string::npos)
      << f[0].summary;
  EXPECT_NE(f[0].fix.find("setpci -s 0000:03:08.0 ECAP_ACS+0x6.w=0000"), std::string::npos);
}

TEST(DoctorGpuPci, TranslatingIommuWarnsAndPassthroughDoesNot) {
  auto hosts = std::vector<HostFacts>{FourGpus()};
  hosts[0].topology->nodes[hosts[0].topology->Find("mlx5_0")].rdma = false;
  for (auto& [bus, p] : hosts[0].pci) p.iommu = "DMA-FQ";
  auto f = CheckGpu(hosts);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].summary,
            "the IOMMU translates DMA for gpu0,gpu1,gpu2,gpu3 (domain type DMA-FQ): peer-to-peer and GPUDirect RDMA "
            "requests are remapped or blocked");
  EXPECT_NE(f[0].fix.find("iommu=pt"), std::string::npos);
}

TEST(DoctorGpuPci, NoGpusSaysWhatWasNotExamined) {
  auto f = CheckGpu(Cluster(2));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kPass);
  EXPECT_EQ(f[0].summary, "no GPUs on any host (peer paths, GPUDirect RDMA, ACS and IOMMU not examined)");
}

}  // namespace
}  // namespace loom::doctor
