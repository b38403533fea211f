// OpTracker: what it records, and that a reader never sees half a record
// while operations go on.
#include "comm/status_port.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace loom {
namespace {

CollArgs Args(OpKind kind, size_t count, int root) {
  CollArgs a;
  a.kind = kind;
  a.count = count;
  a.type = DataType::kBfloat16;
  a.op = RedOp::kMax;
  a.root = root;
  return a;
}

TEST(OpTracker, RecordsTheLastStartedAndCompletedOperation) {
  OpTracker t;
  OpTracker::Record st, co;
  t.Snapshot(&st, &co);
  EXPECT_EQ(st.seq, 0u);
  EXPECT_EQ(co.seq, 0u);
  const auto now = std::chrono::steady_clock::now();
  const uint64_t first = t.Started(Args(OpKind::kBroadcast, 7, 3), now);
  t.Completed(first, Args(OpKind::kBroadcast, 7, 3));
  const uint64_t second = t.Started(Args(OpKind::kSendRecv, 9, 2));
  EXPECT_EQ(second, first + 1);
  t.Snapshot(&st, &co);
  EXPECT_EQ(st.seq, second);
  EXPECT_EQ(st.kind, OpKind::kSendRecv);
  EXPECT_EQ(st.count, 9u);
  EXPECT_EQ(st.type, DataType::kBfloat16);
  EXPECT_EQ(st.op, RedOp::kMax);
  EXPECT_EQ(st.root, -1);
  EXPECT_EQ(st.peer, 2);
  EXPECT_EQ(co.seq, first);
  EXPECT_EQ(co.kind, OpKind::kBroadcast);
  EXPECT_EQ(co.root, 3);
  EXPECT_EQ(co.peer, -1);
  EXPECT_GE(co.at, now - std::chrono::milliseconds(100));  // CoarseNow lags by a tick
}

// A torn copy would pair one operation's sequence number with another's
// count: each started record here has count == 10 * seq.
TEST(OpTracker, SnapshotsAreWholeRecordsWhileOperationsRun) {
  OpTracker t;
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint64_t seq = 1; !stop.load(std::memory_order_relaxed); ++seq) {
      t.Completed(t.Started(Args(OpKind::kAllReduce, 10 * seq, 0)),
                  Args(OpKind::kAllReduce, 10 * seq, 0));
    }
  });
  uint64_t last = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (last < 20000 && std::chrono::steady_clock::now() < give_up) {
    OpTracker::Record st, co;
    t.Snapshot(&st, &co);
    ASSERT_EQ(st.count, 10 * st.seq);
    ASSERT_EQ(co.count, 10 * co.seq);
    ASSERT_GE(st.seq, last);
    ASSERT_LE(co.seq, st.seq);
    last = st.seq;
  }
  stop.store(true);
  writer.join();
  EXPECT_GE(last, 20000u);  // the writer ran while we read
}

}  // namespace
}  // namespace loom
