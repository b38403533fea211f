// Dispatcher: argument checks, and operations run end to end on a
// communicator of one rank (an engine without peers), where every
// collective is a copy and kAvg and PreMulSum still go through the rewrite.
#include "comm/dispatch.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace loom {
namespace {

CollArgs Args(OpKind kind, const void* send, void* recv, size_t count, RedOp op = RedOp::kSum) {
  CollArgs a;
  a.kind = kind;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.type = DataType::kFloat32;
  a.op = op;
  return a;
}

class OneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::unique_ptr<Connection>> none(1);
    engine_ = std::make_unique<Engine>(Engine::Options{}, std::move(none));
    Dispatcher::Parts parts;
    parts.engine = engine_.get();
    parts.abort = &abort_;
    parts.host = "here";
    dispatch_.Attach(std::move(parts));
  }
  std::atomic<bool> abort_{false};
  std::unique_ptr<Engine> engine_;
  Dispatcher dispatch_;
};

TEST_F(OneRank, EveryCollectiveIsACopyAndKAvgDividesByOne) {
  const std::vector<float> in{1, 2, 3, 4};
  for (OpKind kind : {OpKind::kAllReduce, OpKind::kReduceScatter, OpKind::kAllGather,
                      OpKind::kBroadcast, OpKind::kReduce, OpKind::kAllToAll}) {
    for (RedOp op : {RedOp::kSum, RedOp::kAvg, RedOp::kMax}) {
      std::vector<float> out(4, -1);
      const CollArgs a = Args(kind, in.data(), out.data(), 4, op);
      ASSERT_TRUE(dispatch_.Validate(a).ok()) << OpKindName(kind);
      const Status s = dispatch_.Execute({&a, 1});
      ASSERT_TRUE(s.ok()) << OpKindName(kind) << ": " << s.ToString();
      EXPECT_EQ(out, in) << OpKindName(kind) << " " << Name(op);
    }
  }
}

TEST_F(OneRank, APreMulSumIsScaledOnce) {
  const std::vector<float> in{1, 2, 3, 4};
  std::vector<float> out(4, 0);
  CollArgs a = Args(OpKind::kAllReduce, in.data(), out.data(), 4);
  a.premul = true;
  a.scalar.type = DataType::kFloat32;
  const float half = 0.5f;
  std::memcpy(a.scalar.value, &half, sizeof half);
  ASSERT_TRUE(dispatch_.Validate(a).ok());
  ASSERT_TRUE(dispatch_.Execute({&a, 1}).ok());
  EXPECT_EQ(out, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  EXPECT_EQ(in, (std::vector<float>{1, 2, 3, 4}));
}

TEST_F(OneRank, TheTrackerCountsEveryOperation) {
  const std::vector<float> in{1};
  std::vector<float> out(1);
  const CollArgs a = Args(OpKind::kAllReduce, in.data(), out.data(), 1);
  const CollArgs batch[] = {a, a, a};
  ASSERT_TRUE(dispatch_.Execute(batch).ok());
  OpTracker::Record started, completed;
  dispatch_.tracker.Snapshot(&started, &completed);
  EXPECT_EQ(started.seq, 3u);  // numbered from 1
  EXPECT_EQ(completed.seq, 3u);
}

TEST(Dispatcher, ValidateNamesWhatIsWrong) {
  Dispatcher d;
  Dispatcher::Parts parts;
  parts.rank = 1;
  parts.size = 4;
  d.Attach(std::move(parts));
  float x = 0;
  auto message = [&](const CollArgs& a) { return d.Validate(a).message(); };
  EXPECT_TRUE(d.Validate(Args(OpKind::kAllReduce, &x, &x, 1)).ok());
  EXPECT_NE(message(Args(OpKind::kAllReduce, nullptr, &x, 1)).find("send buffer is null"),
            std::string::npos);
  EXPECT_NE(message(Args(OpKind::kAllGather, &x, nullptr, 1)).find("receive buffer is null"),
            std::string::npos);
  CollArgs bcast = Args(OpKind::kBroadcast, nullptr, &x, 1);
  bcast.root = 0;  // only the root sends
  EXPECT_TRUE(d.Validate(bcast).ok());
  bcast.root = 4;
  EXPECT_NE(message(bcast).find("root 4 is not a rank of this communicator of 4"),
            std::string::npos);
  CollArgs self = Args(OpKind::kSendRecv, &x, nullptr, 1);
  self.root = 1;
  EXPECT_NE(message(self).find("only works inside GroupStart/GroupEnd"), std::string::npos);
  CollArgs premul = Args(OpKind::kAllReduce, &x, &x, 1, RedOp::kMax);
  premul.premul = true;
  EXPECT_NE(message(premul).find("reduces with sum"), std::string::npos);
  EXPECT_NE(message(Args(OpKind::kAllGather, &x, &x, SIZE_MAX / 2)).find("overflows"),
            std::string::npos);
}

}  // namespace
}  // namespace loom
