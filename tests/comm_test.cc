// Communicator behaviour beyond data correctness: bad arguments, groups,
// split, non-blocking work, abort, timeouts, strangers and stale ids.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/algos/algorithms.h"
#include "tests/harness.h"

namespace loom::testing {
namespace {

using std::chrono::milliseconds;

TEST(Comm, InvalidArgumentsAreNamedNotCrashes) {
  RunRanks(2, [](Communicator& c) {
    float x[4] = {};
    Status s = c.AllReduce(nullptr, x, 4, DataType::kFloat32, RedOp::kSum);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("send buffer is null"), std::string::npos) << s.message();
    s = c.AllReduce(x, x, 4, static_cast<DataType>(42), RedOp::kSum);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("datatype"), std::string::npos) << s.message();
    s = c.AllReduce(x, x, 4, DataType::kFloat32, static_cast<RedOp>(9));
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    s = c.Broadcast(x, x, 4, DataType::kFloat32, 7);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("root 7"), std::string::npos) << s.message();
    s = c.AllGather(x, x, SIZE_MAX / 2, DataType::kFloat32);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("overflow"), std::string::npos) << s.message();
    s = c.Send(x, 1, DataType::kFloat32, 5);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("peer 5"), std::string::npos) << s.message();
    // Null buffers with count 0 are fine, and the communicator still works.
    EXPECT_TRUE(c.AllReduce(nullptr, nullptr, 0, DataType::kFloat32, RedOp::kSum).ok());
    x[0] = 1;
    ASSERT_TRUE(c.AllReduce(x, x, 1, DataType::kFloat32, RedOp::kSum).ok());
    EXPECT_EQ(x[0], 2.0f);
  });
}

TEST(Comm, CreateRejectsBadRankAndSize) {
  auto id = UniqueId::Create();
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(Communicator::Create(id.value(), 3, 2).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Communicator::Create(id.value(), 0, 0).status().code(), Code::kInvalidArgument);
  UniqueId garbage;
  EXPECT_EQ(Communicator::Create(garbage, 0, 1).status().code(), Code::kInvalidArgument);
}

// An out-of-range setting (here a FIFO of no bytes) is refused before
// anything waits, naming the variable and its range.
TEST(Comm, AnOutOfRangeSettingFailsCreateAtOnceNamingIt) {
  setenv("NCCL_BUFFSIZE", "0", 1);
  auto id = UniqueId::Create();
  ASSERT_TRUE(id.ok());
  // Rank 1 never comes: waiting for it would end in kTimeout, not this.
  auto comm = Communicator::Create(id.value(), 0, 2);
  unsetenv("NCCL_BUFFSIZE");
  EXPECT_EQ(comm.status().code(), Code::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("NCCL_BUFFSIZE=0 is out of range: accepted 4096 to "),
            std::string::npos)
      << comm.status().ToString();
}

TEST(Comm, UniqueIdRoundTripsThroughText) {
  auto id = UniqueId::Create();
  ASSERT_TRUE(id.ok());
  auto back = UniqueId::Parse(id->ToString());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->bytes, id->bytes);
}

TEST(Comm, GroupedSendRecvRingDoesNotDeadlock) {
  RunRanks(4, [](Communicator& c) {
    const int n = c.size(), r = c.rank();
    const size_t count = 1 << 20;  // larger than any FIFO: needs concurrent progress
    std::vector<int32_t> out(count, r), in(count, -1);
    ASSERT_TRUE(GroupStart().ok());
    EXPECT_TRUE(c.Send(out.data(), count, DataType::kInt32, (r + 1) % n).ok());
    EXPECT_TRUE(c.Recv(in.data(), count, DataType::kInt32, (r + n - 1) % n).ok());
    ASSERT_TRUE(GroupEnd().ok());
    EXPECT_EQ(in[0], (r + n - 1) % n);
    EXPECT_EQ(in[count - 1], (r + n - 1) % n);
  });
}

TEST(Comm, AGroupBehindQueuedWorkRunsInIssueOrder) {
  // A one-communicator group runs on the caller's thread only when nothing
  // is queued: here it must wait for the all-reduce issued before it.
  RunRanks(2, [](Communicator& c) {
    const int peer = 1 - c.rank();
    const size_t count = 1 << 18;
    std::vector<int32_t> acc(count, c.rank() + 1), in(count, -1);
    Work w = c.AllReduceAsync(acc.data(), acc.data(), count, DataType::kInt32, RedOp::kSum);
    ASSERT_TRUE(GroupStart().ok());
    EXPECT_TRUE(c.Send(acc.data(), count, DataType::kInt32, peer).ok());
    EXPECT_TRUE(c.Recv(in.data(), count, DataType::kInt32, peer).ok());
    ASSERT_TRUE(GroupEnd().ok());
    EXPECT_TRUE(w.Test());
    EXPECT_EQ(in[0], 3);
    EXPECT_EQ(in[count - 1], 3);
  });
}

TEST(Comm, AGroupOverTwoCommunicatorsListedInEitherOrderCompletes) {
  // Each communicator's batch progresses on its own: a rank that lists them
  // in the other order than its peer must not wait for the peer's first.
  RunRanks(2, [](Communicator& c) {
    auto a = c.Split(0, c.rank());
    auto b = c.Split(0, c.rank());
    ASSERT_TRUE(a.ok() && b.ok());
    const int peer = 1 - c.rank();
    const size_t count = 1 << 20;  // larger than any FIFO: each needs its peer
    std::vector<int32_t> out_a(count, 10 + c.rank()), out_b(count, 20 + c.rank());
    std::vector<int32_t> in_a(count, -1), in_b(count, -1);
    Communicator* order[2] = {a->get(), b->get()};
    if (c.rank() == 1) std::swap(order[0], order[1]);
    ASSERT_TRUE(GroupStart().ok());
    for (Communicator* x : order) {
      const bool is_a = x == a->get();
      EXPECT_TRUE(x->Send((is_a ? out_a : out_b).data(), count, DataType::kInt32, peer).ok());
      EXPECT_TRUE(x->Recv((is_a ? in_a : in_b).data(), count, DataType::kInt32, peer).ok());
    }
    ASSERT_TRUE(GroupEnd().ok());
    EXPECT_EQ(in_a[count - 1], 10 + peer);
    EXPECT_EQ(in_b[count - 1], 20 + peer);
  });
}

TEST(Comm, MismatchedSendRecvCountsAreAnError) {
  RunRanks(2, [](Communicator& c) {
    std::vector<char> buf(100);
    Status s = c.rank() == 0 ? c.Send(buf.data(), 10, DataType::kUint8, 1)
                             : c.Recv(buf.data(), 20, DataType::kUint8, 0);
    if (c.rank() == 1) {
      EXPECT_EQ(s.code(), Code::kInvalidUsage) << s.ToString();
      EXPECT_NE(s.message().find("10 bytes"), std::string::npos) << s.message();
    }
    // The receiver's failure is reported to the sender's communicator.
    for (int i = 0; i < 100 && c.AsyncError().ok(); ++i) std::this_thread::sleep_for(milliseconds(20));
    EXPECT_FALSE(c.AsyncError().ok());
    c.Abort();
  });
}

TEST(Comm, MismatchedCollectivesAreNamedNotTimedOut) {
  // Tiny collectives of a one-host communicator use shared-memory slots,
  // larger ones messages: a mismatch within either path or across the two
  // is named (InvalidUsage) well before the timeout, on the rank that sees
  // it; the other learns it as that rank's failure.
  enum Call { kAllReduce, kBroadcast };
  struct Case {
    const char* what;
    Call call0, call1;
    size_t count0, count1;
    const char* rank0_names = nullptr;  // what rank 0's error must say, if anything
  };
  const Case cases[] = {
      {"small counts", kAllReduce, kAllReduce, 2, 4},
      {"small vs large", kAllReduce, kAllReduce, 2, 4096},
      {"large vs small", kAllReduce, kAllReduce, 4096, 2},
      {"a full slot vs one element more", kAllReduce, kAllReduce, 256, 257},
      {"small kinds", kBroadcast, kAllReduce, 2, 2},
      // 96 bytes: the size of the record a 2-rank all-reduce from
      // kSharedDirectMinBytes exchanges through the same slots, to learn
      // whether every rank's buffers are shareable (then it runs Direct).
      {"a small all-reduce vs a large one's addresses", kAllReduce, kAllReduce, 24,
       kSharedDirectMinBytes / sizeof(float),
       "runs an exchange of 96 bytes within a larger AllReduce where this rank runs a small "
       "AllReduce of 96 bytes"},
  };
  for (const Case& k : cases) {
    CommConfig cfg;
    cfg.timeout = milliseconds(20000);
    const auto start = std::chrono::steady_clock::now();
    RunRanks(
        2,
        [&](Communicator& c) {
          const Call call = c.rank() == 0 ? k.call0 : k.call1;
          const size_t count = c.rank() == 0 ? k.count0 : k.count1;
          std::vector<float> in(count, 1.0f), out(count);
          Status s = call == kBroadcast
                         ? c.Broadcast(in.data(), out.data(), count, DataType::kFloat32, 0)
                         : c.AllReduce(in.data(), out.data(), count, DataType::kFloat32,
                                       RedOp::kSum);
          EXPECT_FALSE(s.ok()) << k.what;
          EXPECT_NE(s.code(), Code::kTimeout) << k.what << ": " << s.ToString();
          EXPECT_NE(s.message().find("mismatched operations"), std::string::npos)
              << k.what << ": " << s.ToString();
          if (k.rank0_names != nullptr && c.rank() == 0) {
            EXPECT_NE(s.message().find(k.rank0_names), std::string::npos) << s.ToString();
          }
          c.Abort();
        },
        cfg);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << k.what;
  }
}

TEST(Comm, SmallCollectivesMatchTheMessagePath) {
  // Every collective that fits the shared-memory slots, on 3 ranks, against
  // the same call with LOOM_SHM_SMALL off (messages): identical bits. 16
  // bytes share the slot's first cache line; 1 KiB (kSmallSlotBytes) fills it.
  for (const size_t slot_bytes : {size_t{16}, size_t{1024}})
    for (DataType type : {DataType::kFloat32, DataType::kInt64, DataType::kFloat16}) {
      SCOPED_TRACE(std::to_string(slot_bytes) + " bytes");
      std::vector<std::vector<char>> results[2];
      for (int small = 1; small >= 0; --small) {
        setenv("LOOM_SHM_SMALL", small ? "1" : "0", 1);
        std::vector<std::vector<char>>& got = results[small];
        got.assign(3 * 6, {});
        RunRanks(3, [&](Communicator& c) {
          const int r = c.rank(), n = c.size();
          const size_t es = SizeOf(type), count = slot_bytes / es;
          std::vector<char> in(n * count * es), out(n * count * es);
          loom::testing::FillInput(in.data(), n * count, type, r, 0, RedOp::kSum);
          auto keep = [&](int i, size_t bytes) {
            got[r * 6 + i].assign(out.begin(), out.begin() + static_cast<long>(bytes));
            std::fill(out.begin(), out.end(), 0);
          };
          ASSERT_TRUE(c.AllReduce(in.data(), out.data(), count, type, RedOp::kSum).ok());
          keep(0, count * es);
          ASSERT_TRUE(c.Reduce(in.data(), out.data(), count, type, RedOp::kMax, 1).ok());
          keep(1, r == 1 ? count * es : 0);
          ASSERT_TRUE(c.Broadcast(in.data(), out.data(), count, type, 2).ok());
          keep(2, count * es);
          ASSERT_TRUE(c.AllGather(in.data(), out.data(), count, type).ok());
          keep(3, n * count * es);
          // 3 x the block is the input, and fits one slot.
          const size_t rs = (slot_bytes == 16 ? 8 : slot_bytes / 3 / 8 * 8) / es;
          ASSERT_TRUE(c.ReduceScatter(in.data(), out.data(), rs, type, RedOp::kSum).ok());
          keep(4, rs * es);
          std::copy(in.begin(), in.end(), out.begin());  // in place
          ASSERT_TRUE(c.AllReduce(out.data(), out.data(), count, type, RedOp::kAvg).ok());
          keep(5, count * es);
          ASSERT_TRUE(c.Barrier().ok());
        });
      }
      unsetenv("LOOM_SHM_SMALL");
      for (size_t i = 0; i < results[0].size(); ++i) {
        EXPECT_EQ(results[1][i], results[0][i]) << "rank " << i / 6 << " call " << i % 6;
      }
    }
}

TEST(Comm, SplitFormsOrderedSubCommunicators) {
  RunRanks(5, [](Communicator& c) {
    const int color = c.rank() % 2;
    const int key = -c.rank();  // reverse order inside each color
    auto sub = c.Split(c.rank() == 4 ? kSplitNoColor : color, key);
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    if (c.rank() == 4) {
      EXPECT_EQ(sub.value(), nullptr);
      return;
    }
    Communicator& s = *sub.value();
    EXPECT_EQ(s.size(), 2);
    // color 0: ranks {0,2} reversed -> 2 is new rank 0; color 1: {1,3} -> 3 first
    const int expected_rank = (c.rank() == 2 || c.rank() == 3) ? 0 : 1;
    EXPECT_EQ(s.rank(), expected_rank);
    int v = c.rank();
    int sum = 0;
    ASSERT_TRUE(s.AllReduce(&v, &sum, 1, DataType::kInt32, RedOp::kSum).ok());
    EXPECT_EQ(sum, color == 0 ? 0 + 2 : 1 + 3);
    EXPECT_TRUE(s.Finalize().ok());
  });
}

TEST(Comm, AsyncWorkCompletesInIssueOrder) {
  RunRanks(3, [](Communicator& c) {
    std::vector<std::vector<int32_t>> bufs(20, std::vector<int32_t>(1000));
    std::vector<Work> works;
    for (size_t k = 0; k < bufs.size(); ++k) {
      std::fill(bufs[k].begin(), bufs[k].end(), static_cast<int32_t>(k + c.rank()));
      works.push_back(c.AllReduceAsync(bufs[k].data(), bufs[k].data(), 1000, DataType::kInt32,
                                       RedOp::kSum));
    }
    for (size_t k = 0; k < works.size(); ++k) {
      ASSERT_TRUE(works[k].Wait(Deadline::After(milliseconds(30000))).ok());
      EXPECT_TRUE(works[k].Test());
      EXPECT_EQ(bufs[k][999], static_cast<int32_t>(3 * k + 3));
    }
    ASSERT_TRUE(c.Barrier().ok());
  });
}

TEST(Comm, WaitingOnAnOpDeepInTheQueueRunsItAndEveryOpBeforeIt) {
  // A waiter runs the queued ops itself, a batch at a time up to the op it
  // waits for: here that op lies beyond the first batch (32 ops), and the
  // ops after it are left for the worker or the next waiter.
  RunRanks(2, [](Communicator& c) {
    constexpr int kOps = 100, kTarget = 70;
    std::vector<int32_t> in(kOps), out(kOps, -1);
    std::vector<Work> works;
    for (int k = 0; k < kOps; ++k) {
      in[k] = k * (c.rank() + 1);
      works.push_back(c.AllReduceAsync(&in[k], &out[k], 1, DataType::kInt32, RedOp::kSum));
    }
    ASSERT_TRUE(works[kTarget].Wait(Deadline::After(milliseconds(30000))).ok());
    for (int k = 0; k <= kTarget; ++k) {
      EXPECT_TRUE(works[k].Test()) << "op " << k;
      EXPECT_EQ(out[k], 3 * k) << "op " << k;
    }
    ASSERT_TRUE(works.back().Wait(Deadline::After(milliseconds(30000))).ok());
    for (int k = 0; k < kOps; ++k) {
      EXPECT_TRUE(works[k].Wait().ok());
      EXPECT_EQ(out[k], 3 * k) << "op " << k;
    }
  });
}

TEST(Comm, TheWorkerRunsOpsNobodyWaitsForAfterEverySleep) {
  // Nobody calls Wait here, so only the worker runs the ops: it must be
  // woken for each burst after it went back to sleep (it is woken once per
  // sleep, not by every op), also when a blocking call held the claim to
  // execute as the burst was queued.
  RunRanks(2, [](Communicator& c) {
    const int rounds = std::getenv("LOOM_TEST_QUICK") != nullptr ? 10 : 40;
    for (int round = 0; round < rounds; ++round) {
      const int burst = 1 + round % 5;
      std::vector<int32_t> in(burst), out(burst, -1);
      std::vector<Work> works;
      for (int k = 0; k < burst; ++k) {
        in[k] = (round + k) * (c.rank() + 1);
        works.push_back(c.AllReduceAsync(&in[k], &out[k], 1, DataType::kInt32, RedOp::kSum));
        if (round % 4 == 3 && k == 0) {
          int32_t one = 1, two = 0;  // a blocking call behind the first op
          ASSERT_TRUE(c.AllReduce(&one, &two, 1, DataType::kInt32, RedOp::kSum).ok());
          EXPECT_EQ(two, 2);
        }
      }
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!works.back().Test()) {
        ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "round " << round;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      for (int k = 0; k < burst; ++k) {
        EXPECT_TRUE(works[k].Test()) << "round " << round << " op " << k;
        EXPECT_EQ(out[k], 3 * (round + k)) << "round " << round << " op " << k;
      }
      // Long enough for the worker to go back to sleep.
      std::this_thread::sleep_for(milliseconds(2));
    }
  });
}

TEST(Comm, ABlockingCallBehindQueuedWorkRunsAfterIt) {
  // A blocking call runs on the caller's thread only when nothing is queued
  // or running; the worker may be taking the queued ops at that very moment
  // (the claim to execute is raced for without a lock). Each blocking call
  // reads what the non-blocking ones before it wrote.
  RunRanks(2, [](Communicator& c) {
    const int rounds = std::getenv("LOOM_TEST_QUICK") != nullptr ? 60 : 300;
    for (int round = 0; round < rounds; ++round) {
      const size_t count = round % 3 == 0 ? 4096 : 2;  // the FIFOs, or the small slots
      const int queued = 1 + round % 3;
      std::vector<std::vector<int32_t>> mid(queued, std::vector<int32_t>(count, -1));
      std::vector<int32_t> in(count, c.rank() + 1), out(count, -1);
      std::vector<Work> works;
      for (int q = 0; q < queued; ++q) {
        works.push_back(
            c.AllReduceAsync(in.data(), mid[q].data(), count, DataType::kInt32, RedOp::kSum));
      }
      ASSERT_TRUE(
          c.AllReduce(mid[queued - 1].data(), out.data(), count, DataType::kInt32, RedOp::kSum)
              .ok());
      EXPECT_TRUE(works.back().Test()) << "round " << round;
      EXPECT_EQ(out[0], 6) << "round " << round;
      EXPECT_EQ(out[count - 1], 6) << "round " << round;
      for (Work& w : works) ASSERT_TRUE(w.Wait().ok());
    }
  });
}

TEST(Comm, WaitWithAnEarlyDeadlineTimesOutButTheOpGoesOn) {
  RunRanks(2, [](Communicator& c) {
    int32_t v = 1, out = 0;
    if (c.rank() == 1) std::this_thread::sleep_for(milliseconds(300));
    Work w = c.AllReduceAsync(&v, &out, 1, DataType::kInt32, RedOp::kSum);
    if (c.rank() == 0) {
      EXPECT_EQ(w.Wait(Deadline::After(milliseconds(50))).code(), Code::kTimeout);
    }
    EXPECT_TRUE(w.Wait().ok());
    EXPECT_EQ(out, 2);
  });
}

// Threads asleep on one Work (its completion state's futex) are all woken
// when the op completes, and all read its status.
TEST(Comm, EveryThreadWaitingOnOneWorkWakesWhenItCompletes) {
  RunRanks(2, [](Communicator& c) {
    int32_t v = 1, out = 0;
    if (c.rank() == 1) std::this_thread::sleep_for(milliseconds(300));
    Work w = c.AllReduceAsync(&v, &out, 1, DataType::kInt32, RedOp::kSum);
    std::vector<std::thread> waiters;
    std::atomic<int> ok{0};
    for (int t = 0; t < 4; ++t) {
      // One may run the op (HelpUntil); the others sleep until it is done,
      // the peer joining 300 ms late.
      waiters.emplace_back([&] { ok += w.Wait().ok() ? 1 : 0; });
    }
    for (std::thread& t : waiters) t.join();
    EXPECT_EQ(ok.load(), 4);
    EXPECT_EQ(out, 2);
  });
}

// OnComplete: a callback added while the op is pending runs once, on the
// thread that completes it, after Test sees it done; one added afterwards
// runs at once on the caller; an op failed at issue passes its error; a
// callback may issue non-blocking work on the same communicator.
TEST(Comm, OnCompleteCallsBackOnceWithTheStatusWhenTheOpCompletes) {
  RunRanks(2, [](Communicator& c) {
    int32_t v = c.rank() + 1, out = 0;
    if (c.rank() == 1) std::this_thread::sleep_for(milliseconds(200));
    Work w = c.AllReduceAsync(&v, &out, 1, DataType::kInt32, RedOp::kSum);
    std::atomic<int> calls{0};
    std::atomic<bool> saw_done{false};
    std::atomic<int> seen_out{-1};
    std::vector<int> order;
    std::mutex order_mu;
    ASSERT_TRUE(w.OnComplete([&](const Status& s) {
                   EXPECT_TRUE(s.ok()) << s.ToString();
                   saw_done = w.Test();
                   seen_out = out;
                   std::lock_guard<std::mutex> lock(order_mu);
                   order.push_back(1);
                   ++calls;
                 }).ok());
    ASSERT_TRUE(w.OnComplete([&](const Status&) {
                   std::lock_guard<std::mutex> lock(order_mu);
                   order.push_back(2);
                 }).ok());
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (calls.load() == 0) {  // nobody waits: the worker completes it
      ASSERT_LT(std::chrono::steady_clock::now(), give_up);
      std::this_thread::sleep_for(milliseconds(1));
    }
    ASSERT_TRUE(w.Wait().ok());
    EXPECT_TRUE(saw_done.load());
    EXPECT_EQ(seen_out.load(), 3);
    {
      std::lock_guard<std::mutex> lock(order_mu);
      EXPECT_EQ(order, (std::vector<int>{1, 2}));
    }
    const std::thread::id me = std::this_thread::get_id();
    std::thread::id ran_on;
    ASSERT_TRUE(w.OnComplete([&](const Status& s) {
                   EXPECT_TRUE(s.ok());
                   ran_on = std::this_thread::get_id();
                   ++calls;
                 }).ok());
    EXPECT_EQ(ran_on, me);
    EXPECT_EQ(calls.load(), 2);

    float x = 0;
    Work bad = c.BroadcastAsync(&x, &x, 1, DataType::kFloat32, 9);
    Code got = Code::kOk;
    ASSERT_TRUE(bad.OnComplete([&](const Status& s) { got = s.code(); }).ok());
    EXPECT_EQ(got, Code::kInvalidArgument);
    EXPECT_EQ(Work().OnComplete([](const Status&) {}).code(), Code::kInvalidUsage);
    EXPECT_EQ(w.OnComplete(nullptr).code(), Code::kInvalidArgument);

    // A callback issues the next op: a chain of non-blocking all-reduces.
    int32_t a = 1, b = 0;
    Work second;
    std::atomic<bool> issued{false};
    Work first = c.AllReduceAsync(&a, &a, 1, DataType::kInt32, RedOp::kSum);
    ASSERT_TRUE(first.OnComplete([&](const Status& s) {
                   ASSERT_TRUE(s.ok());
                   second = c.AllReduceAsync(&a, &b, 1, DataType::kInt32, RedOp::kSum);
                   issued = true;
                 }).ok());
    ASSERT_TRUE(first.Wait().ok());
    while (!issued.load()) std::this_thread::yield();
    ASSERT_TRUE(second.Wait(Deadline::After(milliseconds(30000))).ok());
    EXPECT_EQ(a, 2);
    EXPECT_EQ(b, 4);
  });
}

// A callback sees the error of an op that fails after it was added.
TEST(Comm, OnCompletePassesTheErrorOfAnAbortedOp) {
  RunRanks(2, [](Communicator& c) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(milliseconds(500));
      c.Abort();
      return;
    }
    int32_t v = 1;
    Work w = c.AllReduceAsync(&v, &v, 1, DataType::kInt32, RedOp::kSum);
    std::atomic<int> code{-1};
    ASSERT_TRUE(w.OnComplete([&](const Status& s) { code = static_cast<int>(s.code()); }).ok());
    std::this_thread::sleep_for(milliseconds(100));
    c.Abort();
    EXPECT_EQ(w.Wait().code(), Code::kRemoteError);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (code.load() == -1 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    EXPECT_EQ(code.load(), static_cast<int>(Code::kRemoteError));
  });
}

TEST(Comm, AbortFromAnotherThreadEndsAPendingCollective) {
  RunRanks(2, [](Communicator& c) {
    if (c.rank() == 1) {
      // Never joins the collective; waits for rank 0 to give up.
      std::this_thread::sleep_for(milliseconds(800));
      c.Abort();
      return;
    }
    int32_t v = 1;
    std::thread aborter([&] {
      std::this_thread::sleep_for(milliseconds(200));
      c.Abort();
    });
    auto start = std::chrono::steady_clock::now();
    Status s = c.AllReduce(&v, &v, 1, DataType::kInt32, RedOp::kSum);
    aborter.join();
    EXPECT_EQ(s.code(), Code::kRemoteError) << s.ToString();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_FALSE(c.AsyncError().ok());
    // Later operations fail at once with the sticky error.
    EXPECT_FALSE(c.Barrier().ok());
  });
}

TEST(Comm, TimeoutNamesTheSilentPeer) {
  CommConfig cfg;
  cfg.timeout = milliseconds(500);
  RunRanks(
      2,
      [](Communicator& c) {
        if (c.rank() == 1) {
          std::this_thread::sleep_for(milliseconds(1500));
          c.Abort();
          return;
        }
        int32_t v = 1;
        Status s = c.AllReduce(&v, &v, 1, DataType::kInt32, RedOp::kSum);
        EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
        EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
        c.Abort();
      },
      cfg);
}

TEST(Comm, ForeignUniqueIdIsRefusedClearly) {
  auto id = UniqueId::Create();
  ASSERT_TRUE(id.ok());
  // Same address, wrong secret: a stale or foreign job.
  std::string text = id->ToString();
  text.back() = text.back() == '0' ? '1' : '0';
  auto foreign = UniqueId::Parse(text);
  ASSERT_TRUE(foreign.ok());
  CommConfig cfg;
  cfg.timeout = milliseconds(3000);
  auto comm = Communicator::Create(foreign.value(), 0, 1, cfg);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("secret"), std::string::npos) << comm.status().message();
}

TEST(Comm, UnreachableStoreTimesOut) {
  auto id = UniqueId::FromAddress("127.0.0.1:9", 1);  // discard port: nothing listens
  ASSERT_TRUE(id.ok());
  CommConfig cfg;
  cfg.timeout = milliseconds(500);
  auto start = std::chrono::steady_clock::now();
  auto comm = Communicator::Create(id.value(), 1, 2, cfg);
  EXPECT_EQ(comm.status().code(), Code::kTimeout) << comm.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Comm, MissingRankTimesOutAtCreate) {
  auto id = UniqueId::Create();
  ASSERT_TRUE(id.ok());
  CommConfig cfg;
  cfg.timeout = milliseconds(500);
  auto comm = Communicator::Create(id.value(), 0, 3, cfg);  // ranks 1 and 2 never come
  EXPECT_EQ(comm.status().code(), Code::kTimeout) << comm.status().ToString();
  EXPECT_NE(comm.status().message().find("rank(s) 1,2 never connected"), std::string::npos)
      << comm.status().message();
}

TEST(Comm, AllToAllInPlace) {
  RunRanks(3, [](Communicator& c) {
    std::vector<int32_t> b(6);
    for (int j = 0; j < 6; ++j) b[j] = 10 * c.rank() + j;  // block j/2 goes to rank j/2
    ASSERT_TRUE(c.AllToAll(b.data(), b.data(), 2, DataType::kInt32).ok());
    for (int src = 0; src < 3; ++src) {
      EXPECT_EQ(b[2 * src], 10 * src + 2 * c.rank());
      EXPECT_EQ(b[2 * src + 1], 10 * src + 2 * c.rank() + 1);
    }
  });
}

// A float buffer from AllocShared or from the heap; aborts the process if
// the shared allocation fails (the test cannot go on without it).
class Floats {
 public:
  Floats(size_t n, bool shared) : shared_(shared) {
    if (shared) {
      auto p = AllocShared(n * sizeof(float));
      if (!p.ok()) {
        std::fprintf(stderr, "AllocShared: %s\n", p.status().ToString().c_str());
        std::abort();
      }
      p_ = static_cast<float*>(*p);
    } else {
      heap_.resize(n);
      p_ = heap_.data();
    }
  }
  ~Floats() {
    if (shared_) {
      EXPECT_TRUE(FreeShared(p_).ok());
    }
  }
  Floats(const Floats&) = delete;
  Floats& operator=(const Floats&) = delete;
  float& operator[](size_t i) { return p_[i]; }
  float* data() { return p_; }

 private:
  bool shared_;
  float* p_ = nullptr;
  std::vector<float> heap_;
};

// Large collectives of two ranks whose buffers are shareable on both switch
// to the Direct algorithms after an exchange; with shareable buffers on one
// rank only, both keep the chosen algorithm; three ranks never ask. All of
// it must be right and must not hang.
TEST(Comm, SharedBuffersOnEveryOrSomeRanks) {
  constexpr size_t kCount = kSharedDirectMinBytes / sizeof(float) + 7;  // just above the threshold
  for (auto [n, everyone] : {std::pair{2, true}, std::pair{2, false}, std::pair{3, true}}) {
    RunRanks(n, [&, n = n, everyone = everyone](Communicator& c) {
      const int r = c.rank();
      const bool shared = everyone || r == 0;
      Floats send(n * kCount, shared), recv(n * kCount, shared);
      for (size_t i = 0; i < n * kCount; ++i) send[i] = static_cast<float>(r + 1 + i % 7);
      ASSERT_TRUE(c.AllReduce(send.data(), recv.data(), kCount, DataType::kFloat32,
                              RedOp::kSum).ok());
      for (size_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(recv[i], static_cast<float>(n * (n + 1) / 2 + n * (i % 7)))
            << "all-reduce element " << i;
      }
      ASSERT_TRUE(c.AllGather(send.data(), recv.data(), kCount, DataType::kFloat32).ok());
      for (size_t i = 0; i < n * kCount; ++i) {
        const size_t from = i / kCount, j = i % kCount;
        ASSERT_EQ(recv[i], static_cast<float>(from + 1 + j % 7)) << "all-gather element " << i;
      }
      ASSERT_TRUE(c.ReduceScatter(send.data(), recv.data(), kCount, DataType::kFloat32,
                                  RedOp::kMax).ok());
      for (size_t i = 0; i < kCount; ++i) {
        const size_t j = r * kCount + i;
        ASSERT_EQ(recv[i], static_cast<float>(n + j % 7)) << "reduce-scatter element " << i;
      }
    });
  }
}

TEST(Comm, SendToSelfInAGroupIsACopy) {
  RunRanks(2, [](Communicator& c) {
    int32_t out = 7 + c.rank(), in = 0;
    ASSERT_TRUE(GroupStart().ok());
    EXPECT_TRUE(c.Send(&out, 1, DataType::kInt32, c.rank()).ok());
    EXPECT_TRUE(c.Recv(&in, 1, DataType::kInt32, c.rank()).ok());
    ASSERT_TRUE(GroupEnd().ok());
    EXPECT_EQ(in, out);
  });
}

}  // namespace
}  // namespace loom::testing

