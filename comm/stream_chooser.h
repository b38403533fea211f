// Whether a rank's sends into the shared-memory FIFOs stream (non-temporal
// stores) or go through the cache, chosen again and again while the
// communicator runs, from the times of its own collectives.
//
// Setup times a ring step both ways once (shm_calibration.cc), but which way
// wins can change under a running job: a VM's host may move its vCPUs
// between sharing a cache (caching wins) and not (streaming wins) within
// seconds, so one timing at setup can choose wrong. So for every collective and size class (a power of
// two of bytes, from kMinBytes) the chooser keeps the way that has been
// faster and now and then runs a few calls the other way (an exploration),
// switching when those were faster. An exploration that loses by far is
// repeated less and less often (down to once in kMaxPeriod + kExploreCalls
// calls of its class), so a job that keeps its mode pays little for the
// looking.
//
// Ranks whose setup timings were alike (both clear, or both not) run the
// same schedule on the same sequence of collectives, so the ranks of a ring
// usually explore together and time the same state. Each decides alone:
// how a rank writes into its FIFOs is its own affair.
// Pure bookkeeping: no clock, no I/O (the dispatcher times, dispatch.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "transports/transport.h"

namespace loom {

class StreamChooser {
 public:
  // Classes below this go the way of the latest decision: their calls are
  // too short to time apart from noise, and few of their pieces stream.
  static constexpr size_t kMinBytes = size_t{16} << 10;
  // An exploration: kExploreCalls calls the other way, the first not counted
  // (it meets the state the old way left behind).
  static constexpr uint32_t kExploreCalls = 3;
  // Calls of a class before its first exploration: the way kept is judged
  // by the fastest of them, and the first calls of a process are often slow
  // for reasons of their own (ranks arriving apart, pages touched first).
  static constexpr uint32_t kFirstExplore = 4;
  static constexpr uint32_t kSettledFirstExplore = 64;
  static constexpr uint32_t kMinPeriod = 16;   // calls between explorations, at first
  static constexpr uint32_t kMaxPeriod = 128;  // ... and after losing explorations
  // After a switch the old way is explored again this soon, so that a
  // switch on a noisy finding costs a few calls, not a period.
  static constexpr uint32_t kRecheckPeriod = 4;
  // The other way must be this much faster to take over (noise margin).
  // The kept way is judged by the best of its last kRecent calls, the
  // explored one by the best of two, which under noise favours the kept way
  // a little more: switching needs a clear finding.
  static constexpr double kSwitchGain = 0.95;
  // An exploration that was this much slower makes the next one rarer.
  static constexpr double kClearLoss = 1.25;
  // The way kept is judged by the fastest of its last kRecent counted calls.
  static constexpr uint32_t kRecent = 4;

  // `settled`: setup found the initial way clearly faster
  // (kClearStreamMargin), so the first explorations wait kSettledFirstExplore
  // calls: a short run (a benchmark's 25 calls per size) then pays nothing
  // for them, and a long one still finds a change of the machine.
  explicit StreamChooser(bool initial_stream, bool settled = false)
      : latest_(initial_stream), first_explore_(settled ? kSettledFirstExplore : kFirstExplore) {}

  // The way the next call of `kind` moving `bytes` (a rank's buffer) sends,
  // and whether its time counts (Record).
  struct Plan {
    bool stream = false;
    int slot = -1;  // the size class, -1: not timed
    bool counted = false;
  };
  Plan Next(OpKind kind, size_t bytes);
  // The call planned by Next took `us`; call once per Next that completed,
  // in order. When the call ended an exploration, what it found (to log).
  struct Exploration {
    bool stream = false;           // the way kept from now on
    bool switched = false;         // ... is the way just explored
    double kept_ns_per_byte = 0;   // the way kept before: its recent best
    double other_ns_per_byte = 0;  // the way explored: its best
  };
  std::optional<Exploration> Record(const Plan& plan, size_t bytes, double us);

  // Diagnostics and tests.
  bool latest() const { return latest_; }
  uint64_t explorations() const { return explorations_; }
  uint64_t switches() const { return switches_; }

 private:
  static constexpr int kKinds = 10;    // OpKind values are below this
  static constexpr int kClasses = 40;  // log2(bytes) from log2(kMinBytes)
  struct Class {
    bool init = false;
    bool way = false;           // the way that has been faster
    uint64_t calls = 0;         // calls of this class so far
    uint64_t next_explore = 0;  // the call that starts the next exploration
    uint32_t period = kMinPeriod;
    bool after_explore = false;  // the next call is the first back on `way`
    // ns per byte of `way`'s last kRecent counted calls (a ring), so that
    // an exploration compares with the way's present, not with its best
    // before the machine changed.
    std::array<double, kRecent> way_recent{};
    uint32_t way_next = 0;  // where the next of way_recent goes
    double other_best = 0;  // fastest ns per byte of the exploration under way
  };
  static int SlotOf(OpKind kind, size_t bytes);
  bool latest_;
  uint32_t first_explore_;
  uint64_t explorations_ = 0, switches_ = 0;
  std::array<Class, size_t{kKinds} * kClasses> classes_{};
};

}  // namespace loom
