// ProcessGroupLoom::monitoredBarrier: Gloo's debugging barrier, in which
// rank 0 names the ranks that did not arrive within the timeout. It runs
// through the group's store, not loom: a loom receive from a rank that never
// comes would hold every later operation of the group behind it (one queue,
// in issue order), and rank 0 must tell which of the other ranks arrived.
#include <c10/util/Exception.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "integrations/pytorch/csrc/process_group_loom.h"

namespace loom_torch {
namespace {

using Clock = std::chrono::steady_clock;

// Asks the store whether `key` is there until it is or `deadline` passes,
// first every millisecond, backing off to every 50 ms: a barrier that waits
// long (the group's timeout can be half an hour) costs the store little.
bool WaitForKey(c10d::Store& store, const std::string& key, Clock::time_point deadline) {
  std::chrono::milliseconds pause{1};
  for (;;) {
    if (store.check({key})) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::string Join(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

void ProcessGroupLoom::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  const std::chrono::milliseconds timeout =
      opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  // Every rank of the group calls it in the same order, so the count names
  // this call's keys on every rank.
  const std::string prefix = "loom_monitored_barrier/" + std::to_string(monitored_calls_++) + "/";
  const std::string release = prefix + "release";
  const std::vector<uint8_t> yes{'1'}, no{'0'};

  if (rank_ != 0) {
    store_->set(prefix + std::to_string(rank_), yes);
    // Only rank 0 judges; the others wait for its verdict as long as the
    // group's own timeout allows, as on Gloo.
    const bool released = WaitForKey(*store_, release, Clock::now() + std::max(timeout, timeout_));
    TORCH_CHECK(released && store_->get(release) == yes, "Rank ", rank_,
                " successfully reached monitoredBarrier, but received errors while waiting for "
                "send/recv from rank 0. Please check rank 0 logs for faulty rank.",
                released ? " (rank 0 reported a failed rank)"
                         : " (no word from rank 0 within the group's timeout)");
    return;
  }

  const auto start = Clock::now();
  const auto deadline = start + timeout;
  std::vector<int> arrived, missing;
  auto fail = [&](const std::string& error) {
    store_->set(release, no);  // the waiting ranks fail at once, naming rank 0
    TORCH_CHECK(false, error);
  };
  if (wait_all_ranks) {
    // Every rank gets the whole timeout, so all the late ones are named.
    for (int r = 1; r < size_; ++r) {
      if (!WaitForKey(*store_, prefix + std::to_string(r), deadline)) missing.push_back(r);
    }
    if (!missing.empty()) {
      fail("[Rank 0]: Ranks " + Join(missing) + " failed to pass monitoredBarrier in " +
           std::to_string(timeout.count()) + " ms");
    }
  } else {
    // Fail fast, on the first late rank in rank order.
    for (int r = 1; r < size_; ++r) {
      if (Clock::now() >= deadline) {
        fail("Rank 0 timed out in monitoredBarrier after " + std::to_string(timeout.count()) +
             " ms. " +
             (arrived.empty() ? std::string("No ranks successfully processed in monitoredBarrier.")
                              : "Successfully processed ranks: " + Join(arrived)));
      }
      if (!WaitForKey(*store_, prefix + std::to_string(r), deadline)) {
        fail("[Rank 0]: Rank " + std::to_string(r) + " failed to pass monitoredBarrier in " +
             std::to_string(timeout.count()) + " ms");
      }
      arrived.push_back(r);
    }
  }
  store_->set(release, yes);
}

}  // namespace loom_torch
