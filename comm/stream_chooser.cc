#include "comm/stream_chooser.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace loom {
namespace {

constexpr double kUnseen = std::numeric_limits<double>::infinity();

}  // namespace

int StreamChooser::SlotOf(OpKind kind, size_t bytes) {
  const int k = static_cast<int>(kind);
  if (bytes < kMinBytes || k < 0 || k >= kKinds) return -1;
  const int cls = std::bit_width(bytes) - std::bit_width(kMinBytes);
  return k * kClasses + std::min(cls, kClasses - 1);
}

StreamChooser::Plan StreamChooser::Next(OpKind kind, size_t bytes) {
  Plan plan;
  plan.stream = latest_;
  plan.slot = SlotOf(kind, bytes);
  if (plan.slot < 0) return plan;
  Class& c = classes_[plan.slot];
  if (!c.init) {
    c.init = true;
    c.way = latest_;
    c.next_explore = first_explore_;
    c.way_recent.fill(kUnseen);
    c.other_best = kUnseen;
  }
  const uint64_t i = c.calls;
  const bool exploring = i >= c.next_explore && i < c.next_explore + kExploreCalls;
  plan.stream = exploring ? !c.way : c.way;
  plan.counted = exploring ? i > c.next_explore : !c.after_explore;
  return plan;
}

std::optional<StreamChooser::Exploration> StreamChooser::Record(const Plan& plan, size_t bytes,
                                                                double us) {
  if (plan.slot < 0) return std::nullopt;
  Class& c = classes_[plan.slot];
  const uint64_t i = c.calls++;
  const double ns_per_byte = us * 1e3 / static_cast<double>(bytes);
  const bool exploring = i >= c.next_explore && i < c.next_explore + kExploreCalls;
  if (!exploring) {
    if (plan.counted) c.way_recent[c.way_next++ % kRecent] = ns_per_byte;
    c.after_explore = false;
    return std::nullopt;
  }
  if (plan.counted) c.other_best = std::min(c.other_best, ns_per_byte);
  if (i + 1 < c.next_explore + kExploreCalls) return std::nullopt;

  // The exploration's last call: keep the faster way.
  ++explorations_;
  Exploration found;
  found.kept_ns_per_byte = *std::min_element(c.way_recent.begin(), c.way_recent.end());
  found.other_ns_per_byte = c.other_best;
  found.switched = c.other_best < found.kept_ns_per_byte * kSwitchGain;
  if (found.switched) {
    c.way = !c.way;
    ++switches_;
    c.period = kRecheckPeriod;
    c.after_explore = false;  // the next call goes on the way just timed
    c.way_recent.fill(kUnseen);
    c.way_recent[0] = c.other_best;
    c.way_next = 1;
  } else {
    // A clear loss makes the next exploration rarer (from a recheck's short
    // period straight to twice the usual); a near thing keeps looking.
    c.period = c.other_best > found.kept_ns_per_byte * kClearLoss
                   ? std::min(std::max(c.period, kMinPeriod) * 2, kMaxPeriod)
                   : kMinPeriod;
    c.after_explore = true;
  }
  c.other_best = kUnseen;
  c.next_explore = i + 1 + c.period;
  latest_ = c.way;
  found.stream = c.way;
  return found;
}

}  // namespace loom
