// Engine: owns one Connection per peer and drives posted Transfers to
// completion, polling briefly and then sleeping (never spinning without
// bound: 8 ranks on 2 cores must still make progress).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/base/status.h"
#include "transports/transport.h"

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

 private:
  Status RunUntilDone(std::span<Transfer> transfers, Deadline deadline);
  Status Sleep(const std::vector<Connection*>& active, Deadline deadline);
  int PeerOf(const Connection* c) const;  // -1 if not ours
  // Sets the doorbell's waiting_on (only when it changes: peers ring it).
  void PublishWait(int64_t wait);
  // ", which is waiting on rank 3 over the network": the chain of same-host
  // peers blocked behind `c`, as they published it.
  std::string WaitChain(const Connection& c) const;

  Options options_;
  std::vector<std::unique_ptr<Connection>> connections_;
  int wake_fd_ = -1;  // eventfd in every poll set, written by Wake()
  // Reused by every Run (one at a time): no allocation on the hot path.
  std::vector<Connection*> active_;
  std::vector<Transfer*> copies_;  // sends with copy_to
  std::vector<pollfd> fds_;
  int64_t published_wait_ = kNotWaiting;
  // When this Run first found a same-host peer process gone (zero: not yet).
  std::chrono::steady_clock::time_point peer_gone_since_{};
  static constexpr std::chrono::milliseconds kPeerGoneGrace{300};
};

}  // namespace loom
