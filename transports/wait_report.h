// What a rank stalled in a long wait tells the other ranks, and the hook
// through which the engine tells it: the communicator publishes it where
// ranks on other hosts can read it (comm/wait_diagnosis.h, the rendezvous
// store), so that a rank that times out can follow the wait across hosts
// to its cause instead of naming its first network hop.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "transports/transport.h"

namespace loom {

// One peer a waiting rank waits on (to receive from it, or for room to send).
struct WaitEdge {
  int peer = -1;
  bool over_network = false;
  bool peer_stopped = false;  // a same-host peer whose process is stopped
};

// A rank's long wait: whom it waits on, and which of its links do not get
// its data through (that link evidence is what locates a cut: every rank of
// a cut ring waits on another, and only the senders across the cut can tell).
struct WaitReport {
  uint64_t run = 0;        // the engine's count of Runs, to tell one wait from the next
  uint32_t waited_ms = 0;  // without progress, when reported
  std::vector<WaitEdge> waits;
  std::vector<LinkStall> stalls;
};

// Implemented by the communicator (comm/wait_diagnosis.h); called on the
// thread running the engine, one call at a time.
class WaitReporter {
 public:
  virtual ~WaitReporter() = default;
  // How long a wait goes without progress before it is published.
  virtual std::chrono::milliseconds threshold() const = 0;
  // Publishes this rank's wait (once per long wait; one small write, never
  // waiting for an answer).
  virtual void Publish(const WaitReport& wait) = 0;
  // The published wait ended with progress.
  virtual void Withdraw() = 0;
  // At the deadline: the cause, as the other ranks' reports show it, in a
  // sentence that names ranks and hosts ("" when they show nothing). Bounded
  // by a short deadline of its own. `culprit` says whether it names one.
  virtual std::string Explain(const WaitReport& mine, bool* culprit) = 0;
};

}  // namespace loom
