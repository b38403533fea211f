// Selection: NCCL_ALGO grammar, the filter's precedence, and the cost model's
// choices at the ends of the size range.
#include "collectives/select/selector.h"

#include <gtest/gtest.h>

namespace loom {
namespace {

TEST(AlgoFilter, EmptyAllowsEverything) {
  auto f = AlgoFilter::Parse("");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->empty());
  EXPECT_TRUE(f->Allows(OpKind::kAllReduce, Algo::kTree));
}

TEST(AlgoFilter, ListExcludeAndPerCollectiveRules) {
  auto f = AlgoFilter::Parse("Ring, tree");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->Allows(OpKind::kAllReduce, Algo::kRing));
  EXPECT_TRUE(f->Allows(OpKind::kAllReduce, Algo::kTree));
  EXPECT_FALSE(f->Allows(OpKind::kAllReduce, Algo::kRecursiveDoubling));

  f = AlgoFilter::Parse("^Tree");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->Allows(OpKind::kBroadcast, Algo::kTree));
  EXPECT_TRUE(f->Allows(OpKind::kBroadcast, Algo::kRing));

  // NCCL 2.24 grammar: a rule naming the collective wins over the global one.
  f = AlgoFilter::Parse("ring;allreduce:tree,rd");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->Allows(OpKind::kAllReduce, Algo::kTree));
  EXPECT_TRUE(f->Allows(OpKind::kAllReduce, Algo::kRecursiveDoubling));
  EXPECT_FALSE(f->Allows(OpKind::kAllReduce, Algo::kRing));
  EXPECT_TRUE(f->Allows(OpKind::kAllGather, Algo::kRing));
  EXPECT_FALSE(f->Allows(OpKind::kAllGather, Algo::kDirect));
}

TEST(AlgoFilter, UnknownAlgorithmIsNamed) {
  auto f = AlgoFilter::Parse("Ring,NVLS");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kInvalidArgument);
  EXPECT_NE(f.status().message().find("'nvls'"), std::string::npos) << f.status().message();
}

TEST(SelectAlgo, SmallMessagesTakeFewStepsLargeOnesTakeBandwidth) {
  const LinkModel tcp{20.0, 1.5, 0.0};
  AlgoFilter none;
  // 8 ranks, 8 bytes: latency rules; recursive doubling has log2(8) = 3 steps.
  EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, 8, 8, tcp, none).algo, Algo::kRecursiveDoubling);
  // 8 ranks, 256 MiB: the ring moves 2(n-1)/n of the data, the others more.
  EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, 256u << 20, 8, tcp, none).algo, Algo::kRing);
  EXPECT_EQ(SelectAlgo(OpKind::kBroadcast, 256u << 20, 8, tcp, none).algo, Algo::kRing);
  EXPECT_EQ(SelectAlgo(OpKind::kBroadcast, 8, 8, tcp, none).algo, Algo::kTree);
}

TEST(SelectAlgo, DirectOnlyWhenPeerReadsWorkAndMessagesAreLarge) {
  const LinkModel shm{1.0, 6.0, 0.0};
  const LinkModel shm_read{1.0, 6.0, 12.0};
  AlgoFilter none;
  EXPECT_NE(SelectAlgo(OpKind::kAllReduce, 64u << 20, 2, shm, none).algo, Algo::kDirect);
  EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, 64u << 20, 2, shm_read, none).algo, Algo::kDirect);
  EXPECT_NE(SelectAlgo(OpKind::kAllReduce, 8, 2, shm_read, none).algo, Algo::kDirect);
}

TEST(SelectAlgo, FilterWithNothingUsableFallsBackAndSaysSo) {
  const LinkModel shm{1.0, 6.0, 0.0};  // no single-copy reads
  auto only_direct = AlgoFilter::Parse("Direct");
  ASSERT_TRUE(only_direct.ok());
  Choice c = SelectAlgo(OpKind::kAllReduce, 1 << 20, 4, shm, only_direct.value());
  EXPECT_TRUE(c.forced_fallback);
  EXPECT_NE(c.algo, Algo::kDirect);
  auto tree = AlgoFilter::Parse("Tree");
  c = SelectAlgo(OpKind::kAllReduce, 1 << 20, 4, shm, tree.value());
  EXPECT_FALSE(c.forced_fallback);
  EXPECT_EQ(c.algo, Algo::kTree);
}

}  // namespace
}  // namespace loom
