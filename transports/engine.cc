// Engine: progress loop with bounded polling, then futex/poll sleeps.
#include "transports/engine.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/futex.h"
#include "base/log.h"
#include "transports/copy.h"
#include "transports/peer_memory.h"
#include "transports/streaming.h"
#include "transports/tsan.h"

namespace loom {

namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A hint that this core will write the line at p soon: fetched in
// exclusive state, so the write needs no second trip to the other copies.
inline void PrefetchForWrite(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1);
#endif
}

}  // namespace

// Polling goes on for `spin` after the last progress before a wait sleeps.
// The clock is read on one idle poll in eight only: a read costs more than a
// poll and delays noticing the peer's data (an engine-level 8 B exchange was
// 15 % faster here than with a read on every poll).
class Engine::SpinTimer {
 public:
  static constexpr unsigned kPollsPerClockRead = 8;
  explicit SpinTimer(std::chrono::microseconds spin) : spin_(spin) {}
  void Reset() {
    polls_ = 0;
    since_ = {};
  }
  bool Over() {
    if (polls_++ % kPollsPerClockRead != 0) return false;
    const auto now = std::chrono::steady_clock::now();
    if (since_ == std::chrono::steady_clock::time_point{}) since_ = now;
    return now - since_ >= spin_;
  }

 private:
  std::chrono::microseconds spin_;
  std::chrono::steady_clock::time_point since_{};  // the first idle poll's clock read
  unsigned polls_ = 0;
};

void RingDoorbell(Doorbell* bell) {
  bell->counter.fetch_add(1, std::memory_order_seq_cst);
  if (bell->sleeping.load(std::memory_order_seq_cst) != 0) {
    Futex(&bell->counter, FUTEX_WAKE, INT32_MAX, nullptr);
  }
}

namespace {
// "a small AllReduce of 8 bytes", or for a step of a larger collective
// "an exchange of 96 bytes within a larger AllReduce".
std::string DescribeSmall(OpKind kind, size_t bytes, uint8_t step) {
  if (step == 0) {
    return std::string("a small ") + OpKindName(kind) + " of " + std::to_string(bytes) + " bytes";
  }
  return "an exchange of " + std::to_string(bytes) + " bytes within a larger " + OpKindName(kind);
}
}  // namespace

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce: return "AllReduce";
    case OpKind::kReduceScatter: return "ReduceScatter";
    case OpKind::kAllGather: return "AllGather";
    case OpKind::kBroadcast: return "Broadcast";
    case OpKind::kReduce: return "Reduce";
    case OpKind::kAllToAll: return "AllToAll";
    case OpKind::kSendRecv: return "Send/Recv";
    case OpKind::kBarrier: return "Barrier";
    case OpKind::kInternal: return "internal";
  }
  return "unknown";
}

Status CheckHeader(const MessageHeader& h, const Transfer& t, const Connection& from) {
  if (h.magic == kHeaderMagic && h.kind == static_cast<uint8_t>(t.kind) && h.bytes == t.bytes &&
      h.seq == t.seq) {
    return Status::Ok();
  }
  const std::string peer_desc = from.Describe();
  if (h.magic != kHeaderMagic) {
    return InternalError("corrupt message header from " + peer_desc + " (bad magic " +
                         std::to_string(h.magic) + "): the byte streams are out of step");
  }
  if (h.kind != static_cast<uint8_t>(t.kind) || h.bytes != t.bytes) {
    return InvalidUsage("mismatched operations: " + peer_desc + " sent " +
                        std::to_string(h.bytes) + " bytes for " +
                        OpKindName(static_cast<OpKind>(h.kind)) + " but this rank expected " +
                        std::to_string(t.bytes) + " bytes for " + OpKindName(t.kind) +
                        " (message #" + std::to_string(h.seq) +
                        "); every rank must issue the same collectives with the same counts "
                        "in the same order, and Send/Recv counts must match");
  }
  if (h.seq != t.seq) {
    return InternalError("message sequence from " + peer_desc + " is " + std::to_string(h.seq) +
                         ", expected " + std::to_string(t.seq));
  }
  return Status::Ok();
}

Engine::Engine(Options options, std::vector<std::unique_ptr<Connection>> connections)
    : options_(std::move(options)), connections_(std::move(connections)) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  mailboxes_.resize(connections_.size());
  small_views_.resize(connections_.size());
  small_seen_.resize(connections_.size());
  small_ok_ = options_.small_slots != nullptr && connections_.size() > 1;
  if (options_.wait_reporter) wait_threshold_ = options_.wait_reporter->threshold();
  for (size_t p = 0; p < connections_.size(); ++p) {
    if (connections_[p] == nullptr) continue;
    if (PeerMemory* m = connections_[p]->peer_memory()) mailboxes_[p] = m->PeerMailbox();
    if (mailboxes_[p].slots == nullptr) small_ok_ = false;
  }
}

Engine::~Engine() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Engine::Wake() {
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (options_.doorbell != nullptr) RingDoorbell(options_.doorbell);
}

Status Engine::Run(std::span<Transfer> transfers, Deadline deadline) {
  peer_gone_since_ = {};
  ++runs_;
  wait_since_ = {};
  Status status = RunUntilDone(transfers, deadline);
  // A failed Run leaves its wait published: this rank is still stuck there,
  // and a same-host peer timing out a moment later should say so.
  if (status.ok() && published_wait_ != kNotWaiting) PublishWait(kNotWaiting);
  if (status.ok() && wait_published_) {
    options_.wait_reporter->Withdraw();
    wait_published_ = false;
  }
  return status;
}

Status Engine::RunUntilDone(std::span<Transfer> transfers, Deadline deadline) {
  std::vector<Connection*>& active = active_;
  active.clear();
  copies_.clear();
  for (Transfer& t : transfers) {
    if (t.peer < 0 || t.peer >= size() || connections_[t.peer] == nullptr) {
      return InternalError("transfer to invalid peer " + std::to_string(t.peer));
    }
    Connection* c = connections_[t.peer].get();
    if (t.dir == Transfer::Dir::kSend) {
      if (t.copy_to != nullptr) {
        t.copied = 0;
        copies_.push_back(&t);
      }
      c->PostSend(&t);
    } else {
      c->PostRecv(&t);
    }
    if (std::find(active.begin(), active.end(), c) == active.end()) active.push_back(c);
  }
  SpinTimer spin(std::chrono::microseconds(options_.spin_us));
  bool moved_since_sleep = false;
  for (;;) {
    bool moved = false;
    bool all_idle = true;
    for (Connection* c : active) {
      if (c->idle()) continue;
      auto r = c->Progress();
      if (!r.ok()) return r.status();
      moved |= r.value();
      all_idle &= c->idle();
    }
    for (Transfer* t : copies_) {
      if (t->done > t->copied) {
        char* to = static_cast<char*>(t->copy_to) + t->copied;
        const char* from = static_cast<const char*>(t->src) + t->copied;
        // copy_to is final (nothing in the operation reads it), so where
        // the algorithm says the output is large it is written around the
        // cache like a final receive, sparing the cache for the blocks still
        // to come.
        if (t->copy_nontemporal) {
          StreamingCopy(to, from, t->done - t->copied);
        } else {
          CopyBytes(to, from, t->done - t->copied);
        }
        t->copied = t->done;
      }
    }
    if (all_idle) return Status::Ok();
    LOOM_TRY(AbortStatus());
    moved_since_sleep |= moved;
    if (PollAgain(moved, spin)) continue;
    if (deadline.expired()) {
      std::string who;
      for (Connection* c : active) {
        if (!c->idle()) who += (who.empty() ? "" : ", ") + c->Describe() + WaitChain(*c);
      }
      bool culprit = false;
      const std::string cause = ExplainTimeout(active, &culprit);
      return TimeoutError("no progress before the deadline; still waiting on " + who +
                          (cause.empty() ? "" : "; " + cause) +
                          (culprit ? "" : " (raise LOOM_TIMEOUT_MS if the peer is only slow)"));
    }
    if (options_.wait_reporter) NoteSleep(active, moved_since_sleep);
    moved_since_sleep = false;
    LOOM_TRY(Sleep(active, deadline));
    spin.Reset();
  }
}

void Engine::NoteSleep(const std::vector<Connection*>& active, bool moved) {
  const auto now = std::chrono::steady_clock::now();
  if (moved || wait_since_ == std::chrono::steady_clock::time_point{}) {
    wait_since_ = now;
    if (wait_published_) {
      options_.wait_reporter->Withdraw();
      wait_published_ = false;
    }
    return;
  }
  if (wait_published_ || now - wait_since_ < wait_threshold_) return;
  options_.wait_reporter->Publish(CurrentWait(active));
  wait_published_ = true;
}

WaitReport Engine::CurrentWait(const std::vector<Connection*>& active) const {
  WaitReport w;
  w.run = runs_;
  if (wait_since_ != std::chrono::steady_clock::time_point{}) {
    w.waited_ms = static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::steady_clock::now() - wait_since_)
                                            .count());
  }
  for (Connection* c : active) {
    if (c->idle()) continue;
    WaitEdge e;
    e.peer = PeerOf(c);
    e.over_network = !c->uses_doorbell();
    if (!e.over_network) {
      std::optional<PeerWait> pw = c->PeerWaitingOn();
      e.peer_stopped = pw && pw->stopped;
    }
    w.waits.push_back(e);
  }
  // Every link, the idle ones too: a send the engine has finished may still
  // sit unacknowledged in the kernel, and it is what the peer waits for.
  for (const auto& c : connections_) {
    if (c == nullptr) continue;
    if (std::optional<LinkStall> st = c->SendStall()) w.stalls.push_back(*st);
  }
  return w;
}

std::string Engine::ExplainTimeout(const std::vector<Connection*>& active, bool* culprit) {
  if (!options_.wait_reporter) return "";
  WaitReport mine = CurrentWait(active);
  // Published now if not yet (a wait shorter than the threshold): a rank
  // timing out a moment later may need it.
  if (!wait_published_) {
    options_.wait_reporter->Publish(mine);
    wait_published_ = true;
  }
  return options_.wait_reporter->Explain(mine, culprit);
}

bool Engine::PollAgain(bool moved, SpinTimer& spin) const {
  if (moved) {
    spin.Reset();
    return true;
  }
  if (spin.Over()) return false;
  Relax();
  return true;
}

Status Engine::AbortStatus() const {
  if (options_.abort == nullptr || !options_.abort->load(std::memory_order_relaxed)) {
    return Status::Ok();
  }
  return options_.abort_status ? options_.abort_status() : RemoteError("communicator aborted");
}

void Engine::Relax() const {
  if (options_.yield_in_spin) {
    sched_yield();
  } else {
    CpuRelax();
  }
}

Status Engine::AfterGrace(Status gone, Deadline deadline) {
  if (gone.ok()) return gone;
  const auto now = std::chrono::steady_clock::now();
  if (peer_gone_since_ == std::chrono::steady_clock::time_point{}) peer_gone_since_ = now;
  if (now - peer_gone_since_ >= kPeerGoneGrace || deadline.expired()) return gone;
  return Status::Ok();
}

template <typename Recheck, typename Checks>
Status Engine::NapOnDoorbell(int64_t cap_us, Deadline deadline, Recheck&& recheck,
                             Checks&& checks) {
  Doorbell* bell = options_.doorbell;
  const uint32_t seen = bell->counter.load(std::memory_order_seq_cst);
  bell->sleeping.fetch_add(1, std::memory_order_seq_cst);
  // Re-check after announcing the nap: a peer that wrote before seeing
  // `sleeping` has bumped the counter, so the futex returns at once.
  Result<bool> moved = recheck();
  Status status = moved.status();
  if (status.ok() && !moved.value()) {
    status = checks();
    if (status.ok()) {
      const int64_t us = std::min<int64_t>(cap_us, deadline.RemainingMs(1000) * 1000 + 1);
      timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>((us % 1000000) * 1000)};
      Futex(&bell->counter, FUTEX_WAIT, seen, &ts);
    }
  }
  bell->sleeping.fetch_sub(1, std::memory_order_seq_cst);
  return status;
}

Result<std::span<const char* const>> Engine::SmallExchange(OpKind kind, const void* mine,
                                                           size_t bytes, Deadline deadline,
                                                           uint8_t step) {
  if (!small_ok_ || bytes > kSmallSlotBytes) {
    return InternalError("a small collective of " + std::to_string(bytes) +
                         " bytes cannot go through shared-memory slots here");
  }
  const uint64_t k = small_seq_;
  SmallSlot& own = options_.small_slots[k % 2];
  own.bytes = static_cast<uint32_t>(bytes);
  own.kind = static_cast<uint8_t>(kind);
  own.step = step;
  if (mine != nullptr && bytes > 0) std::memcpy(own.data, mine, bytes);
  TsanRelease(options_.small_tsan_key);
  own.serial.store(k + 1, std::memory_order_release);
  for (const PeerMailboxView& m : mailboxes_) {
    if (m.bell != nullptr) RingDoorbell(m.bell);
  }
  small_views_[options_.rank] = own.data;
  small_seen_[options_.rank] = k + 1;
  Status s = SmallWait(kind, bytes, step, deadline);
  if (!s.ok()) return s;
  if (published_wait_ != kNotWaiting) PublishWait(kNotWaiting);
  ++small_seq_;
  // Every peer has read the slot the next small collective writes (it
  // published this one after reading that one, two ago): ask for its first
  // line in exclusive state now, while the caller reduces and comes back,
  // rather than when the next call writes it, off the next call's path.
  PrefetchForWrite(&options_.small_slots[small_seq_ % 2]);
  return std::span<const char* const>(small_views_);
}

// Polls the peers' slots of the current small collective like Run polls
// connections: spin, then sleep on the doorbell (peers ring it after
// publishing), checking liveness, mismatches and the deadline.
Status Engine::SmallWait(OpKind kind, size_t bytes, uint8_t step, Deadline deadline) {
  const uint64_t k = small_seq_;
  const size_t n = connections_.size();
  auto have = [&](size_t p) { return small_seen_[p] == k + 1; };
  size_t missing = 0;
  for (size_t p = 0; p < n; ++p) missing += have(p) ? 0 : 1;
  auto poll = [&]() -> Result<bool> {
    bool moved = false;
    for (size_t p = 0; p < n; ++p) {
      if (have(p)) continue;
      const SmallSlot& slot = mailboxes_[p].slots[k % 2];
      if (slot.serial.load(std::memory_order_acquire) != k + 1) continue;
      TsanAcquire(mailboxes_[p].tsan_key);
      if (slot.kind != static_cast<uint8_t>(kind) || slot.bytes != bytes || slot.step != step) {
        return InvalidUsage("mismatched operations: " + connections_[p]->Describe() + " runs " +
                            DescribeSmall(static_cast<OpKind>(slot.kind), slot.bytes, slot.step) +
                            " where this rank runs " + DescribeSmall(kind, bytes, step) +
                            "; every rank must issue the same collectives with the same counts "
                            "in the same order");
      }
      // The serial's line has arrived; ask for the data's other lines all
      // at once, so their trips from the peer's core overlap instead of
      // following one another as the caller's copy reaches each.
      for (size_t at = kCacheLineBytes - offsetof(SmallSlot, data); at < bytes;
           at += kCacheLineBytes) {
        __builtin_prefetch(slot.data + at);
      }
      small_views_[p] = slot.data;
      small_seen_[p] = k + 1;
      --missing;
      moved = true;
    }
    return moved;
  };
  SpinTimer spin(std::chrono::microseconds(options_.spin_us));
  peer_gone_since_ = {};
  for (;;) {
    LOOM_ASSIGN_OR_RETURN(bool moved, poll());
    if (missing == 0) return Status::Ok();
    LOOM_TRY(AbortStatus());
    if (PollAgain(moved, spin)) continue;
    int first_missing = -1;
    for (size_t p = 0; p < n; ++p) {
      if (have(p)) continue;
      if (first_missing < 0) first_missing = static_cast<int>(p);
      // A message from a peer that has not published its part: it runs
      // another operation here (once it had published it could be ahead,
      // in the next operation, legitimately; it publishes before sending).
      // small_ok_: every connection is shared memory, with its PeerMemory.
      if (std::optional<MessageHeader> h = connections_[p]->peer_memory()->PeekIncoming();
          h && mailboxes_[p].slots[k % 2].serial.load(std::memory_order_acquire) != k + 1) {
        return InvalidUsage("mismatched operations: " + connections_[p]->Describe() + " sent " +
                            std::to_string(h->bytes) + " bytes for " +
                            OpKindName(static_cast<OpKind>(h->kind)) + " where this rank runs " +
                            DescribeSmall(kind, bytes, step) + "; every rank must issue the same "
                            "collectives with the same counts in the same order");
      }
    }
    if (deadline.expired()) {
      // Described only now: building it before every nap cost a string and
      // its allocations each time a wait outlasted the spin.
      std::string who;
      for (size_t p = 0; p < n; ++p) {
        if (have(p)) continue;
        who +=
            (who.empty() ? "" : ", ") + connections_[p]->Describe() + WaitChain(*connections_[p]);
      }
      return TimeoutError("no progress before the deadline; still waiting on " + who +
                          " for its part of " + DescribeSmall(kind, bytes, step) +
                          " (raise LOOM_TIMEOUT_MS if the peer is only slow)");
    }
    PublishWait(EncodeWait(first_missing, false));
    // Peers ring the doorbell after publishing.
    LOOM_TRY(NapOnDoorbell(20000, deadline, poll, [&]() -> Status {
      for (size_t p = 0; p < n; ++p) {
        if (!have(p)) LOOM_TRY(AfterGrace(connections_[p]->CheckPeerAlive(), deadline));
      }
      return Status::Ok();
    }));
    spin.Reset();
  }
}

// A peer may legitimately be one operation ahead: having finished the one
// this rank still runs, it starts the next small collective. But a peer
// publishes only after sending all it owes for the earlier operations, so
// if this rank still awaits a message from it and nothing more has arrived
// (checked after seeing the slot), the peer skipped that message: it runs
// a different sequence of operations.
Status Engine::CheckSmallMismatch(Connection* c, int peer) const {
  if (!small_ok_ || peer < 0) return Status::Ok();
  const SmallSlot& slot = mailboxes_[peer].slots[small_seq_ % 2];
  if (slot.serial.load(std::memory_order_acquire) != small_seq_ + 1) return Status::Ok();
  PeerMemory* m = c->peer_memory();
  if (m == nullptr || !m->RecvStarved()) return Status::Ok();
  return InvalidUsage("mismatched operations: " + c->Describe() + " runs " +
                      DescribeSmall(static_cast<OpKind>(slot.kind), slot.bytes, slot.step) +
                      " (through shared memory) where this rank waits for a message from it; "
                      "every rank must issue the same collectives with the same counts in the "
                      "same order");
}

int Engine::PeerOf(const Connection* c) const {
  for (size_t p = 0; p < connections_.size(); ++p) {
    if (connections_[p].get() == c) return static_cast<int>(p);
  }
  return -1;
}

void Engine::PublishWait(int64_t wait) {
  if (options_.doorbell == nullptr || wait == published_wait_) return;
  options_.doorbell->waiting_on.store(wait, std::memory_order_relaxed);
  published_wait_ = wait;
}

std::string Engine::WaitChain(const Connection& c) const {
  std::string chain;
  std::vector<bool> named(connections_.size(), false);
  if (int first = PeerOf(&c); first >= 0) named[first] = true;
  const Connection* at = &c;
  for (size_t hop = 0; at != nullptr && hop < connections_.size(); ++hop) {
    std::optional<PeerWait> w = at->PeerWaitingOn();
    if (w && w->stopped) {
      // Not a wait-for cycle: the process holds still and makes no progress.
      chain += hop == 0 ? ", whose process is stopped (SIGSTOP or a debugger) and made no progress"
                        : ", whose process is stopped (SIGSTOP or a debugger)";
      break;
    }
    if (!w || w->peer < 0 || w->peer >= size() || named[w->peer]) break;
    named[w->peer] = true;
    if (w->peer == options_.rank) {
      chain += ", which is waiting on this rank";
      break;
    }
    chain += ", which is waiting on rank " + std::to_string(w->peer) +
             (w->over_network ? " over the network" : " on this host");
    if (w->over_network) break;
    at = connection(w->peer);
  }
  return chain;
}

// Sleeps until a peer may have moved data: futex on the doorbell when only
// shared memory is pending, poll() on sockets (+ the wake eventfd) otherwise.
// Short caps keep abort, deadline and peer-liveness checks responsive.
// Before sleeping, publishes whom this rank waits on (a network peer first:
// a same-host peer stuck behind us is more likely a victim than a cause).
Status Engine::Sleep(const std::vector<Connection*>& active, Deadline deadline) {
  std::vector<pollfd>& fds = fds_;
  fds.clear();
  bool shm_pending = false;
  const bool publish = options_.doorbell != nullptr;
  int64_t wait = kNotWaiting;
  bool wait_over_network = false;
  for (Connection* c : active) {
    if (c->idle()) continue;
    if (c->uses_doorbell()) {
      shm_pending = true;
      if (publish && wait == kNotWaiting) wait = EncodeWait(PeerOf(c), false);
    } else {
      c->AppendPollFds(&fds);
      if (publish && !wait_over_network) {
        wait = EncodeWait(PeerOf(c), true);
        wait_over_network = true;
      }
    }
  }
  PublishWait(wait);
  if (shm_pending && options_.doorbell != nullptr) {
    auto progress = [&]() -> Result<bool> {
      bool moved = false;
      for (Connection* c : active) {
        if (c->idle() || !c->uses_doorbell()) continue;
        LOOM_ASSIGN_OR_RETURN(bool r, c->Progress());
        moved |= r;
      }
      return moved;
    };
    // Only with nothing left to read is a vanished peer an error; and only
    // after a short grace: a peer that exited because another rank failed
    // first leaves that rank's failure notice on its way here
    // (Options::abort), and that rank is the one to name.
    auto checks = [&]() -> Status {
      for (Connection* c : active) {
        if (c->idle() || !c->uses_doorbell()) continue;
        LOOM_TRY(CheckSmallMismatch(c, PeerOf(c)));
        LOOM_TRY(AfterGrace(c->CheckPeerAlive(), deadline));
      }
      return Status::Ok();
    };
    // With sockets pending too, keep the nap short so they are polled.
    LOOM_TRY(NapOnDoorbell(fds.empty() ? 20000 : 200, deadline, progress, checks));
    if (fds.empty()) return Status::Ok();
  }
  if (!fds.empty() || !shm_pending) {
    if (wake_fd_ >= 0) fds.push_back(pollfd{wake_fd_, POLLIN, 0});
    int timeout_ms = static_cast<int>(deadline.RemainingMs(shm_pending ? 0 : 50));
    int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) return SystemError("poll", errno);
    if (wake_fd_ >= 0 && rc > 0 && (fds.back().revents & POLLIN)) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof(v));
    }
  }
  return Status::Ok();
}

}  // namespace loom
