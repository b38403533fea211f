// The shipped topology fixtures: each loads, round-trips byte for byte, and
// classifies the paths between named devices as nvidia-smi topo -m would.
#include <gtest/gtest.h>

#include <string>

#include "topology/paths.h"
#include "topology/topo_file.h"

namespace loom::topology {
namespace {

std::string FixturePath(const std::string& name) {
  return std::string(LOOM_TOPO_FIXTURE_DIR) + "/" + name + ".json";
}

Topology Load(const std::string& name) {
  auto t = LoadTopologyFile(FixturePath(name));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : Topology::WithMachine("broken");
}

// The path between two nodes named by id, as "TYPE bw".
std::string PathBetween(const Topology& t, const std::string& a, const std::string& b) {
  const int ia = t.Find(a);
  const int ib = t.Find(b);
  if (ia < 0 || ib < 0) return "no such node";
  const Path p = ClassifyPath(t, ia, ib);
  const Path back = ClassifyPath(t, ib, ia);
  EXPECT_EQ(p.type, back.type) << a << " <-> " << b;
  EXPECT_EQ(p.bw_gbs, back.bw_gbs) << a << " <-> " << b;
  char bw[32];
  std::snprintf(bw, sizeof bw, "%g", p.bw_gbs);
  return std::string(Name(p.type)) + " " + bw;
}

class FixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FixtureTest, RoundTripIsIdentical) {
  auto text = ReadWholeFile(FixturePath(GetParam()));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto t = ParseTopologyJson(*text);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(DumpTopologyJson(*t), *text) << "fixture is not in canonical form";
  auto again = ParseTopologyJson(DumpTopologyJson(*t));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(DumpTopologyJson(*again), *text);
}

TEST_P(FixtureTest, EveryPathIsSymmetricAndPositive) {
  const Topology t = Load(GetParam());
  for (size_t a = 0; a < t.nodes.size(); ++a) {
    for (size_t b = 0; b < t.nodes.size(); ++b) {
      const Path p = ClassifyPath(t, static_cast<int>(a), static_cast<int>(b));
      const Path q = ClassifyPath(t, static_cast<int>(b), static_cast<int>(a));
      EXPECT_EQ(p.type, q.type);
      EXPECT_GT(p.bw_gbs, 0);
      EXPECT_EQ(a == b, p.type == PathType::kLoc);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, FixtureTest,
                         ::testing::Values("dgx_h100", "pcie_4gpu", "far_nic", "roce", "cpu_only"));

TEST(DgxFixture, GpusMeetOnNvSwitchesAndNicsArePix) {
  const Topology t = Load("dgx_h100");
  EXPECT_EQ(t.OfKind(NodeKind::kGpu).size(), 8u);
  EXPECT_EQ(t.OfKind(NodeKind::kNic).size(), 9u);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) {
      if (i == j) continue;
      const Path p = ClassifyPath(t, t.Find("gpu" + std::to_string(i)), t.Find("gpu" + std::to_string(j)));
      EXPECT_EQ(p.type, PathType::kNvl);
      EXPECT_EQ(p.nvlinks, 18);  // 5 + 4 + 4 + 5 lanes over four NVSwitches
      EXPECT_NEAR(p.bw_gbs, 18 * 20.6, 1e-9);
    }
    const std::string gpu = "gpu" + std::to_string(i);
    const std::string nic = "mlx5_" + std::to_string(i);
    EXPECT_EQ(PathBetween(t, gpu, nic), "PIX 48");  // Gen5 x16
    EXPECT_EQ(ClosestNic(t, t.Find(gpu)), t.Find(nic));
  }
  EXPECT_EQ(PathBetween(t, "gpu0", "mlx5_1"), "NODE 48");
  EXPECT_EQ(PathBetween(t, "gpu0", "mlx5_4"), "SYS 10");  // across UPI
  EXPECT_EQ(PathBetween(t, "mlx5_0", "eno1"), "PHB 12");  // eno1 is Gen4 x8 on hb0
  EXPECT_EQ(PathBetween(t, "gpu0", "numa0"), "PHB 48");
  EXPECT_EQ(PathBetween(t, "gpu0", "nvs2"), "NVL 82.4");
}

TEST(Pcie4GpuFixture, SwitchTreeWithoutNvLink) {
  const Topology t = Load("pcie_4gpu");
  EXPECT_EQ(PathBetween(t, "gpu0", "gpu1"), "PIX 24");
  EXPECT_EQ(PathBetween(t, "gpu2", "gpu3"), "PIX 24");
  EXPECT_EQ(PathBetween(t, "gpu0", "gpu2"), "PXB 24");
  EXPECT_EQ(PathBetween(t, "gpu1", "gpu3"), "PXB 24");
  EXPECT_EQ(PathBetween(t, "gpu0", "mlx5_0"), "NODE 24");
  EXPECT_EQ(PathBetween(t, "sw1", "gpu0"), "PIX 24");
}

TEST(FarNicFixture, NicsAcrossTheSocketLink) {
  const Topology t = Load("far_nic");
  EXPECT_EQ(PathBetween(t, "gpu0", "gpu1"), "NVL 240");
  EXPECT_EQ(PathBetween(t, "gpu0", "mlx5_0"), "SYS 16");
  EXPECT_EQ(PathBetween(t, "gpu1", "mlx5_1"), "SYS 16");
  EXPECT_EQ(PathBetween(t, "mlx5_0", "mlx5_1"), "NODE 24");
  // Both NICs are equally far: the lower index wins.
  EXPECT_EQ(ClosestNic(t, t.Find("gpu0")), t.Find("mlx5_0"));
}

TEST(RoceFixture, EachGpuBesideOnePort) {
  const Topology t = Load("roce");
  const Node& nic = t.nodes[static_cast<size_t>(t.Find("mlx5_1"))];
  EXPECT_EQ(nic.link_layer, LinkLayer::kEthernet);
  EXPECT_TRUE(nic.rdma);
  EXPECT_EQ(nic.roce_version, 2);
  EXPECT_EQ(PathBetween(t, "gpu0", "mlx5_0"), "PIX 24");
  EXPECT_EQ(PathBetween(t, "gpu1", "mlx5_1"), "PIX 24");
  EXPECT_EQ(PathBetween(t, "gpu0", "mlx5_1"), "PHB 24");
  EXPECT_EQ(PathBetween(t, "gpu0", "gpu1"), "PHB 24");
  EXPECT_EQ(ClosestNic(t, t.Find("gpu1")), t.Find("mlx5_1"));
}

TEST(CpuOnlyFixture, FasterNicIsPreferredAtEqualDistance) {
  const Topology t = Load("cpu_only");
  EXPECT_TRUE(t.OfKind(NodeKind::kGpu).empty());
  EXPECT_EQ(PathBetween(t, "eno1", "enp65s0"), "NODE 3");  // Gen3 x4
  EXPECT_EQ(NicGbs(t, t.Find("eno1")), 1.25);
  EXPECT_EQ(NicGbs(t, t.Find("enp65s0")), 12.5);
  EXPECT_EQ(ClosestNic(t, t.Find("numa0")), t.Find("enp65s0"));
}

}  // namespace
}  // namespace loom::topology
