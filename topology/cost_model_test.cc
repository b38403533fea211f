// Tests of the link costs derived from host topologies: every fixture, and
// the awkward shapes (one GPU, more ranks than GPUs, no NIC at all).
#include "topology/cost_model.h"

#include <gtest/gtest.h>

#include "topology/topo_file.h"

namespace loom::topology {
namespace {

Topology Fixture(const std::string& name) {
  auto t = LoadTopologyFile(std::string(LOOM_TOPO_FIXTURE_DIR) + "/" + name + ".json");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : Topology::WithMachine("broken");
}

TEST(LinkCostsForTest, DgxIsNvLinkInsideAndEightRdmaNicsOutside) {
  const HostLinkCosts c = LinkCostsFor(Fixture("dgx_h100"), 8);
  EXPECT_EQ(c.intra, (LinkCost{1.0, 18 * 20.6, 0.0}));
  // Eight 400G NICs, each capped by its PCIe Gen5 x16 path (48 GB/s).
  EXPECT_EQ(c.inter, (LinkCost{5.0, 8 * 48.0, 0.0}));
  // Four ranks use four of the NICs.
  EXPECT_EQ(LinkCostsFor(Fixture("dgx_h100"), 4).inter.bandwidth_gbs, 4 * 48.0);
}

TEST(LinkCostsForTest, PcieBoxSharesOneNic) {
  const HostLinkCosts c = LinkCostsFor(Fixture("pcie_4gpu"), 4);
  EXPECT_EQ(c.intra, (LinkCost{2.0, 24.0, 0.0}));
  EXPECT_EQ(c.inter, (LinkCost{5.0, 24.0, 0.0}));  // one 200G NIC behind Gen4 x16
}

TEST(LinkCostsForTest, FarNicIsCappedByTheSmpLink) {
  const HostLinkCosts c = LinkCostsFor(Fixture("far_nic"), 2);
  EXPECT_EQ(c.intra.latency_us, 1.0);  // NV12 between the two GPUs
  EXPECT_EQ(c.intra.bandwidth_gbs, 240.0);
  EXPECT_EQ(c.inter.bandwidth_gbs, 16.0);  // the NIC sits across the 16 GB/s SMP link
}

TEST(LinkCostsForTest, CpuOnlyHostUsesSharedMemoryAndItsFastestNic) {
  const HostLinkCosts c = LinkCostsFor(Fixture("cpu_only"), 2);
  EXPECT_EQ(c.intra, (LinkCost{1.5, 10.0, 0.0}));
  EXPECT_EQ(c.inter, (LinkCost{20.0, 12.5, 0.0}));  // the 100G NIC, not the 10G one; no RDMA
}

TEST(LinkCostsForTest, AwkwardShapes) {
  const Topology dgx = Fixture("dgx_h100");
  // One rank: one GPU, nothing to share within the host.
  const HostLinkCosts one = LinkCostsFor(dgx, 1);
  EXPECT_EQ(one.intra, (LinkCost{2.0, 10.0, 0.0}));
  EXPECT_EQ(one.inter, (LinkCost{5.0, 48.0, 0.0}));
  // Zero and negative count as one; more ranks than GPUs use all GPUs.
  EXPECT_EQ(LinkCostsFor(dgx, 0).intra, one.intra);
  EXPECT_EQ(LinkCostsFor(dgx, -3).inter, one.inter);
  EXPECT_EQ(LinkCostsFor(dgx, 64).inter, LinkCostsFor(dgx, 8).inter);
  // A host without NICs still gets a finite, slow network.
  const HostLinkCosts bare = LinkCostsFor(Topology::WithMachine("bare"), 4);
  EXPECT_EQ(bare.intra, (LinkCost{1.5, 10.0, 0.0}));
  EXPECT_EQ(bare.inter, (LinkCost{20.0, 1.25, 0.0}));
}

// Reads slower than the FIFOs: 64 KiB in 12 us, 1 MiB in 120 us, against
// FIFOs at 10.5 GB/s (1 MiB in 100 us) and the model's 6: reads at 9.1 GB/s
// real are priced 5.2.
TEST(PricePeerReadsTest, SlopeIsTheRateAndTheRestOfTheSmallReadTheFixedCost) {
  const PeerReadPrice p = PricePeerReads(64 << 10, 12.0, 1 << 20, 120.0, 1 << 20, 100.0, 6.0);
  const double rate = (double{1 << 20} - (64 << 10)) / 108.0;  // bytes/us
  const double scale = 6.0e3 / ((1 << 20) / 100.0);
  EXPECT_NEAR(p.gbs, rate * scale / 1e3, 1e-9);
  EXPECT_NEAR(p.gbs, 5.2, 0.05);
  EXPECT_NEAR(p.setup_us, (12.0 - (64 << 10) / rate) / scale, 1e-9);
  EXPECT_GT(p.setup_us, 0.0);
}

TEST(PricePeerReadsTest, ReadsKeepTheirRatioToTheFifosUpToTheFifosRate) {
  const PeerReadPrice base = PricePeerReads(64 << 10, 5.0, 1 << 20, 240.0, 1 << 20, 100.0, 6.0);
  EXPECT_LT(PricePeerReads(64 << 10, 5.0, 1 << 20, 480.0, 1 << 20, 100.0, 6.0).gbs, base.gbs);
  // Slower FIFOs on this host make the same reads relatively cheaper.
  const PeerReadPrice slow_fifos =
      PricePeerReads(64 << 10, 5.0, 1 << 20, 240.0, 1 << 20, 200.0, 6.0);
  EXPECT_NEAR(slow_fifos.gbs, 2 * base.gbs, 1e-9);
  EXPECT_NEAR(slow_fifos.setup_us, base.setup_us / 2, 1e-9);
  // Reads exactly as fast as the FIFOs cost what the model's FIFOs cost,
  // and faster ones no less (timed reads can beat the FIFOs threefold).
  EXPECT_NEAR(PricePeerReads(1 << 10, 1e-9, 1 << 20, 100.0, 1 << 20, 100.0, 6.0).gbs, 6.0, 0.01);
  const PeerReadPrice fast = PricePeerReads(64 << 10, 9.0, 1 << 20, 60.0, 1 << 20, 180.0, 6.0);
  EXPECT_EQ(fast.gbs, 6.0);
  EXPECT_GT(fast.setup_us, 0.0);
}

TEST(PricePeerReadsTest, DegenerateTimingsStayInRange) {
  // A big read no slower than the small one (noise): its plain rate, and
  // the small read's time beyond that rate as the fixed cost.
  const double scale = 6.0e3 / ((1 << 20) / 100.0);
  const PeerReadPrice same = PricePeerReads(64 << 10, 250.0, 1 << 20, 250.0, 1 << 20, 100.0, 6.0);
  EXPECT_NEAR(same.gbs, (1 << 20) / 250.0 * scale / 1e3, 1e-9);
  EXPECT_NEAR(same.setup_us, (250.0 - 250.0 / 16) / scale, 1e-9);
  const PeerReadPrice wild = PricePeerReads(64 << 10, 1e6, 1 << 20, 1e9, 1 << 20, 1e-9, 6.0);
  EXPECT_GE(wild.gbs, 0.1);
  EXPECT_LE(wild.setup_us, 1000.0);
}

TEST(ParsePeerReadPriceTest, RateAndOptionalFixedCost) {
  auto none = ParsePeerReadPrice("");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto rate = ParsePeerReadPrice("4");
  ASSERT_TRUE(rate.ok() && rate->has_value());
  EXPECT_EQ((*rate)->gbs, 4.0);
  EXPECT_EQ((*rate)->setup_us, 20.0);  // the value before setup measured it
  auto both = ParsePeerReadPrice("10.5,2.5");
  ASSERT_TRUE(both.ok() && both->has_value());
  EXPECT_EQ((*both)->gbs, 10.5);
  EXPECT_EQ((*both)->setup_us, 2.5);
  for (const char* bad :
       {"0", "-1", "abc", "4,", "4,-1", "4,2,3", "4x", "inf", "nan", "2000", "4,5000", " 4"}) {
    auto r = ParsePeerReadPrice(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(bad), std::string::npos) << bad;
    }
  }
}

TEST(RuntimeLinkCost, SharedMemoryCarriesTheTimedReadsAndNetworksCostMore) {
  const PeerReadPrice reads{4.0, 7.0};
  const LinkCost shm = RuntimeLinkCost(RankLink::kSharedMemory, reads);
  EXPECT_EQ(shm.bandwidth_gbs, kShmFifoGbs);
  EXPECT_EQ(shm.peer_read_gbs, 4.0);
  EXPECT_EQ(shm.peer_read_setup_us, 7.0);
  const LinkCost loopback = RuntimeLinkCost(RankLink::kSocketSameHost, reads);
  const LinkCost socket = RuntimeLinkCost(RankLink::kSocket, reads);
  const LinkCost ib = RuntimeLinkCost(RankLink::kInfiniBand, reads);
  EXPECT_LT(shm.latency_us, loopback.latency_us);
  EXPECT_LT(loopback.latency_us, socket.latency_us);
  EXPECT_LT(ib.latency_us, socket.latency_us);
  EXPECT_GT(ib.bandwidth_gbs, socket.bandwidth_gbs);
  for (const LinkCost& l : {loopback, socket, ib}) EXPECT_EQ(l.peer_read_gbs, 0.0);
  const LinkCost ucx = RuntimeLinkCost(RankLink::kUcx, reads);
  EXPECT_EQ(ucx.latency_us, socket.latency_us);  // priced as the sockets it usually runs over
  EXPECT_EQ(ucx.bandwidth_gbs, socket.bandwidth_gbs);
}

}  // namespace
}  // namespace loom::topology
