// The one queue every operation of a communicator passes through, in issue
// order, one at a time: on the queue's worker thread, on a thread waiting
// for one of them (Work::Wait helps), or on a blocking caller's own thread
// while nothing is queued or running (ClaimIfIdle).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "base/futex.h"
#include "base/ring_queue.h"
#include "collectives/algos/algorithms.h"
#include "loom/loom.hpp"

namespace loom {

struct StagedOp;  // comm/device_path.h
class OpQueue;

struct Work::State {
  // 0 until the operation completed, then 1, stored after status (which
  // never changes again) with release order: a reader that sees 1 reads
  // status without a lock. Waiters sleep on it (a futex word); Complete
  // wakes them only when `sleepers` says there are any, so a completion
  // nobody sleeps on costs two atomic operations.
  std::atomic<uint32_t> done{0};
  std::atomic<uint32_t> sleepers{0};
  Status status;
  // The queue that runs this op, so a waiter can run queued ops itself
  // (OpQueue::HelpUntil); null for an op completed at issue. Set before the
  // State is shared and never changed: a waiter reads it only while the op
  // is pending, when the queue is alive (contract).
  OpQueue* owner = nullptr;
  // What the op runs: a single collective (no allocation) or a group's
  // batch, and its device items staged on user streams (else null). Kept
  // here, not in a queue entry of its own, so that issuing moves a pointer
  // and not the arguments (twice), and a call allocates once. Only the
  // thread that queues it and then the one that runs it touch these;
  // Finish drops them before the op completes.
  CollArgs one;
  std::vector<CollArgs> many;
  std::shared_ptr<StagedOp> staged;
  // A single host op of at most kQuickBytes: its hand-off to another
  // thread costs as much as the op.
  static constexpr size_t kQuickBytes = size_t{64} << 10;
  bool quick() const {
    return many.empty() && staged == nullptr && one.count * SizeOf(one.type) <= kQuickBytes;
  }
  std::span<const CollArgs> items() const {
    return many.empty() ? std::span<const CollArgs>(&one, 1) : std::span<const CollArgs>(many);
  }

  // Releases what the op ran (a user may keep the Work long after), then
  // completes it.
  void Finish(Status s) {
    if (!many.empty()) std::vector<CollArgs>().swap(many);
    staged.reset();
    Complete(std::move(s));
  }

  void Complete(Status s) {
    status = std::move(s);
    // Sequentially consistent, as the waiter's sleepers increment and its
    // re-check of done: either it sees 1, or this sees it sleeping.
    done.store(1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) != 0) {
      Futex(&done, FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr);
    }
    // The same pairing with OnComplete's store of has_callbacks and its
    // re-check of done: a callback added meanwhile is run by one of the two.
    if (has_callbacks.load(std::memory_order_seq_cst) != 0) RunCallbacks();
  }

  // Work::OnComplete. Callbacks wait here until the op completes; whoever
  // takes them out under callbacks_mu runs them, so each runs once.
  std::atomic<uint32_t> has_callbacks{0};
  std::mutex callbacks_mu;
  std::vector<std::function<void(const Status&)>> callbacks;
  void RunCallbacks() {
    std::vector<std::function<void(const Status&)>> ready;
    {
      std::lock_guard<std::mutex> lock(callbacks_mu);
      ready.swap(callbacks);
    }
    for (auto& callback : ready) callback(status);
  }
};

class OpQueue {
 public:
  using Op = std::shared_ptr<Work::State>;
  // Runs one queued op and finishes it (Work::State::Finish), on whichever
  // thread executes.
  using RunFn = std::function<void(Work::State& op)>;

  // `op_timeout`: how long one op may run (0 = forever); a waiter with an
  // earlier deadline does not run queued ops itself (Work::Wait).
  OpQueue(RunFn run, std::chrono::milliseconds op_timeout);
  ~OpQueue();  // stops the worker; ops that never ran fail
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  void Start();  // the worker thread
  // Stops and joins the worker once the queue is empty (the destructor
  // does it too); safe to call twice.
  void Stop();

  // A new op for Enqueue, from a pool that recycles freed ones.
  static Op NewOp();
  // Queues `op`; refused (the Work completes with the error) after Close.
  Work Enqueue(Op op);
  // The claim to execute for a blocking caller: true when nothing is queued
  // or running and the queue is open, and then the caller runs its op
  // itself and calls Release. A compare-exchange, not the queue's lock: two
  // lock round trips are a visible share of an 8 B all-reduce.
  bool ClaimIfIdle();
  void Release();
  // Runs queued ops on this thread until `target` is done or another thread
  // executes (then the caller sleeps on the Work as usual).
  void HelpUntil(const Work::State* target);
  // Waits until every queued op completed and none runs; false at the
  // deadline. `pending` (optional) is then how many were still queued.
  bool Drain(Deadline deadline, uint64_t* pending = nullptr);
  // Refuses every later op; false if already closed.
  bool Close();

  std::chrono::milliseconds op_timeout() const { return op_timeout_; }

 private:
  static constexpr size_t kWorkerBatch = 32;  // ops the worker takes per visit to the queue
  static constexpr size_t kQueueSlots = 256;  // ops queued before the queue grows
  static constexpr std::chrono::microseconds kIssuerPatience{500};

  void WorkerLoop();
  // The worker's wait for the thread that queues ops to stop (mu_ held by
  // `lock`): true when the worker should run the front ops now; false when
  // another thread claimed them. A thread that queues small ops without
  // waiting usually waits for them next and then runs them itself
  // (HelpUntil); a worker running them meanwhile shares that thread's core
  // and lock, and the switching costs several times the ops themselves. So
  // the worker yields while ops keep coming, for kIssuerPatience at most.
  bool IssuerDone(std::unique_lock<std::mutex>& lock);
  // Runs up to `max_ops` ops from the front on the calling thread once it
  // has the claim; false when another thread holds it.
  bool RunFront(std::unique_lock<std::mutex>& lock, size_t max_ops);
  // After queue_, executing_ or completed_ changed (mu_ held by `lock`):
  // releases the lock and wakes whoever can act now.
  void NotifyAndUnlock(std::unique_lock<std::mutex>& lock);

  RunFn run_;
  std::chrono::milliseconds op_timeout_;
  std::mutex mu_;
  // The worker sleeps on worker_cv_ until an op is queued and none runs;
  // Drain sleeps on drained_cv_. Each is notified only when its waiter has
  // something to do: a notify per operation would wake the worker (a
  // context switch on the caller's core) after every blocking call.
  std::condition_variable worker_cv_;
  std::condition_variable drained_cv_;
  std::atomic<int> drain_waiters_{0};  // changed under mu_, read by Release
  RingQueue<Op> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(): changed under mu_, read by ClaimIfIdle
  std::vector<Op> running_;        // RunFront's batch (only the executing thread touches it)
  uint64_t issued_ = 0, completed_ = 0;  // queued ops (ops run by a claimant are not counted)
  bool stopping_ = false;
  // Under mu_: the worker sleeps on worker_cv_ and nobody has woken it
  // since (NotifyAndUnlock clears it as it wakes the worker).
  bool worker_asleep_ = false;
  // The claim to execute, taken by compare-exchange: the worker and helpers
  // under mu_, a blocking caller without it (ClaimIfIdle).
  std::atomic<bool> executing_{false};
  std::atomic<bool> closed_{false};  // set under mu_
  std::thread worker_;
};

}  // namespace loom
