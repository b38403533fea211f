// HostFacts survive the JSON round trip agents use, and bad input is named.
#include <gtest/gtest.h>

#include "topology/topo_file.h"
#include "tools/doctor/facts.h"
#include "tools/doctor/test_facts.h"

namespace loom::doctor {
namespace {

using namespace testing;  // NOLINT

TEST(DoctorFacts, RoundTripKeepsEveryMember) {
  HostFacts f = Host(2);
  f.env = {{"NCCL_SOCKET_IFNAME", "=data0"}, {"LOOM_HOSTID", "h2"}};
  f.resolutions = {{"node1", {"10.60.0.1", "fd00::1"}, ""}, {"node9", {}, "Name or service not known"}};
  f.limits = {int64_t{64} << 20, kUnlimited, 1024};
  f.gdr_module = true;
  f.probes = {{0, "data0", "10.61.0.1", 29401, ProbeOutcome::kTimeout, "no answer within 2000 ms", 2000.5}};
  f.streams = {{0, "data0", "data1", 123456789, 0.75, ""}};
  ib::PortInfo port{"mlx5_0", 1, true, true, 7, {}};
  port.gids.push_back({3, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 61, 0, 2}, ib::GidEntry::Type::kRoceV2, "data0"});
  f.rdma_ports = {port};
  f.pci["0000:03:00.0"] = {{"0000:00:01.0", "0000:02:08.0"}, {"0000:02:08.0"}, "DMA-FQ"};
  f.interfaces.push_back(If("eth9", "fe80::1%1/64"));  // the scope does not travel
  f.topology = topology::Topology::WithMachine("node2");
  auto back = FactsFromJson(json::Parse(json::Dump(ToJson(f))).value());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const HostFacts& g = back.value();
  EXPECT_EQ(g.rank, 1);
  EXPECT_EQ(g.label, "h2");
  EXPECT_EQ(g.root, "10.60.0.1:29400");
  EXPECT_EQ(g.probe_port, 29401);
  ASSERT_EQ(g.interfaces.size(), 4u);
  EXPECT_EQ(g.interfaces[2].name, "data0");
  EXPECT_EQ(g.interfaces[2].address, "10.61.0.2");
  EXPECT_EQ(g.interfaces[2].prefix_len, 24);
  EXPECT_EQ(g.interfaces[0].mtu, 65536);
  EXPECT_TRUE(g.interfaces[0].loopback);
  EXPECT_EQ(g.interfaces[3].address, "fe80::1");
  EXPECT_EQ(g.env, f.env);
  EXPECT_EQ(g.fingerprint, f.fingerprint);
  ASSERT_EQ(g.resolutions.size(), 2u);
  EXPECT_EQ(g.resolutions[0].addresses, f.resolutions[0].addresses);
  EXPECT_EQ(g.resolutions[1].error, "Name or service not known");
  EXPECT_EQ(g.limits.shm_bytes, int64_t{64} << 20);
  EXPECT_EQ(g.limits.memlock_bytes, kUnlimited);
  EXPECT_EQ(g.limits.nofile, 1024);
  EXPECT_TRUE(g.gdr_module);
  ASSERT_EQ(g.probes.size(), 1u);
  EXPECT_EQ(g.probes[0].outcome, ProbeOutcome::kTimeout);
  EXPECT_EQ(g.probes[0].ms, 2000.5);
  ASSERT_EQ(g.streams.size(), 1u);
  EXPECT_EQ(g.streams[0].bytes, 123456789);
  EXPECT_EQ(g.streams[0].to_ifname, "data1");
  ASSERT_EQ(g.rdma_ports.size(), 1u);
  EXPECT_EQ(g.rdma_ports[0].device, "mlx5_0");
  EXPECT_TRUE(g.rdma_ports[0].ethernet);
  EXPECT_EQ(g.rdma_ports[0].lid, 7);
  ASSERT_EQ(g.rdma_ports[0].gids.size(), 1u);
  EXPECT_EQ(g.rdma_ports[0].gids[0].gid, port.gids[0].gid);
  EXPECT_EQ(g.rdma_ports[0].gids[0].type, ib::GidEntry::Type::kRoceV2);
  EXPECT_EQ(g.rdma_ports[0].gids[0].netdev, "data0");
  ASSERT_EQ(g.pci.count("0000:03:00.0"), 1u);
  EXPECT_EQ(g.pci.at("0000:03:00.0").bridges, f.pci.at("0000:03:00.0").bridges);
  EXPECT_EQ(g.pci.at("0000:03:00.0").acs_redirect, f.pci.at("0000:03:00.0").acs_redirect);
  EXPECT_EQ(g.pci.at("0000:03:00.0").iommu, "DMA-FQ");
  ASSERT_TRUE(g.topology.has_value());
  EXPECT_EQ(g.topology->hostname, "node2");
  EXPECT_EQ(g.Param("SOCKET_IFNAME"), "=data0");
}

TEST(DoctorFacts, BadInputIsNamed) {
  json::Value v = ToJson(Host(1));
  for (auto& [k, m] : v.object()) {
    if (k == "probe_port") m = json::Value("x");
  }
  auto r = FactsFromJson(v);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("probe_port"), std::string::npos);
  EXPECT_FALSE(FactsFromJson(json::Value(3)).ok());
  // A GID that is not 32 hex digits, and an unknown GID type.
  HostFacts f = Host(1);
  f.rdma_ports = {{"mlx5_0", 1, true, false, 1, {{0, {}, ib::GidEntry::Type::kIb, ""}}}};
  for (const char* bad : {"\"gid\":\"00\"", "\"type\":\"RoCEv3\""}) {
    std::string text = json::Dump(ToJson(f));
    const std::string key = std::string(bad).substr(0, std::string(bad).find(':') + 1);
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << key;
    text.replace(at, text.find(',', at) - at, bad);
    auto g = FactsFromJson(json::Parse(text).value());
    ASSERT_FALSE(g.ok()) << bad;
    EXPECT_NE(g.status().message().find("GID"), std::string::npos) << g.status().message();
  }
  EXPECT_FALSE(ParseProbeOutcome("maybe").ok());
  EXPECT_EQ(ParseProbeOutcome("refused").value(), ProbeOutcome::kRefused);
}

TEST(DoctorFacts, ParamPrefersLoomOverNccl) {
  HostFacts f;
  f.env = {{"NCCL_SOCKET_IFNAME", "eth"}, {"LOOM_SOCKET_IFNAME", "=data0"}};
  EXPECT_EQ(f.Param("SOCKET_IFNAME"), "=data0");
  EXPECT_EQ(f.Param("IB_HCA"), "");
}

}  // namespace
}  // namespace loom::doctor
