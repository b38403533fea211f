// -T/--timeout of `loom perf`: a thread that aborts the run when one
// operation has been in progress for longer than the limit, as nccl-tests
// aborts its communicators when a stream synchronisation outlasts -T.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace loom::perf {

// Owns one polling thread (none when the limit is 0). Begin/End bracket an
// operation from the bench thread: two relaxed atomic stores, cheap enough for
// the timed loop. When an operation has run longer than the limit the
// watchdog calls on_expire once, from its own thread (it must be safe from
// any thread: Communicator::Abort is), and Expired() turns true. Destroying
// the watchdog stops and joins the thread; it never calls on_expire after.
class Watchdog {
 public:
  // limit 0: disabled, Begin/End do nothing that matters, no thread.
  Watchdog(std::chrono::milliseconds limit, std::function<void()> on_expire);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Begin() {
    if (limit_.count() > 0) started_ns_.store(NowNs(), std::memory_order_relaxed);
  }
  void End() { started_ns_.store(0, std::memory_order_relaxed); }
  bool Expired() const { return expired_.load(std::memory_order_acquire); }
  std::chrono::milliseconds limit() const { return limit_; }

  // Begin on construction, End on destruction.
  class Scope {
   public:
    explicit Scope(Watchdog& w) : w_(w) { w_.Begin(); }
    ~Scope() { w_.End(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog& w_;
  };

 private:
  static int64_t NowNs();
  void Poll();

  const std::chrono::milliseconds limit_;
  const std::function<void()> on_expire_;
  std::atomic<int64_t> started_ns_{0};  // 0: no operation in progress
  std::atomic<bool> expired_{false};
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace loom::perf
