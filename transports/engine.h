// Engine: owns one Connection per peer and drives posted Transfers to
// completion, polling briefly and then sleeping (never spinning without
// bound: 8 ranks on 2 cores must still make progress).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "transports/transport.h"
#include "transports/wait_report.h"

namespace loom {

// Where a sleeping engine waits for shared-memory traffic: a futex word that
// peers bump (and wake) after writing to or reading from our FIFOs.
// It also says whom the rank is blocked on while it sleeps in Run, so a
// same-host peer that times out waiting for this rank can name the rank
// further down the chain (the one across a cut link, say).
inline constexpr int64_t kNotWaiting = -1;
inline int64_t EncodeWait(int peer, bool over_network) {
  return int64_t{peer} * 2 + (over_network ? 1 : 0);
}
struct Doorbell {
  std::atomic<uint32_t> counter{0};
  std::atomic<uint32_t> sleeping{0};
  // kNotWaiting, or EncodeWait(peer, over_network) while sleeping in Run.
  std::atomic<int64_t> waiting_on{kNotWaiting};
};
void RingDoorbell(Doorbell* bell);

// One rank's part of a small collective, in its shared-memory mailbox where
// every peer of a one-host communicator reads it: the k-th small collective
// uses slot k % 2 (a rank reuses a slot only after seeing every peer's next
// contribution, so every peer has finished reading it). Inputs of up to 48
// bytes share the serial's cache line; larger ones take the lines after it.
// Up to 1 KiB, a slot that stays in place beats a message that walks the
// FIFO: one cache line handed over instead of a header and a payload.
inline constexpr size_t kSmallSlotBytes = 1024;
// Lines that ranks write in turn in shared memory stay this far apart: x86
// cores fetch cache lines in aligned pairs (the adjacent-line prefetcher),
// so a line written by one rank next to one written by another moves
// between the cores as if they shared it.
inline constexpr size_t kLinePairBytes = 128;
inline constexpr size_t kCacheLineBytes = 64;  // x86's line, the unit a prefetch fetches

// Aligned to a line pair: slot k % 2 starts a pair of its own, away from the
// other slot, which the peers may still read, and from whatever precedes it
// in the mailbox.
struct alignas(kLinePairBytes) SmallSlot {
  std::atomic<uint64_t> serial{0};  // k + 1 once the k-th contribution is here
  uint32_t bytes = 0;               // the operation's size (every rank's is the same)
  uint8_t kind = 0;                 // OpKind
  uint8_t step = 0;                 // 0: a small collective; else a step of a larger one
  alignas(8) char data[kSmallSlotBytes];
};
static_assert(offsetof(SmallSlot, data) == 16 && sizeof(SmallSlot) % kLinePairBytes == 0);

class Engine {
 public:
  struct Options {
    int rank = 0;
    int spin_us = 50;            // poll this long after the last progress before sleeping
    bool yield_in_spin = false;  // sched_yield between polls (more ranks than cores)
    Doorbell* doorbell = nullptr;  // this rank's doorbell (shared memory), if any shm peer
    const std::atomic<bool>* abort = nullptr;
    // Turns an abort into the Status to return (e.g. the async error that caused it).
    std::function<Status()> abort_status;
    // This rank's two small-collective slots (in its mailbox), when every
    // peer is a shared-memory peer on this host; else null.
    SmallSlot* small_slots = nullptr;
    void* small_tsan_key = nullptr;  // TSan builds: this rank's slots' key (transports/tsan.h)
    // Every pair of ranks talks through shared memory (one host); every rank
    // computes the same value, so algorithms may shape messages by it.
    bool all_shm = false;
    // Publishes a Run's long wait for ranks on other hosts and explains a
    // timeout from theirs (transports/wait_report.h); null: a timeout names
    // only the chain of same-host peers.
    std::shared_ptr<WaitReporter> wait_reporter;
  };

  // connections[p] is the connection to rank p (null for this rank).
  Engine(Options options, std::vector<std::unique_ptr<Connection>> connections);
  ~Engine();

  int size() const { return static_cast<int>(connections_.size()); }
  Connection* connection(int peer) const { return connections_[peer].get(); }

  // Posts every transfer (in span order: the order per peer and direction is
  // the matching order) and progresses until all complete, an error, an
  // abort, or the deadline. On error, pending transfers are abandoned: the
  // communicator is unusable afterwards (its streams are out of step), and
  // the abandoned transfers' buffers must stay valid until the engine is
  // destroyed (a transport may still touch them until its connection closes).
  Status Run(std::span<Transfer> transfers, Deadline deadline);

  // Wakes a sleeping Run (after Abort).
  void Wake();

  // Small collectives through shared-memory slots (Options::small_slots,
  // and every peer's mailbox mapped): one slot per rank and op instead
  // of a message per peer.
  bool small_collectives() const { return small_ok_; }
  bool all_shm() const { return options_.all_shm; }
  // Publishes this rank's part of the next small collective (`bytes` of
  // `mine`, or only the size when `mine` is null) and waits until every
  // rank has published its own. Returns every rank's data in rank order,
  // valid until the next SmallExchange. `kind`, `bytes` and `step` must
  // match on every rank (a mismatch is named). `step` 0 is a small
  // collective itself; larger collectives exchange their own small records
  // (addresses, "done") with a step of their own, so that a rank in a
  // small collective never takes a peer's step of a larger one for its
  // input.
  Result<std::span<const char* const>> SmallExchange(OpKind kind, const void* mine, size_t bytes,
                                                     Deadline deadline, uint8_t step = 0);

 private:
  Status RunUntilDone(std::span<Transfer> transfers, Deadline deadline);
  class SpinTimer;
  Status Sleep(const std::vector<Connection*>& active, Deadline deadline);
  void Relax() const;  // between polls: a pause, or a yield when oversubscribed
  // After a poll: whether to poll again now (it moved, or the spin is not
  // over: then after a Relax); false once it is time to sleep.
  bool PollAgain(bool moved, SpinTimer& spin) const;
  Status AbortStatus() const;  // not OK once the communicator is aborted
  // Sleeps on this rank's doorbell for at most cap_us (and the deadline):
  // announces the nap, then runs `recheck` (true: something moved, no nap)
  // and `checks` (an error ends the wait) before the futex. Callables, not
  // std::functions: their captures would be allocated on every nap.
  // Defined in engine.cc, its only user.
  template <typename Recheck, typename Checks>
  Status NapOnDoorbell(int64_t cap_us, Deadline deadline, Recheck&& recheck, Checks&& checks);
  // `gone` (a vanished peer) once it has lasted kPeerGoneGrace, else OK.
  Status AfterGrace(Status gone, Deadline deadline);
  int PeerOf(const Connection* c) const;  // -1 if not ours
  // Sets the doorbell's waiting_on (only when it changes: peers ring it).
  void PublishWait(int64_t wait);
  // ", which is waiting on rank 3 over the network": the chain of same-host
  // peers blocked behind `c`, as they published it.
  std::string WaitChain(const Connection& c) const;
  // Long waits (Options::wait_reporter), before each sleep of a Run: a wait
  // starts at a sleep with progress since the last one, and is published
  // once it has lasted the reporter's threshold (withdrawn at progress).
  void NoteSleep(const std::vector<Connection*>& active, bool moved);
  // Whom this rank waits on and which of its links stall, now.
  WaitReport CurrentWait(const std::vector<Connection*>& active) const;
  // The timeout's cause through the reporter ("" without one); *culprit:
  // whether it names one.
  std::string ExplainTimeout(const std::vector<Connection*>& active, bool* culprit);

  Options options_;
  std::vector<std::unique_ptr<Connection>> connections_;
  int wake_fd_ = -1;  // eventfd in every poll set, written by Wake()
  // Reused by every Run (one at a time): no allocation on the hot path.
  std::vector<Connection*> active_;
  std::vector<Transfer*> copies_;  // sends with copy_to
  std::vector<pollfd> fds_;
  int64_t published_wait_ = kNotWaiting;
  // Small collectives: usable, how many done, every peer's mailbox, the views
  // returned, and k + 1 for each rank whose part of the k-th is in (so
  // nothing is reset between operations).
  bool small_ok_ = false;
  uint64_t small_seq_ = 0;
  std::vector<PeerMailboxView> mailboxes_;
  std::vector<const char*> small_views_;
  std::vector<uint64_t> small_seen_;
  // Sleep's check for a shared-memory peer already in a small collective
  // that this rank has not reached (mismatched operations).
  Status CheckSmallMismatch(Connection* c, int peer) const;
  Status SmallWait(OpKind kind, size_t bytes, uint8_t step, Deadline deadline);
  // When this Run first found a same-host peer process gone (zero: not yet).
  std::chrono::steady_clock::time_point peer_gone_since_{};
  // NoteSleep's state: Runs so far, when the current wait began (zero: none
  // yet in this Run), and whether it is published.
  uint64_t runs_ = 0;
  std::chrono::steady_clock::time_point wait_since_{};
  bool wait_published_ = false;
  std::chrono::milliseconds wait_threshold_{0};
  static constexpr std::chrono::milliseconds kPeerGoneGrace{300};
};

}  // namespace loom
