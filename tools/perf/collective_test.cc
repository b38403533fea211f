// Tests of nccl-tests' size, count and bandwidth conventions per collective.
#include "tools/perf/collective.h"

#include <gtest/gtest.h>

namespace loom::perf {
namespace {

TEST(PerfCollective, NamesRoundTrip) {
  for (int i = 0; i < kNumCollectives; ++i) {
    const auto c = static_cast<Collective>(i);
    const std::string name(Name(c));
    EXPECT_EQ(ParseCollective(name), c) << name;
    EXPECT_EQ(ParseCollective(name + "_perf"), c) << name;
  }
  EXPECT_EQ(ParseCollective("allreduce"), Collective::kAllReduce);
  EXPECT_EQ(ParseCollective("reducescatter_perf"), Collective::kReduceScatter);
  EXPECT_EQ(ParseCollective("all_to_all"), Collective::kAllToAll);
  EXPECT_EQ(ParseCollective("send_recv"), Collective::kSendRecv);
  EXPECT_EQ(ParseCollective(""), std::nullopt);
  EXPECT_EQ(ParseCollective("_perf"), std::nullopt);
  EXPECT_EQ(ParseCollective("gather_perf"), Collective::kGather);
  EXPECT_EQ(ParseCollective("hyper_cube"), Collective::kHyperCube);
  EXPECT_EQ(ParseCollective("gatherv"), std::nullopt);
  EXPECT_EQ(ParseCollective("all"), std::nullopt);  // expanded by ParseOptions
  EXPECT_EQ(ParseCollective("ALL_REDUCE"), std::nullopt);
}

TEST(PerfCollective, OperatorAndRootColumns) {
  EXPECT_TRUE(UsesRedOp(Collective::kAllReduce));
  EXPECT_TRUE(UsesRedOp(Collective::kReduceScatter));
  EXPECT_TRUE(UsesRedOp(Collective::kReduce));
  EXPECT_FALSE(UsesRedOp(Collective::kSendRecv));
  EXPECT_TRUE(PrintsRedOp(Collective::kSendRecv));
  EXPECT_FALSE(PrintsRedOp(Collective::kAllGather));
  EXPECT_FALSE(PrintsRedOp(Collective::kBroadcast));
  EXPECT_FALSE(PrintsRedOp(Collective::kAllToAll));
  EXPECT_TRUE(UsesRoot(Collective::kBroadcast));
  EXPECT_TRUE(UsesRoot(Collective::kReduce));
  EXPECT_FALSE(UsesRoot(Collective::kAllReduce));
  EXPECT_FALSE(UsesRoot(Collective::kSendRecv));
  EXPECT_TRUE(UsesRoot(Collective::kGather));
  EXPECT_TRUE(UsesRoot(Collective::kScatter));
  EXPECT_FALSE(UsesRoot(Collective::kHyperCube));
  for (const Collective c : {Collective::kGather, Collective::kScatter, Collective::kHyperCube}) {
    EXPECT_FALSE(PrintsRedOp(c)) << Name(c);
  }
}

TEST(PerfCollective, BusBwFactors) {
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllReduce, 8), 1.75);
  for (const Collective c : {Collective::kReduceScatter, Collective::kAllGather,
                             Collective::kAllToAll, Collective::kGather, Collective::kScatter}) {
    EXPECT_DOUBLE_EQ(BusBwFactor(c, 1), 0.0);
    EXPECT_DOUBLE_EQ(BusBwFactor(c, 4), 0.75);
    EXPECT_DOUBLE_EQ(BusBwFactor(c, 8), 0.875);
  }
  for (const Collective c : {Collective::kBroadcast, Collective::kReduce, Collective::kSendRecv,
                             Collective::kHyperCube}) {
    EXPECT_DOUBLE_EQ(BusBwFactor(c, 1), 1.0);
    EXPECT_DOUBLE_EQ(BusBwFactor(c, 8), 1.0);
  }
}

TEST(PerfCollective, GeometryFullBuffer) {
  for (const Collective c : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce,
                             Collective::kSendRecv}) {
    const Geometry g = ComputeGeometry(c, 1001, 4, 3);  // odd size: count rounds down
    EXPECT_EQ(g.param_count, 250u);
    EXPECT_EQ(g.send_count, 250u);
    EXPECT_EQ(g.recv_count, 250u);
    EXPECT_EQ(g.send_inplace_offset, 0u);
    EXPECT_EQ(g.recv_inplace_offset, 0u);
    EXPECT_EQ(g.Bytes(4), 1000u);
  }
}

TEST(PerfCollective, GeometryReduceScatter) {
  // 1000 B of float over 3 ranks: 250 elements, 83 per rank, aligned to 16 B = 80.
  const Geometry g = ComputeGeometry(Collective::kReduceScatter, 1000, 4, 3);
  EXPECT_EQ(g.param_count, 80u);
  EXPECT_EQ(g.recv_count, 80u);
  EXPECT_EQ(g.send_count, 240u);
  EXPECT_EQ(g.send_inplace_offset, 0u);
  EXPECT_EQ(g.recv_inplace_offset, 80u);  // output is this rank's slot of the input
  EXPECT_EQ(g.Bytes(4), 960u);
}

TEST(PerfCollective, GeometryAllGather) {
  const Geometry g = ComputeGeometry(Collective::kAllGather, 1 << 20, 2, 8);
  EXPECT_EQ(g.param_count, 65536u);
  EXPECT_EQ(g.send_count, 65536u);
  EXPECT_EQ(g.recv_count, 524288u);
  EXPECT_EQ(g.send_inplace_offset, 65536u);  // input is this rank's slot of the output
  EXPECT_EQ(g.recv_inplace_offset, 0u);
  EXPECT_EQ(g.Bytes(2), 1u << 20);
}

TEST(PerfCollective, GeometryAllToAll) {
  const Geometry g = ComputeGeometry(Collective::kAllToAll, 4096, 8, 4);
  EXPECT_EQ(g.param_count, 128u);
  EXPECT_EQ(g.send_count, 512u);
  EXPECT_EQ(g.recv_count, 512u);
  EXPECT_EQ(g.send_inplace_offset, 0u);
  EXPECT_EQ(g.recv_inplace_offset, 0u);
}

TEST(PerfCollective, GeometryGatherScatterHyperCube) {
  // As nccl-tests' gather.cu, scatter.cu, hypercube.cu: 1000 B of float over
  // 3 ranks is 80 elements per rank (83 rounded down to 16 B).
  for (const Collective c : {Collective::kGather, Collective::kHyperCube}) {
    const Geometry g = ComputeGeometry(c, 1000, 4, 3);
    EXPECT_EQ(g.param_count, 80u) << Name(c);
    EXPECT_EQ(g.send_count, 80u);
    EXPECT_EQ(g.recv_count, 240u);
    EXPECT_EQ(g.send_inplace_offset, 80u);  // input is this rank's slot of the output
    EXPECT_EQ(g.recv_inplace_offset, 0u);
    EXPECT_EQ(g.Bytes(4), 960u);
  }
  const Geometry s = ComputeGeometry(Collective::kScatter, 1000, 4, 3);
  EXPECT_EQ(s.param_count, 80u);
  EXPECT_EQ(s.send_count, 240u);
  EXPECT_EQ(s.recv_count, 80u);
  EXPECT_EQ(s.send_inplace_offset, 0u);
  EXPECT_EQ(s.recv_inplace_offset, 80u);  // output is this rank's slot of the input
  EXPECT_EQ(s.Bytes(4), 960u);
}

TEST(PerfCollective, HyperCubeNeedsAPowerOfTwo) {
  for (const int n : {1, 2, 4, 8, 64}) {
    EXPECT_EQ(SkipReason(Collective::kHyperCube, n), std::nullopt) << n;
  }
  EXPECT_EQ(SkipReason(Collective::kHyperCube, 3), "nRanks 3 is not a power of 2, skipping");
  EXPECT_TRUE(SkipReason(Collective::kHyperCube, 6).has_value());
  EXPECT_EQ(SkipReason(Collective::kGather, 3), std::nullopt);
  EXPECT_EQ(SkipReason(Collective::kAllReduce, 7), std::nullopt);
}

TEST(PerfCollective, GeometrySmallSizesRoundToZero) {
  // 8 bytes of float over 4 ranks: under 16 B per rank, nothing to move.
  const Geometry g = ComputeGeometry(Collective::kAllGather, 8, 4, 4);
  EXPECT_EQ(g.param_count, 0u);
  EXPECT_EQ(g.Bytes(4), 0u);
  const Geometry one = ComputeGeometry(Collective::kReduceScatter, 64, 1, 1);
  EXPECT_EQ(one.param_count, 64u);
  EXPECT_EQ(ComputeGeometry(Collective::kAllReduce, 0, 8, 2).param_count, 0u);
}

TEST(PerfCollective, Bandwidth) {
  // 1 GB in 1 s.
  Bandwidth bw = ComputeBandwidth(Collective::kAllReduce, 250'000'000, 4, 1.0, 4);
  EXPECT_DOUBLE_EQ(bw.algbw, 1.0);
  EXPECT_DOUBLE_EQ(bw.busbw, 1.5);
  // reduce_scatter's count is per rank: algbw counts the whole buffer.
  bw = ComputeBandwidth(Collective::kReduceScatter, 1000, 8, 1e-6, 4);
  EXPECT_DOUBLE_EQ(bw.algbw, 32.0);
  EXPECT_DOUBLE_EQ(bw.busbw, 24.0);
  bw = ComputeBandwidth(Collective::kAllGather, 1000, 8, 1e-6, 4);
  EXPECT_DOUBLE_EQ(bw.algbw, 32.0);
  bw = ComputeBandwidth(Collective::kAllToAll, 1000, 8, 1e-6, 2);
  EXPECT_DOUBLE_EQ(bw.algbw, 16.0);
  EXPECT_DOUBLE_EQ(bw.busbw, 8.0);
  bw = ComputeBandwidth(Collective::kSendRecv, 1000, 8, 1e-6, 2);
  EXPECT_DOUBLE_EQ(bw.algbw, 8.0);
  EXPECT_DOUBLE_EQ(bw.busbw, 8.0);
  // gather and scatter count the whole buffer, busbw (n-1)/n.
  for (const Collective c : {Collective::kGather, Collective::kScatter}) {
    bw = ComputeBandwidth(c, 1000, 8, 1e-6, 4);
    EXPECT_DOUBLE_EQ(bw.algbw, 32.0) << Name(c);
    EXPECT_DOUBLE_EQ(bw.busbw, 24.0) << Name(c);
  }
  // hypercube: what each rank receives, the n-1 other blocks; factor 1.
  bw = ComputeBandwidth(Collective::kHyperCube, 1000, 8, 1e-6, 4);
  EXPECT_DOUBLE_EQ(bw.algbw, 24.0);
  EXPECT_DOUBLE_EQ(bw.busbw, 24.0);
  bw = ComputeBandwidth(Collective::kBroadcast, 0, 8, 1e-6, 2);
  EXPECT_DOUBLE_EQ(bw.algbw, 0.0);
}

}  // namespace
}  // namespace loom::perf
