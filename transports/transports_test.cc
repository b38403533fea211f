// Transports as two ranks in one process (threads): shm and TCP pairs carry
// messages of awkward sizes, reduce on receive, honour gates, and report a
// mismatched message or a vanished peer by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "transports/test_reduce.h"
#include "transports/engine.h"
#include "transports/shm/connection.h"
#include "transports/shm/context.h"
#include "transports/streaming.h"
#include "transports/tcp/context.h"

namespace loom {
namespace {

// All-gather among threads of this process.
class ThreadExchange : public Exchange {
 public:
  explicit ThreadExchange(int size) : size_(size) {}
  Result<std::vector<std::string>> AllGather(std::string_view tag, std::string mine,
                                             Deadline deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto& g = gathers_[std::string(tag)];
    g.values.resize(size_);
    g.values[g.count++] = mine;  // order is irrelevant for these tests
    cv_.notify_all();
    if (!cv_.wait_until(lock, deadline.at(), [&] { return g.count >= size_; })) {
      return TimeoutError("exchange");
    }
    return g.values;
  }

 private:
  struct G {
    std::vector<std::string> values;
    int count = 0;
  };
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, G> gathers_;
};

struct Pair {
  std::unique_ptr<ShmContext> shm[2];
  std::unique_ptr<TcpContext> tcp[2];
  std::unique_ptr<Engine> engine[2];
  std::atomic<bool> abort{false};
};

enum class Kind { kShm, kTcp, kTcpStriped };

// small: shared-memory engines also get their small-collective slots.
std::unique_ptr<Pair> MakePair(Kind kind, size_t fifo = 1 << 16, int nsocks = 1,
                               bool small = false) {
  auto p = std::make_unique<Pair>();
  ThreadExchange ex(2);
  static int serial = 0;
  std::string tag = "t" + std::to_string(getpid()) + "-" + std::to_string(serial++);
  std::vector<std::string> hosts = {"h0", "h1"};
  std::vector<int> pids = {getpid(), getpid()};
  std::vector<std::string> addrs(2);
  const bool tcp = kind != Kind::kShm;
  if (kind == Kind::kTcpStriped) nsocks = 3;
  if (tcp) {
    for (int r = 0; r < 2; ++r) {
      auto c = TcpContext::Create("127.0.0.1", "lo", 42);
      EXPECT_TRUE(c.ok()) << c.status().ToString();
      p->tcp[r] = std::move(c).value();
      addrs[r] = p->tcp[r]->address();
    }
  }
  std::thread th[2];
  std::vector<std::unique_ptr<Connection>> conns[2];
  for (int r = 0; r < 2; ++r) {
    th[r] = std::thread([&, r] {
      Deadline d = Deadline::After(std::chrono::seconds(10));
      if (!tcp) {
        auto c = ShmContext::Create(tag, r, fifo);
        ASSERT_TRUE(c.ok()) << c.status().ToString();
        p->shm[r] = std::move(c).value();
        auto cs = p->shm[r]->Connect(ex, {1 - r}, hosts, pids, d);
        ASSERT_TRUE(cs.ok()) << cs.status().ToString();
        conns[r] = std::move(cs).value();
      } else {
        auto cs = p->tcp[r]->Connect(r, {1 - r}, addrs, hosts, nsocks, d);
        ASSERT_TRUE(cs.ok()) << cs.status().ToString();
        conns[r] = std::move(cs).value();
      }
    });
  }
  for (auto& t : th) t.join();
  for (int r = 0; r < 2; ++r) {
    std::vector<std::unique_ptr<Connection>> v(2);
    v[1 - r] = std::move(conns[r][0]);
    Engine::Options o;
    o.rank = r;
    o.spin_us = 20;
    o.doorbell = p->shm[r] ? p->shm[r]->doorbell() : nullptr;
    if (small && p->shm[r]) o.small_slots = p->shm[r]->small_slots();
    o.abort = &p->abort;
    p->engine[r] = std::make_unique<Engine>(o, std::move(v));
  }
  return p;
}

// One send of `bytes` from rank 0 (copying what leaves to copy_to, if set)
// against one receive into dst on rank 1, each on its own thread.
struct SendRecvResult {
  Status send, recv;
  size_t copied = 0;  // the send's copy_to bookkeeping
};
SendRecvResult SendOne(Pair& p, const void* src, void* dst, size_t bytes, void* copy_to = nullptr,
                       bool copy_nontemporal = false) {
  SendRecvResult r;
  std::thread sender([&] {
    Transfer t;
    t.dir = Transfer::Dir::kSend;
    t.peer = 1;
    t.src = src;
    t.bytes = bytes;
    t.copy_to = copy_to;
    t.copy_nontemporal = copy_nontemporal;
    r.send = p.engine[0]->Run({&t, 1}, Deadline::After(std::chrono::seconds(10)));
    r.copied = t.copied;
  });
  Transfer t;
  t.dir = Transfer::Dir::kRecv;
  t.peer = 0;
  t.dst = dst;
  t.bytes = bytes;
  r.recv = p.engine[1]->Run({&t, 1}, Deadline::After(std::chrono::seconds(10)));
  sender.join();
  return r;
}

class TransportTest : public ::testing::TestWithParam<Kind> {};

TEST_P(TransportTest, MessagesOfAwkwardSizesArriveIntact) {
  auto p = MakePair(GetParam());
  for (size_t bytes :
       {size_t{0}, size_t{1}, size_t{7}, size_t{4099}, size_t{65536}, size_t{1 << 20} + 3}) {
    std::vector<uint8_t> a(bytes), b(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) a[i] = static_cast<uint8_t>(i * 31 + 7);
    SendRecvResult r = SendOne(*p, a.data(), b.data(), bytes);
    ASSERT_TRUE(r.send.ok()) << r.send.ToString();
    ASSERT_TRUE(r.recv.ok()) << r.recv.ToString();
    EXPECT_EQ(a, b) << bytes;
  }
}

TEST_P(TransportTest, ASendCopiesWhatLeftIntoCopyTo) {
  // The engine copies a send's bytes to copy_to as they leave: complete when
  // the send is, for sizes below, at and across the FIFO and stripe units,
  // through the cache and streamed (copy_nontemporal, with ragged heads and
  // tails as the pieces leave).
  auto p = MakePair(GetParam());
  for (const bool streamed : {false, true}) {
    for (size_t bytes : {size_t{1}, size_t{65536}, size_t{(1 << 20) + 5}, size_t{(4 << 20) + 77}}) {
      std::vector<uint8_t> a(bytes), copy(bytes, 0), b(bytes, 0);
      for (size_t i = 0; i < bytes; ++i) a[i] = static_cast<uint8_t>(i * 13 + 1);
      SendRecvResult r = SendOne(*p, a.data(), b.data(), bytes, copy.data(), streamed);
      ASSERT_TRUE(r.send.ok()) << r.send.ToString();
      ASSERT_TRUE(r.recv.ok()) << r.recv.ToString();
      EXPECT_EQ(r.copied, bytes);
      EXPECT_EQ(copy, a) << bytes << (streamed ? " streamed" : "");
      EXPECT_EQ(b, a) << bytes;
    }
  }
}

TEST_P(TransportTest, ReceiveReducesAndGatedSendForwards) {
  // Rank 0 sends x; rank 1 receives and adds its y, then (gated on the
  // receive) sends the sum back while it is still arriving. The second size
  // lands with streaming stores (transports/streaming.h): the bytes must be
  // exact. (Receive and gated send run on one engine thread here, so this
  // cannot observe the store fence itself.)
  auto p = MakePair(GetParam());
  for (const size_t n : {size_t{300001}, StreamingMinBytes() / 4 + 1001}) {
    std::vector<float> x(n), y(n), sum(n), back(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(i % 1000);
      y[i] = static_cast<float>((i * 7) % 1000);
    }
    Status s0, s1;
    std::thread t0([&] {
      Transfer t[2];
      t[0].dir = Transfer::Dir::kSend;
      t[0].peer = 1;
      t[0].src = x.data();
      t[0].bytes = n * 4;
      t[1].dir = Transfer::Dir::kRecv;
      t[1].peer = 1;
      t[1].dst = back.data();
      t[1].bytes = n * 4;
      t[1].nontemporal = true;  // streams (copy) above the threshold
      s0 = p->engine[0]->Run(t, Deadline::After(std::chrono::seconds(10)));
    });
    std::thread t1([&] {
      Transfer t[2];
      t[0].dir = Transfer::Dir::kRecv;
      t[0].peer = 0;
      t[0].dst = sum.data();
      t[0].reduce_with = y.data();
      t[0].reduce = &testing::SumInto;
      t[0].type = DataType::kFloat32;
      t[0].op = RedOp::kSum;
      t[0].bytes = n * 4;
      t[0].nontemporal = true;  // streams (reduce) above the threshold; still forwarded
      t[1].dir = Transfer::Dir::kSend;
      t[1].peer = 0;
      t[1].src = sum.data();
      t[1].bytes = n * 4;
      t[1].gate = &t[0];
      s1 = p->engine[1]->Run(t, Deadline::After(std::chrono::seconds(10)));
    });
    t0.join();
    t1.join();
    ASSERT_TRUE(s0.ok()) << s0.ToString();
    ASSERT_TRUE(s1.ok()) << s1.ToString();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], x[i] + y[i]) << n << " bytes, at " << i;
  }
}

TEST_P(TransportTest, MismatchedSizesAreNamed) {
  // Larger and smaller than expected, tiny and not.
  for (auto sizes : {std::pair<size_t, size_t>{100, 200}, {8, 200}, {200, 8}, {8, 16}}) {
    const size_t sent = sizes.first, expected = sizes.second;
    auto p = MakePair(GetParam());
    std::vector<char> a(sent), b(expected);
    std::thread t0([&] {
      Transfer t;
      t.dir = Transfer::Dir::kSend;
      t.peer = 1;
      t.src = a.data();
      t.bytes = sent;
      t.kind = OpKind::kAllReduce;
      (void)p->engine[0]->Run({&t, 1}, Deadline::After(std::chrono::seconds(2)));
    });
    Transfer t;
    t.dir = Transfer::Dir::kRecv;
    t.peer = 0;
    t.dst = b.data();
    t.bytes = expected;
    t.kind = OpKind::kAllGather;
    Status s1 = p->engine[1]->Run({&t, 1}, Deadline::After(std::chrono::seconds(5)));
    t0.join();
    EXPECT_EQ(s1.code(), Code::kInvalidUsage) << sent << " vs " << expected << ": " << s1.ToString();
    EXPECT_NE(s1.message().find("AllReduce"), std::string::npos) << s1.message();
    EXPECT_NE(s1.message().find("rank 0"), std::string::npos) << s1.message();
    EXPECT_NE(s1.message().find(std::to_string(sent) + " bytes"), std::string::npos) << s1.message();
  }
}

TEST_P(TransportTest, SmallAndLargeMessagesInterleavedKeepTheirOrder) {
  // Many messages in flight through a small FIFO (so it wraps, and the
  // sender waits for room), sizes mixed, some reduced on receipt.
  auto p = MakePair(GetParam(), 4096);
  const std::vector<size_t> pattern = {8, 1000, 0, 40, 41, 3, 5000, 16, 16, 16};
  constexpr int kMessages = 200;
  std::vector<std::vector<int32_t>> in(kMessages), out(kMessages), with(kMessages);
  std::vector<Transfer> sends(kMessages), recvs(kMessages);
  for (int m = 0; m < kMessages; ++m) {
    const size_t n = pattern[m % pattern.size()] / sizeof(int32_t);
    in[m].resize(n);
    out[m].assign(n, -1);
    with[m].assign(n, 1000);
    for (size_t i = 0; i < n; ++i) in[m][i] = static_cast<int32_t>(m * 7 + i);
    sends[m].dir = Transfer::Dir::kSend;
    sends[m].peer = 1;
    sends[m].src = in[m].data();
    sends[m].bytes = n * sizeof(int32_t);
    recvs[m].dir = Transfer::Dir::kRecv;
    recvs[m].peer = 0;
    recvs[m].dst = out[m].data();
    recvs[m].bytes = n * sizeof(int32_t);
    recvs[m].type = DataType::kInt32;
    if (m % 3 == 0) {  // dst = with + incoming
      recvs[m].reduce_with = with[m].data();
      recvs[m].reduce = &testing::SumInto;
      recvs[m].op = RedOp::kSum;
    }
  }
  Status s0;
  std::thread t0([&] { s0 = p->engine[0]->Run(sends, Deadline::After(std::chrono::seconds(10))); });
  Status s1 = p->engine[1]->Run(recvs, Deadline::After(std::chrono::seconds(10)));
  t0.join();
  ASSERT_TRUE(s0.ok()) << s0.ToString();
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  for (int m = 0; m < kMessages; ++m) {
    for (size_t i = 0; i < in[m].size(); ++i) {
      ASSERT_EQ(out[m][i], in[m][i] + (m % 3 == 0 ? 1000 : 0)) << "message " << m << " [" << i << "]";
    }
  }
}

TEST_P(TransportTest, DeadlineEndsAWaitForASilentPeer) {
  auto p = MakePair(GetParam());
  std::vector<char> b(10);
  Transfer t;
  t.dir = Transfer::Dir::kRecv;
  t.peer = 0;
  t.dst = b.data();
  t.bytes = 10;
  Status s = p->engine[1]->Run({&t, 1}, Deadline::After(std::chrono::milliseconds(200)));
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("rank 0"), std::string::npos) << s.message();
}

// A stand-in peer that never moves data and says whom it waits on (and,
// optionally, that what this rank sent it stalls on the link).
class StuckConnection final : public Connection {
 public:
  StuckConnection(int peer, bool shm, std::optional<PeerWait> waits_on,
                  std::optional<LinkStall> stall = std::nullopt)
      : peer_(peer), shm_(shm), waits_on_(waits_on), stall_(stall) {}
  void PostSend(Transfer* t) override { posted_.push_back(t); }
  void PostRecv(Transfer* t) override { posted_.push_back(t); }
  Result<bool> Progress() override { return false; }
  bool idle() const override { return posted_.empty(); }
  bool uses_doorbell() const override { return shm_; }
  std::optional<PeerWait> PeerWaitingOn() const override { return waits_on_; }
  std::optional<LinkStall> SendStall() const override { return stall_; }
  std::string Describe() const override {
    return "rank " + std::to_string(peer_) + (shm_ ? " (via SHM)" : " (via NET)");
  }

 private:
  int peer_;
  bool shm_;
  std::optional<PeerWait> waits_on_;
  std::optional<LinkStall> stall_;
  std::vector<Transfer*> posted_;
};

// Runs one 8-byte receive from rank 1 over `conns` with a 50 ms deadline
// (or `ms`), reporting long waits to `reporter` if given.
Status ReceiveFromRankOne(std::vector<std::unique_ptr<Connection>> conns,
                          std::shared_ptr<WaitReporter> reporter = nullptr, int ms = 50) {
  Engine::Options options;
  options.wait_reporter = std::move(reporter);
  Engine engine(std::move(options), std::move(conns));
  std::vector<char> b(8);
  Transfer t;
  t.dir = Transfer::Dir::kRecv;
  t.peer = 1;
  t.dst = b.data();
  t.bytes = b.size();
  return engine.Run({&t, 1}, Deadline::After(std::chrono::milliseconds(ms)));
}

// Records what the engine reports, and explains a timeout with a culprit.
class RecordingReporter final : public WaitReporter {
 public:
  std::chrono::milliseconds threshold() const override { return std::chrono::milliseconds(20); }
  void Publish(const WaitReport& w) override { published.push_back(w); }
  void Withdraw() override { ++withdrawn; }
  std::string Explain(const WaitReport& mine, bool* culprit) override {
    explained.push_back(mine);
    *culprit = true;
    return "rank 7 on host far made no progress";
  }
  std::vector<WaitReport> published, explained;
  int withdrawn = 0;
};

// A peer whose message arrives `after` the first poll.
class LateConnection final : public Connection {
 public:
  explicit LateConnection(std::chrono::milliseconds after) : after_(after) {}
  void PostSend(Transfer* t) override { posted_.push_back(t); }
  void PostRecv(Transfer* t) override { posted_.push_back(t); }
  Result<bool> Progress() override {
    const auto now = std::chrono::steady_clock::now();
    if (first_ == std::chrono::steady_clock::time_point{}) first_ = now;
    if (posted_.empty() || now - first_ < after_) return false;
    for (Transfer* t : posted_) {
      t->done = t->bytes;
      t->header_done = true;
    }
    posted_.clear();
    return true;
  }
  bool idle() const override { return posted_.empty(); }
  std::string Describe() const override { return "rank 1 (via NET)"; }

 private:
  std::chrono::milliseconds after_;
  std::chrono::steady_clock::time_point first_{};
  std::vector<Transfer*> posted_;
};

TEST(EngineTimeout, ALongWaitIsPublishedOnceAndItsCauseExplainedAtTheDeadline) {
  // Rank 0 waits on rank 1 over the network; its finished send to rank 2
  // sits unacknowledged on the link.
  LinkStall stall;
  stall.peer = 2;
  stall.retransmits = 4;
  stall.silent_ms = 900;
  std::vector<std::unique_ptr<Connection>> conns(3);
  conns[1] = std::make_unique<StuckConnection>(1, false, std::nullopt);
  conns[2] = std::make_unique<StuckConnection>(2, false, std::nullopt, stall);
  auto reporter = std::make_shared<RecordingReporter>();
  Status s = ReceiveFromRankOne(std::move(conns), reporter, 300);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("still waiting on rank 1 (via NET); rank 7 on host far made no "
                             "progress"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("raise LOOM_TIMEOUT_MS"), std::string::npos) << s.message();
  ASSERT_EQ(reporter->published.size(), 1u);
  const WaitReport& w = reporter->published.front();
  ASSERT_EQ(w.waits.size(), 1u);
  EXPECT_EQ(w.waits[0].peer, 1);
  EXPECT_TRUE(w.waits[0].over_network);
  EXPECT_GE(w.waited_ms, 20u);
  ASSERT_EQ(w.stalls.size(), 1u);
  EXPECT_EQ(w.stalls[0].peer, 2);
  EXPECT_EQ(w.stalls[0].retransmits, 4u);
  ASSERT_EQ(reporter->explained.size(), 1u);
  EXPECT_EQ(reporter->withdrawn, 0) << "a failed wait stays published";
}

TEST(EngineTimeout, AWaitThatEndsInProgressIsWithdrawn) {
  std::vector<std::unique_ptr<Connection>> conns(2);
  conns[1] = std::make_unique<LateConnection>(std::chrono::milliseconds(200));
  auto reporter = std::make_shared<RecordingReporter>();
  Status s = ReceiveFromRankOne(std::move(conns), reporter, 10000);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(reporter->published.size(), 1u);
  EXPECT_EQ(reporter->withdrawn, 1);
  EXPECT_TRUE(reporter->explained.empty());
}

TEST(EngineTimeout, AShortWaitIsNeverPublished) {
  std::vector<std::unique_ptr<Connection>> conns(2);
  conns[1] = std::make_unique<LateConnection>(std::chrono::milliseconds(0));
  auto reporter = std::make_shared<RecordingReporter>();
  Status s = ReceiveFromRankOne(std::move(conns), reporter, 10000);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(reporter->published.empty());
  EXPECT_EQ(reporter->withdrawn, 0);
}

TEST(EngineTimeout, NamesTheChainOfSameHostPeersBlockedBehindThePeer) {
  // Rank 0 waits on rank 1 (same host), which waits on rank 2 (same host),
  // which waits on rank 3 across the network: the cause is rank 3.
  std::vector<std::unique_ptr<Connection>> conns(4);
  conns[1] = std::make_unique<StuckConnection>(1, true, PeerWait{2, false});
  conns[2] = std::make_unique<StuckConnection>(2, true, PeerWait{3, true});
  conns[3] = std::make_unique<StuckConnection>(3, false, std::nullopt);
  Status s = ReceiveFromRankOne(std::move(conns));
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("still waiting on rank 1 (via SHM), which is waiting on rank 2 on "
                             "this host, which is waiting on rank 3 over the network"),
            std::string::npos)
      << s.message();
}

TEST(EngineTimeout, AStoppedPeerIsNamedAsStoppedNotAsWaiting) {
  std::vector<std::unique_ptr<Connection>> conns(2);
  conns[1] = std::make_unique<StuckConnection>(1, true, PeerWait{-1, false, true});
  Status s = ReceiveFromRankOne(std::move(conns));
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("still waiting on rank 1 (via SHM), whose process is stopped "
                             "(SIGSTOP or a debugger) and made no progress"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("which is waiting"), std::string::npos) << s.message();
}

TEST(EngineTimeout, AChainThatLoopsBackEndsAtThisRank) {
  std::vector<std::unique_ptr<Connection>> conns(3);
  conns[1] = std::make_unique<StuckConnection>(1, true, PeerWait{2, false});
  conns[2] = std::make_unique<StuckConnection>(2, true, PeerWait{1, false});
  Status s = ReceiveFromRankOne(std::move(conns));
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("rank 1 (via SHM), which is waiting on rank 2 on this host "),
            std::string::npos)
      << s.message();
}

TEST(ShmTransport, ARankWaitingOnThePeerThatTimesOutIsNamed) {
  // Both ranks wait to receive from each other (a deadlock): the one that
  // times out second says its peer is waiting on it.
  auto p = MakePair(Kind::kShm);
  std::vector<char> b0(10), b1(10);
  Transfer t0, t1;
  t0.dir = t1.dir = Transfer::Dir::kRecv;
  t0.peer = 1;
  t1.peer = 0;
  t0.dst = b0.data();
  t1.dst = b1.data();
  t0.bytes = t1.bytes = 10;
  Status s0 = p->engine[0]->Run({&t0, 1}, Deadline::After(std::chrono::milliseconds(100)));
  EXPECT_EQ(s0.code(), Code::kTimeout) << s0.ToString();
  Status s1 = p->engine[1]->Run({&t1, 1}, Deadline::After(std::chrono::milliseconds(100)));
  EXPECT_EQ(s1.code(), Code::kTimeout) << s1.ToString();
  EXPECT_NE(s1.message().find("via SHM), which is waiting on this rank"), std::string::npos)
      << s1.message();
}

TEST(ShmTransport, ASmallCollectiveThatTimesOutNamesThePeerItWaitsFor) {
  // Rank 1 never publishes its part: rank 0 spins, naps on its doorbell,
  // and at the deadline names rank 1 and the operation.
  auto p = MakePair(Kind::kShm, 1 << 16, 1, /*small=*/true);
  ASSERT_TRUE(p->engine[0]->small_collectives());
  const double mine = 1.0;
  auto r = p->engine[0]->SmallExchange(OpKind::kAllReduce, &mine, sizeof(mine),
                                       Deadline::After(std::chrono::milliseconds(100)));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kTimeout) << r.status().ToString();
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("still waiting on rank 1 ("), std::string::npos) << m;
  EXPECT_NE(m.find(" for its part of "), std::string::npos) << m;
}

TEST(ShmTransport, ASleepingRankPublishesWhomItWaitsOnUntilItsRunEnds) {
  auto p = MakePair(Kind::kShm);
  std::vector<char> in(10), out(10, 'x');
  Transfer recv, send;
  recv.dir = Transfer::Dir::kRecv;
  recv.peer = 1;
  recv.dst = in.data();
  recv.bytes = 10;
  send.dir = Transfer::Dir::kSend;
  send.peer = 0;
  send.src = out.data();
  send.bytes = 10;
  std::thread waiter([&] {
    Status s = p->engine[0]->Run({&recv, 1}, Deadline::After(std::chrono::seconds(10)));
    EXPECT_TRUE(s.ok()) << s.ToString();
  });
  std::optional<PeerWait> w;
  for (int i = 0; i < 5000 && !w; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    w = p->engine[1]->connection(0)->PeerWaitingOn();
  }
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->peer, 1);
  EXPECT_FALSE(w->over_network);
  Status s = p->engine[1]->Run({&send, 1}, Deadline::After(std::chrono::seconds(10)));
  EXPECT_TRUE(s.ok()) << s.ToString();
  waiter.join();
  EXPECT_EQ(in, out);
  EXPECT_FALSE(p->engine[1]->connection(0)->PeerWaitingOn().has_value());
}

// Under TSan: a message orders what its sender did before it with what the
// receiver does after it, even when the sender has torn down its end (and
// unmapped its FIFO) before the receiver reads the message. Direct
// collectives rely on this: a rank frees its buffer once the final "done"
// messages of the peers that read it have arrived. Nothing here synchronizes
// the two threads but the message (the flag is relaxed).
TEST(ShmTransport, AMessageOrdersTheSendersWritesAfterItsEndIsGone) {
  auto p = MakePair(Kind::kShm);
  auto owned = std::make_unique<int>(0);
  int* shared = owned.get();
  std::atomic<bool> sender_gone{false};
  std::thread sender([&] {
    *shared = 1;
    Transfer t;
    t.dir = Transfer::Dir::kSend;
    t.peer = 1;
    Status s = p->engine[0]->Run({&t, 1}, Deadline::After(std::chrono::seconds(10)));
    EXPECT_TRUE(s.ok()) << s.ToString();
    p->engine[0].reset();  // unmaps this end of both FIFOs
    p->shm[0].reset();
    sender_gone.store(true, std::memory_order_relaxed);
  });
  while (!sender_gone.load(std::memory_order_relaxed)) std::this_thread::yield();
  Transfer t;
  t.dir = Transfer::Dir::kRecv;
  t.peer = 0;
  Status s = p->engine[1]->Run({&t, 1}, Deadline::After(std::chrono::seconds(10)));
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(*shared, 1);
  owned.reset();  // TSan: a race with the sender's write unless the message ordered them
  sender.join();
}

TEST_P(TransportTest, AbortWakesASleepingWait) {
  auto p = MakePair(GetParam());
  std::vector<char> b(10);
  Transfer t;
  t.dir = Transfer::Dir::kRecv;
  t.peer = 0;
  t.dst = b.data();
  t.bytes = 10;
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    p->abort.store(true);
    p->engine[1]->Wake();
  });
  Status s = p->engine[1]->Run({&t, 1}, Deadline::After(std::chrono::seconds(30)));
  aborter.join();
  EXPECT_EQ(s.code(), Code::kRemoteError) << s.ToString();
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportTest,
                         ::testing::Values(Kind::kShm, Kind::kTcp, Kind::kTcpStriped),
                         [](const auto& info) {
                           switch (info.param) {
                             case Kind::kShm:
                               return "Shm";
                             case Kind::kTcp:
                               return "Tcp";
                             case Kind::kTcpStriped:
                               return "TcpThreeSockets";
                           }
                           return "?";
                         });

TEST(TcpTransport, ClosedPeerIsARemoteErrorNamingIt) {
  auto p = MakePair(Kind::kTcp);
  p->engine[0].reset();  // closes rank 0's socket
  std::vector<char> b(10);
  Transfer t;
  t.dir = Transfer::Dir::kRecv;
  t.peer = 0;
  t.dst = b.data();
  t.bytes = 10;
  Status s = p->engine[1]->Run({&t, 1}, Deadline::After(std::chrono::seconds(5)));
  EXPECT_EQ(s.code(), Code::kRemoteError) << s.ToString();
  EXPECT_NE(s.message().find("rank 0"), std::string::npos) << s.message();
}

// A payload starts on a cache line of the FIFO whatever the sizes before it:
// a record is a header line and the payload padded to whole lines
// (transports/shm/connection.cc says why).
TEST(ShmTransport, EveryRecordIsAHeaderLineAndItsPayloadInWholeLines) {
  auto p = MakePair(Kind::kShm);
  auto* shm = dynamic_cast<ShmConnection*>(p->engine[0]->connection(1));
  ASSERT_NE(shm, nullptr);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{8}, size_t{13}, size_t{64}, size_t{100},
                       size_t{4099}, size_t{65536 + 8}}) {
    std::vector<uint8_t> a(bytes, 5), b(bytes, 0);
    const uint64_t before = shm->fifo_bytes_written();
    SendRecvResult r = SendOne(*p, a.data(), b.data(), bytes);
    ASSERT_TRUE(r.send.ok()) << r.send.ToString();
    ASSERT_TRUE(r.recv.ok()) << r.recv.ToString();
    EXPECT_EQ(a, b) << bytes;
    EXPECT_EQ(shm->fifo_bytes_written() - before, 64 + (bytes + 63) / 64 * 64) << bytes;
  }
}

// Streaming sends (non-temporal stores into the FIFO) deliver every byte:
// pieces on both sides of the threshold, a source off its alignment, and
// messages larger than the FIFO, which wrap around it.
TEST(ShmTransport, StreamingSendsDeliverEveryByte) {
  auto p = MakePair(Kind::kShm);
  auto* shm = dynamic_cast<ShmConnection*>(p->engine[0]->connection(1));
  ASSERT_NE(shm, nullptr);
  shm->set_streaming_sends(true);
  ASSERT_TRUE(shm->streaming_sends());
  for (size_t bytes : {size_t{100}, ShmConnection::kStreamSendMinBytes - 1,
                       ShmConnection::kStreamSendMinBytes, size_t{65536 + 8},
                       size_t{(3 << 20) + 5}}) {
    for (size_t skew : {size_t{0}, size_t{3}}) {
      std::vector<uint8_t> a(bytes + skew), b(bytes, 0);
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 131 + bytes);
      SendRecvResult r = SendOne(*p, a.data() + skew, b.data(), bytes);
      ASSERT_TRUE(r.send.ok()) << r.send.ToString();
      ASSERT_TRUE(r.recv.ok()) << r.recv.ToString();
      EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin() + static_cast<ptrdiff_t>(skew)))
          << bytes << " bytes, source skewed by " << skew;
    }
  }
}

TEST(ShmTransport, NoSegmentIsLeftInDevShm) {
  auto p = MakePair(Kind::kShm);
  std::string prefix = "/dev/shm/loom-t" + std::to_string(getpid());
  // Names are unlinked as soon as both sides mapped them.
  FILE* f = popen(("ls " + prefix + "* 2>/dev/null | wc -l").c_str(), "r");
  int count = -1;
  ASSERT_EQ(fscanf(f, "%d", &count), 1);
  pclose(f);
  EXPECT_EQ(count, 0);
}

}  // namespace
}  // namespace loom
