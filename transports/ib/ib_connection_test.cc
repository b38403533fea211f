// IbConnection's data path and its pure bookkeeping, without RDMA: two
// connections joined by an in-memory IbWire fake that performs RDMA writes
// with immediate (copy into the peer's ring, a receive completion there, a
// write completion here) and checks keys, bounds and posted receives the
// way an HCA would, GPUDirect RDMA's grants included (the fake's "device
// memory" is host memory it was told about). Plus the registration cache
// over a fake registrar.
#include <sys/eventfd.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <map>
#include <numeric>

#include "transports/test_reduce.h"
#include "transports/ib/connection.h"
#include "transports/ib/flow.h"
#include "transports/ib/qp.h"
#include "transports/ib/reg_cache.h"

namespace loom::ib {
namespace {

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- Registration cache over a fake registrar ----

class FakeRegistrar : public Registrar {
 public:
  Result<MemoryKey> Register(uintptr_t addr, size_t bytes, void** handle) override {
    if (fail) return SystemError("ibv_reg_mr: Cannot allocate memory");
    ++next;
    live[next] = {addr, bytes};
    *handle = reinterpret_cast<void*>(next);
    return MemoryKey{static_cast<uint32_t>(next), static_cast<uint32_t>(next + 1000)};
  }
  void Deregister(void* handle) override {
    EXPECT_EQ(live.erase(reinterpret_cast<uintptr_t>(handle)), 1u) << "double deregistration";
  }
  bool fail = false;
  uintptr_t next = 0;
  std::map<uintptr_t, std::pair<uintptr_t, size_t>> live;
};

TEST(RegistrationCache, ReusesCoveringEntryAndAlignsToPages) {
  FakeRegistrar reg;
  RegistrationCache cache(&reg, 4);
  auto a = cache.Acquire(reinterpret_cast<void*>(0x10010), 100);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->begin, 0x10000u);
  EXPECT_EQ((*a)->end, 0x11000u);
  auto b = cache.Acquire(reinterpret_cast<void*>(0x10800), 0x800);  // inside the same page
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
  auto c = cache.Acquire(reinterpret_cast<void*>(0x10800), 0x801);  // crosses the page end
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*a, *c);
  EXPECT_EQ(reg.live.size(), 2u);
  EXPECT_FALSE(cache.Acquire(reinterpret_cast<void*>(0x1000), 0).ok());
  EXPECT_FALSE(cache.Acquire(reinterpret_cast<void*>(~uintptr_t{0} - 10), 100).ok());
}

TEST(RegistrationCache, EvictsLeastRecentlyUsedButNeverPinned) {
  FakeRegistrar reg;
  RegistrationCache cache(&reg, 2);
  auto p = [](uintptr_t page) { return reinterpret_cast<void*>(page * 4096); };
  auto e1 = *cache.Acquire(p(1), 10);
  auto e2 = *cache.Acquire(p(2), 10);
  cache.Unpin(e2);
  cache.Unpin(e1);  // recency is by Acquire: e1 is the oldest
  auto e3 = *cache.Acquire(p(3), 10);  // over capacity: oldest unpinned (e1) goes
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(reg.live.size(), 2u);
  ASSERT_TRUE(cache.Acquire(p(2), 10).ok());  // e2 still there: a hit
  EXPECT_EQ(cache.hits(), 1u);
  // Everything pinned: the cache grows past capacity rather than drop a key in use.
  auto e4 = *cache.Acquire(p(4), 10);
  EXPECT_EQ(cache.size(), 3u);
  cache.Unpin(e3);  // back to capacity: e3 (oldest unpinned) goes
  EXPECT_EQ(cache.size(), 2u);
  cache.Unpin(e4);
}

TEST(RegistrationCache, InvalidateDropsAtLastUnpinAndClearKeepsPinned) {
  FakeRegistrar reg;
  RegistrationCache cache(&reg, 8);
  auto a = *cache.Acquire(reinterpret_cast<void*>(0x1000), 0x2000);
  auto b = *cache.Acquire(reinterpret_cast<void*>(0x8000), 0x1000);
  cache.Unpin(b);
  cache.Invalidate(reinterpret_cast<void*>(0x2000), 0x7000);  // overlaps both
  EXPECT_EQ(reg.live.size(), 1u);  // b dropped; a pinned, now stale
  auto again = *cache.Acquire(reinterpret_cast<void*>(0x1000), 16);
  EXPECT_NE(again, a) << "a stale entry must not be reused";
  cache.Unpin(a);
  EXPECT_EQ(reg.live.size(), 1u);  // a gone at its last pin
  cache.Clear();
  EXPECT_EQ(cache.size(), 1u);  // `again` is pinned
  cache.Unpin(again);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_TRUE(reg.live.empty());
}

TEST(RegistrationCache, RegistrarFailureLeavesCacheUnchanged) {
  FakeRegistrar reg;
  RegistrationCache cache(&reg, 2);
  reg.fail = true;
  auto r = cache.Acquire(reinterpret_cast<void*>(0x1000), 10);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "ibv_reg_mr"));
  EXPECT_EQ(cache.size(), 0u);
}

// ---- Credits, ring accounting, completion FIFO, error mapping ----

TEST(Flow, CreditsWrapAndRefuseOverReturn) {
  SendCredits c(3);
  EXPECT_EQ(c.Take(), 0u);
  EXPECT_EQ(c.Take(), 1u);
  EXPECT_EQ(c.Take(), 2u);
  EXPECT_FALSE(c.available());
  EXPECT_TRUE(c.Return(2, "p").ok());
  EXPECT_EQ(c.Take(), 0u);  // slots are reused in ring order
  const Status s = c.Return(3, "rank 4 (d)");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "rank 4 (d) returned 3")) << s.message();
}

TEST(Flow, RingCountsArrivalsAndOwesFreedSlots) {
  RecvRing r(2);
  EXPECT_TRUE(r.Arrive(10, 1, "p").ok());
  EXPECT_TRUE(r.Arrive(20, 2, "p").ok());
  const Status over = r.Arrive(5, 3, "rank 1 (b)");
  EXPECT_FALSE(over.ok());
  EXPECT_TRUE(Contains(over.message(), "rank 1 (b) wrote into a full IB ring"));
  EXPECT_EQ(r.front().slot, 0u);
  r.Free();
  EXPECT_EQ(r.front().slot, 1u);
  EXPECT_EQ(r.front().bytes, 20u);
  r.Free();
  EXPECT_TRUE(r.Arrive(1, 4, "p").ok());
  EXPECT_EQ(r.front().slot, 0u);  // wrapped
  EXPECT_EQ(r.owed(), 2u);
  EXPECT_EQ(r.TakeCredits(), 2u);
  EXPECT_EQ(r.TakeCredits(), 0u);
  RecvRing big(255);
  for (int i = 0; i < 255; ++i) ASSERT_TRUE(big.Arrive(1, 0, "p").ok());
  for (int i = 0; i < 255; ++i) big.Free();
  for (int i = 0; i < 255; ++i) ASSERT_TRUE(big.Arrive(1, 0, "p").ok());
  for (int i = 0; i < 45; ++i) big.Free();
  EXPECT_EQ(big.TakeCredits(), 255u);  // one credit message carries at most 255
  EXPECT_EQ(big.TakeCredits(), 45u);
}

TEST(Flow, WriteFifoSettlesInPostingOrderOnly) {
  WriteFifo<int> f;
  const uint64_t a = f.Push(10), b = f.Push(20);
  auto wrong = f.Complete(b, "rank 2 (c)");
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(Contains(wrong.status().message(), "out of order"));
  EXPECT_EQ(*f.Complete(a, "p"), 10);
  EXPECT_EQ(*f.Complete(b, "p"), 20);
  EXPECT_FALSE(f.Complete(b + 1, "p").ok());
}

TEST(Flow, CompletionErrorsNameStatusPeerAndHint) {
  const Status retry =
      MapCompletionError(12, "transport retry counter exceeded", 0x81, true, "rank 3 (h3)");
  EXPECT_EQ(retry.code(), Code::kRemoteError);
  EXPECT_TRUE(Contains(retry.message(), "RDMA write to rank 3 (h3) failed: transport retry "
                                        "counter exceeded (status 12, vendor error 0x81)"))
      << retry.message();
  EXPECT_TRUE(Contains(retry.message(), "NCCL_IB_TIMEOUT"));
  EXPECT_EQ(MapCompletionError(13, "x", 0, true, "p").code(), Code::kRemoteError);
  const Status flush = MapCompletionError(5, "Work Request Flushed Error", 0, false, "p");
  EXPECT_EQ(flush.code(), Code::kRemoteError);
  EXPECT_TRUE(Contains(flush.message(), "incoming write from p"));
  EXPECT_EQ(MapCompletionError(10, "remote access error", 0, true, "p").code(), Code::kInternalError);
  EXPECT_EQ(MapCompletionError(21, nullptr, 0, true, "p").code(), Code::kSystemError);
}

TEST(Flow, ImmediateKindsRoundTrip) {
  const ImmInfo h = DecodeImm(HeaderImm(300));
  EXPECT_EQ(h.kind, ImmInfo::Kind::kHeader);
  EXPECT_EQ(h.seq, 300u & 0xff);
  const ImmInfo c = DecodeImm(CreditImm(255));
  EXPECT_EQ(c.kind, ImmInfo::Kind::kCredit);
  EXPECT_EQ(c.credits, 255u);
  const ImmInfo d = DecodeImm(EncodeImm(7, kMaxChunks - 1));
  EXPECT_EQ(d.kind, ImmInfo::Kind::kData);
  EXPECT_EQ(d.chunk, kMaxChunks - 1);
  EXPECT_EQ(d.seq, 7u);
  const ImmInfo g = DecodeImm(AnswerImm(513, true));
  EXPECT_EQ(g.kind, ImmInfo::Kind::kAnswerGrant);
  EXPECT_EQ(g.seq, 1u);
  EXPECT_EQ(DecodeImm(AnswerImm(9, false)).kind, ImmInfo::Kind::kAnswerRing);
  const ImmInfo w = DecodeImm(GrantedImm(200));
  EXPECT_EQ(w.kind, ImmInfo::Kind::kGranted);
  EXPECT_EQ(w.seq, 200u);
}

// ---- IbConnection over an in-memory fake wire pair ----

class FakeWire : public IbWire {
 public:
  explicit FakeWire(size_t ring_bytes) : ring_(ring_bytes) {
    efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }
  ~FakeWire() override {
    close(efd_);
    EXPECT_TRUE(mrs_.empty()) << "registrations leaked";
  }
  FakeWire* peer = nullptr;
  int inject_status = 0;  // the next write completes with this status
  size_t max_posted_recvs = 0;

  Status PostWrite(const WriteRequest& w) override {
    WireCompletion done{w.wr_id, WireCompletion::Op::kWrite, 0, 0, 0, 0};
    if (inject_status != 0) {
      done.status = std::exchange(inject_status, 0);
      Push(done);
      return Status::Ok();
    }
    if (w.bytes > 0 && !Covered(w.local, w.bytes, w.lkey)) {
      done.status = 4;  // IBV_WC_LOC_PROT_ERR, as an HCA reports a bad lkey
      Push(done);
      return Status::Ok();
    }
    char* target = nullptr;
    if (w.rkey != 0) {  // into a buffer the peer granted: its key must cover it
      if (!peer->Covered(reinterpret_cast<const void*>(w.remote_addr), w.bytes, w.rkey)) {
        done.status = 10;  // IBV_WC_REM_ACCESS_ERR
        Push(done);
        return Status::Ok();
      }
      target = reinterpret_cast<char*>(w.remote_addr);
      ++granted_writes;
    } else {
      EXPECT_LE(w.remote_offset + w.bytes, peer->ring_.size()) << "write past the peer's ring";
      target = peer->ring_.data() + w.remote_offset;
      if (DecodeImm(w.imm).kind == ImmInfo::Kind::kData) ++ring_chunks;
    }
    if (!w.with_imm) {
      std::memcpy(target, w.local, w.bytes);
      Push(done);
      ++writes;
      return Status::Ok();
    }
    EXPECT_FALSE(peer->recvs_.empty()) << "no receive posted for an immediate (RNR)";
    if (peer->recvs_.empty()) return InternalError("RNR");
    // Credit returns carry no bytes (and no local buffer).
    if (w.bytes > 0) std::memcpy(target, w.local, w.bytes);
    peer->Push(WireCompletion{peer->recvs_.front(), WireCompletion::Op::kRecv, 0, 0, w.imm,
                              static_cast<uint32_t>(w.bytes)});
    peer->recvs_.pop_front();
    Push(done);
    ++writes;
    return Status::Ok();
  }
  Status PostRecv(uint64_t wr_id) override {
    recvs_.push_back(wr_id);
    max_posted_recvs = std::max(max_posted_recvs, recvs_.size());
    return Status::Ok();
  }
  Result<int> Poll(WireCompletion* out, int max) override {
    int n = 0;
    while (n < max && !cq_.empty()) {
      out[n++] = cq_.front();
      cq_.pop_front();
    }
    return n;
  }
  char* ring() override { return ring_.data(); }
  size_t ring_bytes() const override { return ring_.size(); }
  const char* StatusText(int status) const override {
    return status == 12 ? "transport retry counter exceeded" : "fake error";
  }
  int event_fd() const override { return efd_; }
  Status Arm() override {
    uint64_t v;
    while (read(efd_, &v, sizeof v) == sizeof v) {
    }
    return Status::Ok();
  }
  Result<MemoryKey> Register(uintptr_t addr, size_t bytes, void** handle) override {
    const uint32_t key = ++next_key_;
    mrs_[key] = {addr, bytes};
    *handle = reinterpret_cast<void*>(uintptr_t{key});
    ++registrations;
    return MemoryKey{key, key};
  }
  // "Device memory": the allocations a test declared; the whole one is registered.
  Result<MemoryKey> RegisterDevice(uintptr_t addr, size_t bytes, void** handle, uintptr_t* begin,
                                   uintptr_t* end) override {
    for (const auto& [base, len] : device_allocations) {
      if (base <= addr && addr + bytes <= base + len) {
        *begin = base;
        *end = base + len;
        ++device_registrations;
        return Register(base, len, handle);
      }
    }
    return InternalError("not device memory");
  }
  void Deregister(void* handle) override { mrs_.erase(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(handle))); }

  size_t writes = 0, registrations = 0, granted_writes = 0, device_registrations = 0;
  size_t ring_chunks = 0;  // payload chunks written into the peer's ring
  std::map<uintptr_t, size_t> device_allocations;

 private:
  bool Covered(const void* p, size_t n, uint32_t lkey) const {
    auto it = mrs_.find(lkey);
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    return it != mrs_.end() && it->second.first <= a && a + n <= it->second.first + it->second.second;
  }
  void Push(const WireCompletion& c) {
    cq_.push_back(c);
    const uint64_t one = 1;
    (void)!write(efd_, &one, sizeof one);
  }
  std::vector<char> ring_;
  std::deque<WireCompletion> cq_;
  std::deque<uint64_t> recvs_;
  std::map<uint32_t, std::pair<uintptr_t, size_t>> mrs_;
  uint32_t next_key_ = 0;
  int efd_ = -1;
};

struct Pair {
  std::unique_ptr<IbConnection> a, b;  // a: rank 0's connection to 1; b: rank 1's to 0
  FakeWire *wa = nullptr, *wb = nullptr;

  explicit Pair(IbConnectionOptions o = Small()) {
    auto x = std::make_unique<FakeWire>(o.layout.total_bytes());
    auto y = std::make_unique<FakeWire>(o.layout.total_bytes());
    x->peer = y.get();
    y->peer = x.get();
    wa = x.get();
    wb = y.get();
    a = std::move(IbConnection::Create(1, "h1", "NET/IB/0", std::move(x), o)).value();
    b = std::move(IbConnection::Create(0, "h0", "NET/IB/0", std::move(y), o)).value();
  }
  static IbConnectionOptions Small() {
    IbConnectionOptions o;
    o.layout.slot_bytes = 256;
    o.layout.slots = 4;
    o.eager_bytes = 600;
    o.registration_entries = 3;
    return o;
  }
  // Progresses both ends until every transfer completes; an error or 1000
  // passes without progress ends it.
  Status Run(std::vector<Transfer*> ts) {
    int stalled = 0;
    while (stalled < 1000) {
      bool all = true;
      for (Transfer* t : ts) all &= t->complete();
      if (all) return Status::Ok();
      LOOM_ASSIGN_OR_RETURN(bool ma, a->Progress());
      LOOM_ASSIGN_OR_RETURN(bool mb, b->Progress());
      stalled = ma || mb ? 0 : stalled + 1;
    }
    return TimeoutError("no progress");
  }
};

Transfer Send(const void* src, size_t n, OpKind kind = OpKind::kAllReduce) {
  Transfer t;
  t.dir = Transfer::Dir::kSend;
  t.src = src;
  t.bytes = n;
  t.kind = kind;
  return t;
}
Transfer Recv(void* dst, size_t n, OpKind kind = OpKind::kAllReduce) {
  Transfer t;
  t.dir = Transfer::Dir::kRecv;
  t.dst = dst;
  t.bytes = n;
  t.kind = kind;
  return t;
}

std::vector<char> Pattern(size_t n, int seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + seed * 7) % 251);
  return v;
}

TEST(IbConnection, AwkwardSizesBothWaysAtOnce) {
  Pair p;
  // 0, 1, an odd size, slot -1/±0/+1, the eager limit ±1, and far more
  // than the 4-slot ring (credits wrap many times).
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{255}, size_t{256}, size_t{257},
                   size_t{600}, size_t{601}, size_t{5 * 256 + 123}, size_t{100003}}) {
    auto s0 = Pattern(n, 1), s1 = Pattern(n, 2);
    std::vector<char> r0(n, 0), r1(n, 0);
    Transfer ts0 = Send(s0.data(), n), tr1 = Recv(r1.data(), n);
    Transfer ts1 = Send(s1.data(), n), tr0 = Recv(r0.data(), n);
    p.a->PostSend(&ts0);
    p.a->PostRecv(&tr0);
    p.b->PostSend(&ts1);
    p.b->PostRecv(&tr1);
    ASSERT_TRUE(p.Run({&ts0, &tr1, &ts1, &tr0}).ok()) << n;
    EXPECT_EQ(r1, s0) << n;
    EXPECT_EQ(r0, s1) << n;
    EXPECT_TRUE(p.a->idle());
  }
  // Receives never outgrow what was posted: 2 x (slots + answers).
  EXPECT_LE(p.wa->max_posted_recvs, 2u * (4 + RingLayout::kAnswers));
  // Idle: only the staging ring stays registered (see RegistrationCache).
  EXPECT_EQ(p.a->registrations().size(), 1u);
}

TEST(IbConnection, ManyMessagesInFlightBeyondTheWindow) {
  Pair p;
  constexpr int kMsgs = 30;
  std::vector<std::vector<char>> src, dst;
  std::vector<Transfer> sends(kMsgs), recvs(kMsgs);
  for (int i = 0; i < kMsgs; ++i) {
    const size_t n = 37 * i + 1;
    src.push_back(Pattern(n, i));
    dst.emplace_back(n, 0);
  }
  std::vector<Transfer*> all;
  for (int i = 0; i < kMsgs; ++i) {
    sends[i] = Send(src[i].data(), src[i].size());
    recvs[i] = Recv(dst[i].data(), dst[i].size());
    p.a->PostSend(&sends[i]);
    p.b->PostRecv(&recvs[i]);
    all.push_back(&sends[i]);
    all.push_back(&recvs[i]);
  }
  ASSERT_TRUE(p.Run(all).ok());
  for (int i = 0; i < kMsgs; ++i) EXPECT_EQ(dst[i], src[i]) << i;
}

TEST(IbConnection, LargeSendRegistrationsAreReusedWhileBusyAndDroppedWhenIdle) {
  Pair p;
  auto big = Pattern(4000, 3);
  std::vector<char> out(4000);
  for (int round = 0; round < 3; ++round) {
    Transfer s = Send(big.data(), big.size()), r = Recv(out.data(), out.size());
    Transfer s2 = Send(big.data() + 1000, 2000), r2 = Recv(out.data(), 2000);
    p.a->PostSend(&s);
    p.a->PostSend(&s2);  // inside the first one's registration: a cache hit
    p.b->PostRecv(&r);
    p.b->PostRecv(&r2);
    ASSERT_TRUE(p.Run({&s, &r, &s2, &r2}).ok());
    EXPECT_TRUE(std::equal(out.begin(), out.begin() + 2000, big.begin() + 1000));
  }
  // staging once, then one registration per busy period (dropped when idle).
  EXPECT_EQ(p.wa->registrations, 1u + 3u);
  EXPECT_GE(p.a->registrations().hits(), 3u);
}

TEST(IbConnection, ReduceOnReceiveWithGatedForward) {
  Pair p;
  constexpr size_t kN = 3001;  // floats: not a multiple of a slot
  std::vector<float> mine(kN), theirs(kN), sum(kN), fwd(kN, 0);
  std::iota(mine.begin(), mine.end(), 1.0f);
  std::iota(theirs.begin(), theirs.end(), 0.5f);
  Transfer s = Send(theirs.data(), kN * 4), r = Recv(sum.data(), kN * 4);
  r.reduce_with = mine.data();
  r.reduce = &testing::SumInto;
  r.type = DataType::kFloat32;
  r.op = RedOp::kSum;
  // rank 1 forwards the sum back as it is reduced: a send gated on the receive.
  Transfer back = Send(sum.data(), kN * 4), got = Recv(fwd.data(), kN * 4);
  back.gate = &r;
  p.a->PostSend(&s);
  p.b->PostRecv(&r);
  p.b->PostSend(&back);
  p.a->PostRecv(&got);
  ASSERT_TRUE(p.Run({&s, &r, &back, &got}).ok());
  for (size_t i = 0; i < kN; ++i) {
    ASSERT_FLOAT_EQ(sum[i], mine[i] + theirs[i]) << i;
    ASSERT_FLOAT_EQ(fwd[i], sum[i]) << i;
  }
}

TEST(IbConnection, ReceiveGatedOnASendOfTheSameBuffer) {
  Pair p;
  auto buf = Pattern(2000, 5);
  const auto original = buf;
  auto incoming = Pattern(2000, 6);
  Transfer out = Send(buf.data(), buf.size());
  Transfer in = Recv(buf.data(), buf.size());  // may overwrite only what `out` has sent
  in.gate = &out;
  Transfer peer_send = Send(incoming.data(), incoming.size());
  std::vector<char> peer_got(2000);
  Transfer peer_recv = Recv(peer_got.data(), peer_got.size());
  // The peer sends first, so its data waits in the ring for the gate.
  p.b->PostSend(&peer_send);
  ASSERT_TRUE(p.b->Progress().ok());
  p.a->PostSend(&out);
  p.a->PostRecv(&in);
  p.b->PostRecv(&peer_recv);
  ASSERT_TRUE(p.Run({&out, &in, &peer_send, &peer_recv}).ok());
  EXPECT_EQ(peer_got, original);
  EXPECT_EQ(buf, incoming);
}

TEST(IbConnection, MismatchedSizeIsNamed) {
  Pair p;
  char x[100] = {}, y[50];
  Transfer s = Send(x, 100), r = Recv(y, 50);
  p.a->PostSend(&s);
  p.b->PostRecv(&r);
  const Status st = p.Run({&s, &r});
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(), "rank 0 (h0, via NET/IB/0)")) << st.message();
}

TEST(IbConnection, FailedCompletionBecomesErrorNamingPeerAndVerbsStatus) {
  Pair p;
  char x[10] = {}, y[10];
  Transfer s = Send(x, 10), r = Recv(y, 10);
  p.wa->inject_status = 12;  // IBV_WC_RETRY_EXC_ERR
  p.a->PostSend(&s);
  p.b->PostRecv(&r);
  auto st = p.a->Progress();
  st = p.a->Progress();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), Code::kRemoteError);
  EXPECT_TRUE(Contains(st.status().message(), "RDMA write to rank 1 (h1, via NET/IB/0) failed: "
                                              "transport retry counter exceeded"))
      << st.status().message();
}

TEST(IbConnection, SleepsOnTheCompletionChannelAndWakesOnArrival) {
  Pair p;
  char y[10];
  Transfer r = Recv(y, 10);
  p.b->PostRecv(&r);
  ASSERT_TRUE(p.b->Progress().ok());
  std::vector<pollfd> fds;
  p.b->AppendPollFds(&fds);
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_EQ(fds[0].fd, p.wb->event_fd());
  EXPECT_EQ(poll(fds.data(), 1, 0), 0) << "nothing arrived: must be able to sleep";
  char x[10] = {1, 2, 3};
  Transfer s = Send(x, 10);
  p.a->PostSend(&s);
  ASSERT_TRUE(p.a->Progress().ok());
  EXPECT_EQ(poll(fds.data(), 1, 0), 1) << "an arrival must wake the sleeper";
  // An arrival that raced the arm is stashed, and the sleep is skipped.
  Transfer s2 = Send(x, 10), r2 = Recv(y, 10);
  p.b->PostRecv(&r2);
  p.a->PostSend(&s2);
  ASSERT_TRUE(p.a->Progress().ok());
  fds.clear();
  p.b->AppendPollFds(&fds);
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_NE(fds[0].fd, p.wb->event_fd());
  EXPECT_EQ(poll(fds.data(), 1, 0), 1);
  ASSERT_TRUE(p.Run({&r, &s, &s2, &r2}).ok());
  EXPECT_EQ(std::memcmp(y, x, 10), 0);
}

// ---- GPUDirect RDMA: device transfers and the receiver's grants ----

// Both ends send from and receive into "GPU memory" (eager 600 bytes; the
// granted payload in writes of at most 1000 bytes).
IbConnectionOptions Gdr() {
  IbConnectionOptions o = Pair::Small();
  o.device_sends = o.device_recvs = o.peer_grants = true;
  o.granted_write_bytes = 1000;
  return o;
}

// A buffer the fake wires take for device memory (one allocation of
// `room`, declared on both: either end may register it).
struct DeviceBuffer {
  std::vector<char> bytes;
  DeviceBuffer(Pair& p, size_t room) : bytes(room) {
    for (FakeWire* w : {p.wa, p.wb}) w->device_allocations[Base()] = room;
  }
  uintptr_t Base() const { return reinterpret_cast<uintptr_t>(bytes.data()); }
};

TEST(IbGdr, DeviceToDeviceGoesStraightIntoTheGrantedBuffer) {
  Pair p(Gdr());
  EXPECT_TRUE(p.a->sends_device_memory());
  EXPECT_EQ(p.a->receives_device_memory_from(), 601u);
  for (size_t n : {size_t{601}, size_t{1000}, size_t{5003}, size_t{100003}}) {
    DeviceBuffer s0(p, n + 64), s1(p, n + 64), r0(p, n + 64), r1(p, n + 64);
    const auto x = Pattern(n, 1), y = Pattern(n, 2);
    std::memcpy(s0.bytes.data() + 64, x.data(), n);  // not at the allocation's start
    std::memcpy(s1.bytes.data() + 64, y.data(), n);
    Transfer ts0 = Send(s0.bytes.data() + 64, n), tr1 = Recv(r1.bytes.data() + 64, n);
    Transfer ts1 = Send(s1.bytes.data() + 64, n), tr0 = Recv(r0.bytes.data() + 64, n);
    for (Transfer* t : {&ts0, &tr1, &ts1, &tr0}) t->device = true;
    p.a->PostSend(&ts0);
    p.a->PostRecv(&tr0);
    p.b->PostSend(&ts1);
    p.b->PostRecv(&tr1);
    ASSERT_TRUE(p.Run({&ts0, &tr1, &ts1, &tr0}).ok()) << n;
    EXPECT_EQ(std::memcmp(r1.bytes.data() + 64, x.data(), n), 0) << n;
    EXPECT_EQ(std::memcmp(r0.bytes.data() + 64, y.data(), n), 0) << n;
    // No payload through the rings: all of it went into the granted
    // buffers, in writes of at most 1000 bytes.
    EXPECT_EQ(p.wa->ring_chunks + p.wb->ring_chunks, 0u) << n;
    EXPECT_TRUE(p.a->idle() && p.b->idle());
  }
  EXPECT_EQ(p.wa->granted_writes, 1u + 1u + 6u + 101u);
  // Each send and each receive registered its whole allocation once.
  EXPECT_EQ(p.wa->device_registrations, 8u);
  EXPECT_EQ(p.a->registrations().size(), 1u);  // idle: only the staging ring
}

TEST(IbGdr, HostAndDeviceBuffersMixOnAGrantingConnection) {
  Pair p(Gdr());
  // Host to host, small and large (answered "through the ring"); a device
  // send into host memory (its chunks written from GPU memory, eager size
  // or not); a host send into GPU memory (granted).
  constexpr size_t kBig = 3000, kSmall = 500;
  DeviceBuffer dev_src(p, kBig), dev_dst(p, kBig), dev_small(p, kSmall);
  const auto a = Pattern(kBig, 3), b = Pattern(kBig, 4), c = Pattern(kSmall, 5),
             d = Pattern(kBig, 6);
  std::memcpy(dev_src.bytes.data(), b.data(), kBig);
  std::memcpy(dev_small.bytes.data(), c.data(), kSmall);
  std::vector<char> host_a(kBig), host_b(kBig), host_c(kSmall);
  Transfer s1 = Send(a.data(), kBig), r1 = Recv(host_a.data(), kBig);
  Transfer s2 = Send(dev_src.bytes.data(), kBig), r2 = Recv(host_b.data(), kBig);
  Transfer s3 = Send(dev_small.bytes.data(), kSmall), r3 = Recv(host_c.data(), kSmall);
  Transfer s4 = Send(d.data(), kBig), r4 = Recv(dev_dst.bytes.data(), kBig);
  s2.device = s3.device = r4.device = true;
  for (Transfer* t : {&s1, &s2, &s3, &s4}) p.a->PostSend(t);
  for (Transfer* t : {&r1, &r2, &r3, &r4}) p.b->PostRecv(t);
  ASSERT_TRUE(p.Run({&s1, &r1, &s2, &r2, &s3, &r3, &s4, &r4}).ok());
  EXPECT_TRUE(std::equal(a.begin(), a.end(), host_a.begin()));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), host_b.begin()));
  EXPECT_TRUE(std::equal(c.begin(), c.end(), host_c.begin()));
  EXPECT_TRUE(std::equal(d.begin(), d.end(), dev_dst.bytes.begin()));
  EXPECT_EQ(p.wa->granted_writes, 3u);  // only the last message, in 1000-byte writes
}

TEST(IbGdr, ManyLargeMessagesBeyondTheAnswersInFlight) {
  Pair p(Gdr());
  constexpr int kMsgs = 3 * RingLayout::kAnswers + 1;
  constexpr size_t kN = 700;
  DeviceBuffer src(p, kMsgs * kN), dst(p, kMsgs * kN);
  for (size_t i = 0; i < src.bytes.size(); ++i) src.bytes[i] = static_cast<char>(i * 7);
  std::vector<Transfer> sends, recvs;
  for (int i = 0; i < kMsgs; ++i) {
    sends.push_back(Send(src.bytes.data() + i * kN, kN));
    recvs.push_back(Recv(dst.bytes.data() + i * kN, kN));
    sends.back().device = recvs.back().device = i % 2 == 0;  // odd ones through the ring
  }
  std::vector<Transfer*> all;
  for (int i = 0; i < kMsgs; ++i) {
    p.a->PostSend(&sends[i]);
    p.b->PostRecv(&recvs[i]);
    all.push_back(&sends[i]);
    all.push_back(&recvs[i]);
  }
  // The fake fails any immediate that finds no receive posted (RNR), so
  // this also checks the receive-queue budget.
  ASSERT_TRUE(p.Run(all).ok());
  EXPECT_EQ(src.bytes, dst.bytes);
}

TEST(IbGdr, ALargeSendWaitsForTheReceiverToPostItsReceive) {
  Pair p(Gdr());
  DeviceBuffer src(p, 2000), dst(p, 2000);
  src.bytes.assign(2000, 'x');
  Transfer s = Send(src.bytes.data(), 2000), r = Recv(dst.bytes.data(), 2000);
  s.device = r.device = true;
  p.a->PostSend(&s);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(p.a->Progress().ok());
    ASSERT_TRUE(p.b->Progress().ok());
  }
  EXPECT_TRUE(s.header_done);  // the header went; the payload waits for a grant
  EXPECT_EQ(s.done, 0u);
  EXPECT_EQ(p.wa->granted_writes, 0u);
  p.b->PostRecv(&r);
  ASSERT_TRUE(p.Run({&s, &r}).ok());
  EXPECT_EQ(src.bytes, dst.bytes);
}

TEST(IbGdr, DeviceTransfersTheConnectionCannotTakeAreNamed) {
  auto run = [](IbConnectionOptions o, size_t n, bool dev_send, bool dev_recv, bool reduce) {
    Pair p(o);
    DeviceBuffer src(p, n), dst(p, n);
    Transfer s = Send(src.bytes.data(), n), r = Recv(dst.bytes.data(), n);
    s.device = dev_send;
    r.device = dev_recv;
    if (reduce) {
      r.reduce_with = dst.bytes.data();
      r.reduce = &testing::SumInto;
    }
    p.a->PostSend(&s);
    p.b->PostRecv(&r);
    return p.Run({&s, &r});
  };
  Status st = run(Gdr(), 600, false, true, false);  // not above the eager size
  EXPECT_TRUE(Contains(st.message(),
                       "a receive of 600 bytes into GPU memory from rank 0 (h0, via NET/IB/0) is "
                       "not above the eager size"))
      << st.message();
  st = run(Gdr(), 4000, false, true, true);
  EXPECT_TRUE(
      Contains(st.message(), "4000 bytes into GPU memory from rank 0 (h0, via NET/IB/0) reduces"))
      << st.message();
  IbConnectionOptions no_gdr = Pair::Small();
  st = run(no_gdr, 4000, false, true, false);
  EXPECT_TRUE(Contains(st.message(), "which has no GPUDirect RDMA: it should have been staged"))
      << st.message();
  st = run(no_gdr, 4000, true, false, false);
  EXPECT_TRUE(Contains(
      st.message(),
      "a send from GPU memory to rank 1 (h1, via NET/IB/0), which has no GPUDirect RDMA for sends"))
      << st.message();
}

TEST(IbGdr, MismatchedSizesAcrossTheEagerLimitAreNamedNotHung) {
  for (auto [send, recv] : {std::pair<size_t, size_t>{4000, 500}, {500, 4000}}) {
    Pair p(Gdr());
    std::vector<char> x(send), y(recv);
    Transfer s = Send(x.data(), send), r = Recv(y.data(), recv);
    p.a->PostSend(&s);
    p.b->PostRecv(&r);
    const Status st = p.Run({&s, &r});
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.code(), Code::kTimeout) << st.message();
    EXPECT_TRUE(Contains(st.message(), "rank 0 (h0, via NET/IB/0)")) << st.message();
  }
}

TEST(IbGdr, ALargerSendNeverWritesPastTheGrantedBuffer) {
  Pair p(Gdr());
  DeviceBuffer src(p, 4000), dst(p, 4096);  // the key covers all 4096 bytes
  Transfer s = Send(src.bytes.data(), 4000), r = Recv(dst.bytes.data(), 3000);
  s.device = r.device = true;
  std::memset(dst.bytes.data(), 'g', dst.bytes.size());
  p.b->PostRecv(&r);
  ASSERT_TRUE(p.b->Progress().ok());  // granted before the header arrives
  p.a->PostSend(&s);
  const Status st = p.Run({&s, &r});
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(),
                       "rank 1 (h1, via NET/IB/0) posted a receive of 3000 bytes but "
                       "this rank sends 4000 bytes"))
      << st.message();
  EXPECT_EQ(p.wa->granted_writes, 0u);
  for (char c : dst.bytes) ASSERT_EQ(c, 'g');
}

TEST(IbGdr, SequenceNumbersWrapOnAGrantingConnection) {
  Pair p(Gdr());
  constexpr int kMsgs = 300;  // past 256: the immediates carry seq mod 256
  constexpr size_t kN = 640;
  DeviceBuffer src(p, kMsgs * kN), dst(p, kMsgs * kN);
  for (size_t i = 0; i < src.bytes.size(); ++i) src.bytes[i] = static_cast<char>(i * 13 + 1);
  for (int i = 0; i < kMsgs; ++i) {
    Transfer s = Send(src.bytes.data() + i * kN, kN), r = Recv(dst.bytes.data() + i * kN, kN);
    s.device = r.device = i % 3 != 0;  // some through the ring
    p.a->PostSend(&s);
    p.b->PostRecv(&r);
    ASSERT_TRUE(p.Run({&s, &r}).ok()) << i;
  }
  EXPECT_EQ(src.bytes, dst.bytes);
}

TEST(IbConnection, RejectsBadLayouts) {
  IbConnectionOptions o = Pair::Small();
  o.layout.slots = 256;
  EXPECT_FALSE(IbConnection::Create(1, "h", "v", std::make_unique<FakeWire>(1 << 20), o).ok());
  o = Pair::Small();
  EXPECT_FALSE(IbConnection::Create(1, "h", "v", std::make_unique<FakeWire>(100), o).ok());
}

}  // namespace
}  // namespace loom::ib
