// Tests of the all-reduce cost model: limits, scaling laws, and the job
// shapes derived from the fixtures.
#include "topology/cost_model.h"

#include <gtest/gtest.h>

#include "topology/topo_file.h"

namespace loom::topology {
namespace {

JobShape Dgx(int hosts) {
  JobShape s;
  s.hosts = hosts;
  s.ranks_per_host = 8;
  s.intra_gbs = 370;
  s.intra_lat_us = 1;
  s.host_net_gbs = 400;
  s.inter_lat_us = 5;
  return s;
}

TEST(CostModelTest, NothingToDoCostsNothing) {
  JobShape one = Dgx(1);
  one.ranks_per_host = 1;
  for (CostAlgo a : kAllCostAlgos) {
    EXPECT_EQ(AllReduceUs(a, 1 << 20, one), 0) << Name(a);
    EXPECT_EQ(AllReduceUs(a, 0, Dgx(4)), 0) << Name(a);
    EXPECT_GT(AllReduceUs(a, 1, Dgx(4)), 0) << Name(a);
  }
}

TEST(CostModelTest, RingLatencyIsLinearAndTreeLogarithmic) {
  const double ring_a = AllReduceUs(CostAlgo::kRing, 8, Dgx(256));
  const double ring_b = AllReduceUs(CostAlgo::kRing, 8, Dgx(512));
  EXPECT_NEAR(ring_b / ring_a, 2.0, 0.01);
  const double tree_a = AllReduceUs(CostAlgo::kTree, 8, Dgx(256));
  const double tree_b = AllReduceUs(CostAlgo::kTree, 8, Dgx(512));
  EXPECT_NEAR(tree_b - tree_a, 2 * 5.0, 1e-3);  // one more level, up and down
}

TEST(CostModelTest, RingWinsLargeMessagesTreeWinsSmallOnesAtScale) {
  EXPECT_EQ(RankAllReduce(1 << 30, Dgx(2)).front().algo, CostAlgo::kRing);
  EXPECT_EQ(RankAllReduce(1 << 20, Dgx(512)).front().algo, CostAlgo::kTree);
  // Estimates are sorted and complete.
  const auto all = RankAllReduce(1 << 16, Dgx(16));
  ASSERT_EQ(all.size(), 4u);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LE(all[i - 1].us, all[i].us);
}

TEST(CostModelTest, LargeBufferTimeApproachesTheBusBandwidthBound) {
  // 2(n-1)/n * S / B for a ring inside one host: 8 ranks, 370 GB/s.
  const double s = 1e9;
  const double bound = 2.0 * 7 / 8 * s / 370e3;
  EXPECT_NEAR(AllReduceUs(CostAlgo::kRing, s, Dgx(1)), bound, bound * 0.01);
}

TEST(ShapeForTest, DerivesFromFixtures) {
  auto dgx = LoadTopologyFile(std::string(LOOM_TOPO_FIXTURE_DIR) + "/dgx_h100.json");
  ASSERT_TRUE(dgx.ok()) << dgx.status().ToString();
  const JobShape s = ShapeFor(*dgx, 16, 8);
  EXPECT_NEAR(s.intra_gbs, 18 * 20.6, 1e-9);
  EXPECT_EQ(s.intra_lat_us, 1.0);
  EXPECT_EQ(s.host_net_gbs, 8 * 48);  // eight 400G NICs, each behind Gen5 x16
  EXPECT_EQ(s.inter_lat_us, 5.0);

  auto cpu = LoadTopologyFile(std::string(LOOM_TOPO_FIXTURE_DIR) + "/cpu_only.json");
  ASSERT_TRUE(cpu.ok());
  const JobShape c = ShapeFor(*cpu, 4, 2);
  EXPECT_EQ(c.intra_gbs, 10);
  EXPECT_EQ(c.host_net_gbs, 12.5);  // the 100G NIC, not the 10G one
  EXPECT_EQ(c.inter_lat_us, 20.0);

  auto pcie = LoadTopologyFile(std::string(LOOM_TOPO_FIXTURE_DIR) + "/pcie_4gpu.json");
  ASSERT_TRUE(pcie.ok());
  const JobShape p = ShapeFor(*pcie, 2, 4);
  EXPECT_EQ(p.intra_gbs, 24);
  EXPECT_EQ(p.intra_lat_us, 2.0);
  EXPECT_EQ(p.host_net_gbs, 24);  // one 200G NIC shared by all four GPUs
}

}  // namespace
}  // namespace loom::topology
