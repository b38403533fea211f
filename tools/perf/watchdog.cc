// The -T watchdog of `loom perf`.
#include "tools/perf/watchdog.h"

#include <algorithm>

namespace loom::perf {

Watchdog::Watchdog(std::chrono::milliseconds limit, std::function<void()> on_expire)
    : limit_(limit), on_expire_(std::move(on_expire)) {
  if (limit_.count() > 0) thread_ = std::thread([this] { Poll(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t Watchdog::NowNs() {
  // Never 0 (0 means "idle"): steady_clock counts from boot or earlier.
  return std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now().time_since_epoch())
                                  .count());
}

void Watchdog::Poll() {
  // A tenth of the limit, at most 100 ms: the abort comes at most that late.
  const auto period = std::min<std::chrono::milliseconds>(
      std::max<std::chrono::milliseconds>(limit_ / 10, std::chrono::milliseconds(1)),
      std::chrono::milliseconds(100));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stop_; })) {
    const int64_t started = started_ns_.load(std::memory_order_relaxed);
    if (started == 0 || NowNs() - started <= limit_.count() * 1'000'000) continue;
    expired_.store(true, std::memory_order_release);
    lock.unlock();
    on_expire_();
    return;
  }
}

}  // namespace loom::perf
