// The monotonic clock at tick resolution (a few milliseconds): for
// deadlines of seconds and "how long ago" timestamps on every operation,
// where steady_clock::now() would cost several times more.
#pragma once

#include <time.h>

#include <chrono>

namespace loom {

// Same epoch as std::chrono::steady_clock (CLOCK_MONOTONIC), up to one tick
// behind it.
inline std::chrono::steady_clock::time_point CoarseNow() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

}  // namespace loom
