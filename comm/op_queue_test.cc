// OpQueue: issue order, one executor at a time, waiters that run the queue,
// blocking claims, Drain, Close, and ops that never ran.
#include "comm/op_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace loom {
namespace {

using namespace std::chrono_literals;

// Records which op ran (its count) and on which thread, and checks that no
// two run at once.
struct Recorder {
  std::mutex mu;
  std::vector<size_t> order;
  std::vector<std::thread::id> threads;
  std::atomic<int> running{0};
  std::atomic<int> overlaps{0};
  std::atomic<bool> gate{true};  // ops wait while false

  OpQueue::RunFn Fn() {
    return [this](Work::State& op) {
      if (running.fetch_add(1) != 0) overlaps.fetch_add(1);
      while (!gate.load()) std::this_thread::sleep_for(1ms);
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(op.one.count);
        threads.push_back(std::this_thread::get_id());
      }
      running.fetch_sub(1);
      op.Finish(Status::Ok());
    };
  }
};

Work Issue(OpQueue& q, size_t n) {
  OpQueue::Op op = OpQueue::NewOp();
  op->one.count = n;
  return q.Enqueue(std::move(op));
}

TEST(OpQueue, RunsOpsInIssueOrderOneAtATime) {
  Recorder rec;
  OpQueue q(rec.Fn(), 0ms);
  q.Start();
  std::vector<Work> works;
  for (size_t i = 0; i < 500; ++i) works.push_back(Issue(q, i));
  for (const Work& w : works) EXPECT_TRUE(w.Wait().ok());
  ASSERT_EQ(rec.order.size(), 500u);
  for (size_t i = 0; i < 500; ++i) EXPECT_EQ(rec.order[i], i);
  EXPECT_EQ(rec.overlaps.load(), 0);
}

TEST(OpQueue, AWaiterRunsTheQueueItselfWithoutAWorker) {
  Recorder rec;
  OpQueue q(rec.Fn(), 0ms);  // never started: only helping waiters run ops
  Work a = Issue(q, 1);
  Work b = Issue(q, 2);
  Work c = Issue(q, 3);
  EXPECT_TRUE(b.Wait().ok());  // runs 1 and 2, not 3: the caller wants to go on
  EXPECT_TRUE(a.Test());
  EXPECT_FALSE(c.Test());
  EXPECT_EQ(rec.order, (std::vector<size_t>{1, 2}));
  EXPECT_TRUE(c.Wait().ok());
  for (std::thread::id t : rec.threads) EXPECT_EQ(t, std::this_thread::get_id());
}

TEST(OpQueue, TheBlockingClaimOnlyWhenNothingIsQueuedOrRunning) {
  Recorder rec;
  OpQueue q(rec.Fn(), 0ms);
  ASSERT_TRUE(q.ClaimIfIdle());
  EXPECT_FALSE(q.ClaimIfIdle());  // one executor
  Work queued = Issue(q, 7);      // queued while the claim is held
  q.Release();
  EXPECT_FALSE(q.ClaimIfIdle());  // the queued op goes first
  EXPECT_TRUE(queued.Wait().ok());
  EXPECT_TRUE(q.ClaimIfIdle());
  q.Release();
}

TEST(OpQueue, DrainWaitsForQueuedAndRunningOps) {
  Recorder rec;
  rec.gate = false;
  OpQueue q(rec.Fn(), 0ms);
  q.Start();
  const Work first = Issue(q, 1);
  const Work second = Issue(q, 2);
  uint64_t pending = 0;
  EXPECT_FALSE(q.Drain(Deadline::After(20ms), &pending));
  EXPECT_GE(pending, 1u);
  rec.gate = true;
  EXPECT_TRUE(q.Drain(Deadline::After(10s), &pending));
  EXPECT_EQ(pending, 0u);
  EXPECT_EQ(rec.order, (std::vector<size_t>{1, 2}));
}

// The worker defers to a thread that keeps queueing small ops (it will
// likely wait and run them itself), but an op whose issuer went on to do
// something else still runs.
TEST(OpQueue, TheWorkerRunsWhatAnIssuerLeavesWithoutWaiting) {
  Recorder rec;
  OpQueue q(rec.Fn(), 0ms);
  q.Start();
  const Work w = Issue(q, 1);  // quick: 4 bytes
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!w.Test() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(w.Test());  // Test() never runs ops itself
  ASSERT_EQ(rec.threads.size(), 1u);
  EXPECT_NE(rec.threads[0], std::this_thread::get_id());
}

TEST(OpQueue, ClosedRefusesAndDestructionFailsWhatNeverRan) {
  Recorder rec;
  Work never;
  {
    OpQueue q(rec.Fn(), 0ms);  // no worker: nothing runs
    never = Issue(q, 1);
    EXPECT_TRUE(q.Close());
    EXPECT_FALSE(q.Close());
    Work refused = Issue(q, 2);
    ASSERT_TRUE(refused.Test());
    EXPECT_NE(refused.Wait().message().find("after Finalize"), std::string::npos);
    EXPECT_FALSE(q.ClaimIfIdle());
    EXPECT_FALSE(never.Test());
  }
  ASSERT_TRUE(never.Test());
  EXPECT_EQ(never.Wait().code(), Code::kRemoteError);
  EXPECT_TRUE(rec.order.empty());
}

}  // namespace
}  // namespace loom
