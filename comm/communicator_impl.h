// Communicator::Impl: the state behind the public Communicator — bootstrap
// client, transports, engine, and the worker thread that executes issued
// operations in order.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "collectives/algos/algorithms.h"
#include "collectives/algos/hierarchical.h"
#include "collectives/select/selector.h"
#include "base/futex.h"
#include "base/ring_queue.h"
#include "comm/bootstrap/store_client.h"
#include "comm/device_ipc.h"
#include "comm/device_net.h"
#include "comm/device_path.h"
#include "comm/status_port.h"
#include "comm/stream_chooser.h"
#include "loom/loom.hpp"
#include "transports/engine.h"
#include "transports/shm/context.h"
#include "transports/tcp/context.h"

namespace loom {

struct Work::State {
  // 0 until the operation completed, then 1, stored after status (which
  // never changes again) with release order: a reader that sees 1 reads
  // status without a lock. Waiters sleep on it (a futex word); Complete
  // wakes them only when `sleepers` says there are any, so a completion
  // nobody sleeps on costs two atomic operations.
  std::atomic<uint32_t> done{0};
  std::atomic<uint32_t> sleepers{0};
  Status status;
  // The communicator that runs this op, so a waiter can run queued ops
  // itself (HelpUntil); null for an op completed at issue. Set before the
  // State is shared and never changed: a waiter reads it only while the op
  // is pending, when the communicator is alive (contract).
  Communicator::Impl* owner = nullptr;
  // What the op runs: a single collective (no allocation) or a group's
  // batch, and its device items staged on user streams (else null). Kept
  // here, not in a queue entry of its own, so that issuing moves a pointer
  // and not the arguments (twice), and a call allocates once. Only the
  // thread that queues it and then the one that runs it touch these;
  // Finish drops them before the op completes.
  CollArgs one;
  std::vector<CollArgs> many;
  std::shared_ptr<StagedOp> staged;
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

class Communicator::Impl {
 public:
  // One issued operation (a single collective, or a group's batch): its
  // completion state, which holds what it runs.
  using Op = std::shared_ptr<Work::State>;

  Impl() = default;
  ~Impl();

  // Bootstrap and transport setup (setup.cc).
  static Result<std::unique_ptr<Impl>> Create(const std::string& store_host, uint16_t store_port,
                                              uint64_t secret, int rank, int size,
                                              const CommConfig& config);

  Work Issue(CollArgs args);            // validates, then queues (or adds to the open group)
  // Validates, then runs on the calling thread when nothing is queued or
  // running (else queues and waits): the blocking forms.
  Status IssueBlocking(const CollArgs& args);
  // Runs validated host `items` (one op, or a group's batch) on the calling
  // thread when nothing is queued or running, else queues them and waits.
  Status RunBlocking(std::span<const CollArgs> items);
  // Queue one collective, or a batch, now.
  Work Submit(const CollArgs& one);
  Work Submit(std::vector<CollArgs> items, std::shared_ptr<StagedOp> staged = nullptr);
  // The stream forms: host buffers go to IssueBlocking; device buffers are
  // staged on `stream` and queued, returning once enqueued (device_path.h).
  Status IssueOnStream(const CollArgs& args, GpuStream stream);
  // Queues a batch (a group's, or one stream-form call); items placed on the
  // device are first staged on their streams (device_path.h).
  Work SubmitGroup(std::vector<CollArgs> items, const std::vector<Placement>& where);
  Status Drain(Deadline deadline);      // waits until every issued op completed
  // Runs queued ops on this thread until `target` is done or another thread
  // is executing (then the caller sleeps on the Work as usual).
  void HelpUntil(const Work::State* target);
  Status Finalize();
  // Communicator::RegisterBuffer / DeregisterBuffer.
  Result<uint64_t> RegisterBuffer(const void* buf, size_t bytes);
  Status DeregisterBuffer(uint64_t handle);
  void Abort(const Status& why);
  Status AsyncError() const;
  Result<std::unique_ptr<Communicator>> Split(int color, int key, const CommConfig& config);

  int rank = 0;
  int size = 1;
  std::string host;
  int cuda_device = -1;  // current at creation; -1 without device ops
  CommConfig config;
  std::chrono::milliseconds timeout{0};

 private:
  friend class Communicator;
  struct Setup;  // Create's named steps (setup.cc)
  Status Validate(const CollArgs& a) const;
  void WorkerLoop();
  // false when another thread holds the claim to execute (it wakes the
  // worker once done).
  bool RunFront(std::unique_lock<std::mutex>& lock, size_t max_ops);
  static constexpr size_t kWorkerBatch = 32;  // ops the worker takes per visit to the queue
  static constexpr size_t kQueueSlots = 256;  // ops queued before the queue grows (setup.cc)
  Status Execute(std::span<const CollArgs> items);
  Status RunOne(const CollArgs& a, Deadline deadline);
  struct CachedChoice {
    bool valid = false;
    OpKind kind = OpKind::kInternal;
    size_t bytes = 0;
    Choice choice;
  };
  const Choice& Choose(OpKind kind, size_t bytes);
  Deadline OpDeadline() const;
  Deadline OpDeadline(std::chrono::steady_clock::time_point now) const;
  void Fail(const Status& s);
  // Lets the streams waiting on this communicator go on, now or, while an
  // operation on device buffers executes, as soon as it returns.
  void ReleaseStreams();

  OpTracker tracker_;
  uint64_t status_handle_ = 0;  // RegisterStatusSource; 0 = not registered
  std::unique_ptr<bootstrap::StoreClient> store_;
  std::unique_ptr<ShmContext> shm_;
  std::unique_ptr<TcpContext> tcp_;
  // Before engine_, so destroyed after it: a failed op abandons transfers
  // that a transport (UCX) may still read or write until the engine closes.
  Scratch scratch_;
  Scratch premul_scratch_;  // a PreMulSum's scaled input (RunOne)
  DevicePath device_;  // before engine_ too: abandoned transfers may use its pinned blocks
  DeviceIpc ipc_;      // device buffers read in place through CUDA IPC (when enabled)
  DeviceNet net_;      // data-moving collectives between hosts over GPUDirect RDMA (when enabled)
  std::unique_ptr<Engine> engine_;
  AlgoFilter algo_filter_;
  uint32_t algo_warned_ = 0;  // bit per OpKind: NCCL_ALGO fallback already logged
  TuneTable tune_;              // LOOM_TUNE
  uint32_t tune_warned_ = 0;    // bit per OpKind: an ignored LOOM_TUNE entry already logged
  CostModel cost_;              // from the job-wide topology; the same on every rank
  static constexpr int kChoiceCacheBits = 6;
  std::array<CachedChoice, size_t{1} << kChoiceCacheBits> choices_;  // see Choose
  std::optional<HierGroups> hier_;  // this rank's groups, when hosts have equal rank counts
  uint64_t secret_ = 0;
  bool single_copy_ = false;  // every same-host peer's memory is directly readable
  // Whether sends into the shared-memory FIFOs stream, chosen per call from
  // the times of this rank's collectives (stream_chooser.h); null when
  // LOOM_SHM_STREAM forces a way or the rank has no shared-memory peer.
  std::unique_ptr<StreamChooser> stream_chooser_;
  std::vector<ShmConnection*> shm_conns_;  // owned by engine_
  bool streaming_ = false;                 // the way shm_conns_ send now
  void SetStreaming(bool on);
  std::string bind_address_;  // local address of the chosen interface (for Split's stores)
  int split_count_ = 0;

  std::atomic<bool> abort_{false};
  std::atomic<bool> device_running_{false};     // RunFront executes a device-buffer op
  std::atomic<bool> release_requested_{false};  // ReleaseStreams ran (sticky, as ReleaseAll)
  mutable std::mutex err_mu_;
  Status async_error_;

  std::mutex q_mu_;
  // The worker sleeps on worker_cv_ until an op is queued and none runs;
  // Drain sleeps on drained_cv_. Each is notified only when its waiter has
  // something to do: a notify per operation would wake the worker (a
  // context switch on the caller's core) after every blocking call.
  std::condition_variable worker_cv_;
  std::condition_variable drained_cv_;
  std::atomic<int> drain_waiters_{0};  // changed under q_mu_, read by ReleaseExecution
  RingQueue<Op> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(): changed under q_mu_, read by blocking calls
  std::vector<Op> running_;  // RunFront's batch (only the executing thread touches it)
  uint64_t issued_ = 0, completed_ = 0;  // queued ops (blocking calls run inline are not counted)
  bool stopping_ = false;
  // Under q_mu_: the worker sleeps on worker_cv_ and nobody has woken it
  // since (NotifyAndUnlock clears it as it wakes the worker).
  bool worker_asleep_ = false;
  // The claim to execute: one op runs at a time, on the worker, a helping
  // waiter or a blocking caller. Taken by compare-exchange: the worker and
  // helpers under q_mu_, a blocking call without it (RunBlocking).
  std::atomic<bool> executing_{false};
  std::atomic<bool> finalized_{false};  // set under q_mu_
  std::thread worker_;
  // After queue_, executing_ or completed_ changed (q_mu_ held by `lock`):
  // releases the lock and wakes whoever can act now.
  void NotifyAndUnlock(std::unique_lock<std::mutex>& lock);
  // Gives up the claim a blocking call took without q_mu_, then wakes the
  // worker or a Drain if an op was queued or a Drain began meanwhile.
  void ReleaseExecution();
  Status SubmitAndWait(std::span<const CollArgs> items);
  Work Enqueue(Op op);
};

}  // namespace loom
