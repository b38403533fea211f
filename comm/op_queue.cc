#include "comm/op_queue.h"

#include <sched.h>

#include <algorithm>

#include "base/recycling_allocator.h"

namespace loom {

OpQueue::OpQueue(RunFn run, std::chrono::milliseconds op_timeout)
    : run_(std::move(run)), op_timeout_(op_timeout) {
  // Room now, so the first burst of non-blocking calls deeper than any
  // before first-touches no pages (a page fault costs several small
  // operations' time).
  queue_.Reserve(kQueueSlots);
  running_.resize(kWorkerBatch);  // constructed, so its pages are touched too
  running_.clear();
}

OpQueue::~OpQueue() {
  Stop();
  queue_.ForEach([](Op& op) { op->Finish(RemoteError("communicator destroyed")); });
}

void OpQueue::Start() {
  worker_ = std::thread([this] { WorkerLoop(); });
}

void OpQueue::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  worker_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

OpQueue::Op OpQueue::NewOp() {
  return std::allocate_shared<Work::State>(RecyclingAllocator<Work::State>());
}

Work OpQueue::Enqueue(Op op) {
  op->owner = this;
  Work work(op);  // the one reference count taken here
  std::unique_lock<std::mutex> lock(mu_);
  if (closed_.load()) {
    op->Finish(InvalidUsage("operation issued after Finalize"));
    return work;
  }
  queue_.push_back(std::move(op));
  // Stored before NotifyAndUnlock reads executing_ (both sequentially
  // consistent), as Release stores executing_ before it reads queued_:
  // either this call sees the claim given up and wakes the worker, or the
  // releasing claimant sees this op and does.
  queued_.store(queue_.size());
  ++issued_;
  NotifyAndUnlock(lock);
  return work;
}

bool OpQueue::ClaimIfIdle() {
  bool idle = false;
  if (!executing_.compare_exchange_strong(idle, true)) return false;
  // An op queued before this call by this thread is seen in queued_ (or
  // holds the claim, running): it runs first.
  if (queued_.load() != 0 || closed_.load()) {
    Release();
    return false;
  }
  return true;
}

void OpQueue::Release() {
  executing_.store(false);
  if (queued_.load() == 0 && drain_waiters_.load() == 0) return;
  // Taking mu_ orders this after a waiter's check of its condition: it is
  // either asleep (and notified) or has not yet looked.
  std::unique_lock<std::mutex> lock(mu_);
  NotifyAndUnlock(lock);
}

// Taking several ops at once keeps the worker off mu_ while the caller
// keeps issuing (on a busy core every contended lock costs).
bool OpQueue::RunFront(std::unique_lock<std::mutex>& lock, size_t max_ops) {
  bool idle = false;
  if (!executing_.compare_exchange_strong(idle, true)) return false;  // a claimant runs
  running_.clear();
  while (!queue_.empty() && running_.size() < max_ops) {
    running_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  queued_.store(queue_.size());
  lock.unlock();
  for (Op& op : running_) run_(*op);
  const size_t ran = running_.size();
  running_.clear();
  lock.lock();
  executing_.store(false);
  completed_ += ran;
  NotifyAndUnlock(lock);
  lock.lock();
  return true;
}

void OpQueue::NotifyAndUnlock(std::unique_lock<std::mutex>& lock) {
  const bool idle = !executing_.load();
  // Once: a worker told to wake is not told again until it sleeps again
  // (while the caller keeps the core, every call of a batch issued without
  // waiting would find it still asleep).
  const bool wake_worker = worker_asleep_ && !queue_.empty() && idle;
  if (wake_worker) worker_asleep_ = false;
  const bool drained = drain_waiters_.load() > 0 && completed_ == issued_ && idle;
  lock.unlock();
  if (wake_worker) worker_cv_.notify_one();
  if (drained) drained_cv_.notify_all();
}

void OpQueue::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // No polling here: a waiting caller runs queued ops itself (HelpUntil),
    // and a spinning worker would take the core that caller needs.
    while (!(stopping_ && queue_.empty()) && (queue_.empty() || executing_.load())) {
      worker_asleep_ = true;
      worker_cv_.wait(lock);
      worker_asleep_ = false;
    }
    if (queue_.empty()) return;
    if (!IssuerDone(lock)) continue;
    RunFront(lock, kWorkerBatch);  // false: a claimant took the claim first, and wakes us
  }
}

bool OpQueue::IssuerDone(std::unique_lock<std::mutex>& lock) {
  const auto since = std::chrono::steady_clock::now();
  for (;;) {
    // Stop and Drain wait for the worker; a large op's hand-off is cheap
    // beside the op, and starting it late is not.
    if (stopping_ || drain_waiters_.load() > 0 || !queue_.front()->quick()) return true;
    const uint64_t seen = issued_;
    lock.unlock();
    // On the issuer's core this lets the issuer go on for its time slice.
    sched_yield();
    lock.lock();
    if (queue_.empty() || executing_.load()) return false;  // a waiter runs them
    if (issued_ == seen || std::chrono::steady_clock::now() - since >= kIssuerPatience) {
      return true;
    }
  }
}

// A thread waiting for `target` runs queued ops itself (in order, one
// executor at a time) instead of sleeping until the worker wakes up: the
// wake-ups at both ends of a batch of non-blocking calls disappear.
void OpQueue::HelpUntil(const Work::State* target) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (target->done.load(std::memory_order_acquire) != 0) return;
    if (queue_.empty()) return;  // someone else runs it: sleep on the Work
    // The ops up to the target, no further (the caller wants to go on), at
    // most a worker's batch per claim: one claim and one trip through mu_
    // for a batch, not for every op. Another executor: sleep on the Work.
    const size_t limit = std::min(queue_.size(), kWorkerBatch);
    size_t upto = 0;
    while (upto < limit && queue_.at(upto).get() != target) ++upto;
    if (!RunFront(lock, upto < limit ? upto + 1 : limit)) return;
  }
}

bool OpQueue::Drain(Deadline deadline, uint64_t* pending) {
  std::unique_lock<std::mutex> lock(mu_);
  // Counted before executing_ is read (Release pairs with it).
  ++drain_waiters_;
  const bool drained = drained_cv_.wait_until(
      lock, deadline.at(), [&] { return completed_ == issued_ && !executing_.load(); });
  --drain_waiters_;
  if (pending != nullptr) *pending = issued_ - completed_;
  return drained;
}

bool OpQueue::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_.load()) return false;
  closed_.store(true);
  return true;
}

}  // namespace loom
