// Communicator: argument checks, the ordered operation queue, the worker
// thread, errors that stick, and the public methods.
#include "comm/communicator_impl.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "collectives/reduce/reduce.h"
#include "comm/base/coarse_clock.h"
#include "comm/base/log.h"
#include "comm/base/params.h"
#include "comm/group.h"
#include "comm/launch_env.h"
#include "comm/unique_id.h"

namespace loom {

// ---------------------------------------------------------------- Work

Status Work::Wait(Deadline deadline) const {
  if (state_ == nullptr) return InvalidUsage("Wait on an empty Work handle");
  Communicator::Impl* owner = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->done) return state_->status;
    owner = state_->owner;  // alive: a pending op keeps its communicator (contract)
  }
  // Running an op here can take up to the op's own timeout: only a caller
  // prepared to wait that long helps; an earlier deadline just sleeps.
  if (owner != nullptr && (deadline.never() || deadline.at() >= Deadline::After(owner->timeout).at())) {
    owner->HelpUntil(state_.get());
  }
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_until(lock, deadline.at(), [&] { return state_->done; })) {
    return TimeoutError("operation still running at the caller's deadline");
  }
  return state_->status;
}

bool Work::Test() const {
  if (state_ == nullptr) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

namespace {
Work DoneWork(Status s) {
  auto st = std::make_shared<Work::State>();
  st->Complete(std::move(s));
  return Work(st);
}
}  // namespace

// ---------------------------------------------------------------- Impl

Communicator::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    stopping_ = true;
  }
  worker_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (status_handle_ != 0) UnregisterStatusSource(status_handle_);
  // The store's reader thread calls back into this object: stop it first.
  store_.reset();
  // Fail anything that never ran.
  for (Op& op : queue_) op.state->Complete(RemoteError("communicator destroyed"));
}

Deadline Communicator::Impl::OpDeadline() const { return OpDeadline(CoarseNow()); }

Deadline Communicator::Impl::OpDeadline(std::chrono::steady_clock::time_point now) const {
  // A deadline of seconds needs no finer clock than a tick.
  if (timeout.count() <= 0) return Deadline::Never();
  return Deadline::At(now + timeout);
}

Status Communicator::Impl::Validate(const CollArgs& a) const {
  const char* what = OpKindName(a.kind);
  if (!IsValid(a.type)) {
    return InvalidArgument(std::string(what) + ": invalid datatype " +
                           std::to_string(static_cast<int>(a.type)));
  }
  if (!IsValid(a.op)) {
    return InvalidArgument(std::string(what) + ": invalid reduction op " +
                           std::to_string(static_cast<int>(a.op)));
  }
  // Only AllReduce, ReduceScatter and Reduce take a Reduction.
  if (a.premul) {
    if (a.op != RedOp::kSum) {
      return InvalidArgument(std::string(what) + ": a PreMulSum reduces with sum, not " +
                             std::string(Name(a.op)));
    }
    if (a.scalar.type != a.type) {
      return InvalidArgument(std::string(what) + ": the PreMulSum scalar is " +
                             std::string(Name(a.scalar.type)) +
                             " but the operation's datatype is " + std::string(Name(a.type)) +
                             " (create the reduction with the datatype "
                             "of the buffers)");
    }
    if (a.scalar.where == PreMulScalar::Where::kPointer && a.scalar.pointer == nullptr) {
      return InvalidArgument(std::string(what) + ": the PreMulSum scalar pointer is null");
    }
  }
  // Elements moved per rank buffer: whole-communicator buffers are size x count.
  size_t blocks = 1;
  if (a.kind == OpKind::kReduceScatter || a.kind == OpKind::kAllGather ||
      a.kind == OpKind::kAllToAll) {
    blocks = static_cast<size_t>(size);
  }
  const size_t es = SizeOf(a.type);
  if (a.count > std::numeric_limits<size_t>::max() / es / blocks) {
    return InvalidArgument(std::string(what) + ": count " + std::to_string(a.count) +
                           " overflows the address space");
  }
  const bool rooted = a.kind == OpKind::kBroadcast || a.kind == OpKind::kReduce ||
                      a.kind == OpKind::kSendRecv;
  if (rooted && (a.root < 0 || a.root >= size)) {
    return InvalidArgument(std::string(what) + ": " +
                           (a.kind == OpKind::kSendRecv ? "peer " : "root ") +
                           std::to_string(a.root) + " is not a rank of this communicator of " +
                           std::to_string(size));
  }
  if (a.kind == OpKind::kSendRecv && a.root == rank && GroupDepth() == 0) {
    return InvalidUsage("Send/Recv with this rank itself (" + std::to_string(rank) +
                        ") only works inside GroupStart/GroupEnd, together with the matching "
                        "Recv/Send");
  }
  if (a.count > 0 && a.kind != OpKind::kBarrier) {
    bool needs_send = a.kind != OpKind::kSendRecv || a.recv == nullptr;
    bool needs_recv = a.kind != OpKind::kSendRecv || a.send == nullptr;
    if (a.kind == OpKind::kBroadcast && rank != a.root) needs_send = false;
    if (a.kind == OpKind::kReduce && rank != a.root) needs_recv = false;
    if (needs_send && a.send == nullptr) {
      return InvalidArgument(std::string(what) + ": send buffer is null with count " +
                             std::to_string(a.count));
    }
    if (needs_recv && a.recv == nullptr) {
      return InvalidArgument(std::string(what) + ": receive buffer is null with count " +
                             std::to_string(a.count));
    }
  }
  return Status::Ok();
}

Work Communicator::Impl::Issue(CollArgs args) {
  Status v = Validate(args);
  if (!v.ok()) {
    LOOM_WARN(log::kColl, "rank %d: %s", rank, v.message().c_str());
    return DoneWork(v);
  }
  if (GroupDepth() > 0) {
    GroupAdd(this, args);
    return DoneWork(Status::Ok());
  }
  return Submit(args);
}

Work Communicator::Impl::Submit(const CollArgs& one) {
  Op op;
  op.one = one;
  return Enqueue(std::move(op));
}

Work Communicator::Impl::Submit(std::vector<CollArgs> items, std::shared_ptr<StagedOp> staged) {
  Op op;
  if (items.size() == 1) {
    op.one = items.front();
  } else {
    op.many = std::move(items);
  }
  op.staged = std::move(staged);
  return Enqueue(std::move(op));
}

Work Communicator::Impl::Enqueue(Op op) {
  auto state = std::make_shared<Work::State>();
  state->owner = this;
  op.state = state;
  std::unique_lock<std::mutex> lock(q_mu_);
  if (finalized_) {
    state->Complete(InvalidUsage("operation issued after Finalize"));
    return Work(state);
  }
  queue_.push_back(std::move(op));
  ++issued_;
  NotifyAndUnlock(lock);
  return Work(state);
}

// Runs up to `max_ops` ops from the front of the queue on the calling thread,
// in order; lock holds q_mu_ and the caller has checked that an op is queued
// and none is executing. Taking several at once keeps the worker off q_mu_
// while the caller keeps issuing (on a busy core every contended lock costs).
void Communicator::Impl::RunFront(std::unique_lock<std::mutex>& lock, size_t max_ops) {
  running_.clear();
  while (!queue_.empty() && running_.size() < max_ops) {
    running_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  executing_ = true;
  lock.unlock();
  for (Op& op : running_) {
    const bool device_op = op.staged != nullptr;
    if (device_op) device_running_.store(true);
    Status s = AsyncError();
    if (s.ok() && op.staged) s = device_.AwaitReady(*op.staged, OpDeadline(), abort_);
    if (s.ok()) s = Execute(op.items());
    if (device_op) device_running_.store(false);
    if (!s.ok()) {
      Fail(s);  // records the error, then releases the streams
    } else if (op.staged) {
      device_.Complete(*op.staged);
      if (release_requested_.load()) device_.ReleaseAll();  // deferred by ReleaseStreams
    }
    op.state->Complete(s);
  }
  const size_t ran = running_.size();
  running_.clear();
  lock.lock();
  executing_ = false;
  completed_ += ran;
  NotifyAndUnlock(lock);
  lock.lock();
}

void Communicator::Impl::NotifyAndUnlock(std::unique_lock<std::mutex>& lock) {
  const bool worker_can_run = !queue_.empty() && !executing_;
  const bool drained = drain_waiters_ > 0 && completed_ == issued_;
  lock.unlock();
  // The worker runs its next op itself; waking it when it is the caller is
  // a no-op (nobody waits), so no need to tell the threads apart.
  if (worker_can_run) worker_cv_.notify_one();
  if (drained) drained_cv_.notify_all();
}

void Communicator::Impl::WorkerLoop() {
  for (;;) {
    // No polling here: a waiting caller runs queued ops itself (HelpUntil),
    // and a spinning worker would take the core that caller needs.
    std::unique_lock<std::mutex> lock(q_mu_);
    worker_cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !executing_); });
    if (queue_.empty()) return;
    RunFront(lock, kWorkerBatch);
  }
}

// A thread waiting for `target` runs queued ops itself (in order, one
// executor at a time) instead of sleeping until the worker wakes up: the
// wake-ups at both ends of a batch of non-blocking calls disappear.
void Communicator::Impl::HelpUntil(const Work::State* target) {
  std::unique_lock<std::mutex> lock(q_mu_);
  for (;;) {
    {
      std::lock_guard<std::mutex> done_lock(const_cast<Work::State*>(target)->mu);
      if (target->done) return;
    }
    if (executing_ || queue_.empty()) return;  // someone else runs it: sleep on the Work
    RunFront(lock, 1);  // no further than needed: the caller wants to go on
  }
}

Status Communicator::Impl::IssueBlocking(const CollArgs& args) {
  Status v = Validate(args);
  if (!v.ok()) {
    LOOM_WARN(log::kColl, "rank %d: %s", rank, v.message().c_str());
    return v;
  }
  if (GroupDepth() > 0) {
    GroupAdd(this, args);
    return Status::Ok();
  }
  {
    std::unique_lock<std::mutex> lock(q_mu_);
    if (finalized_ || !queue_.empty() || executing_) {
      lock.unlock();
      return Submit(args).Wait();
    }
    // Nothing queued or running: run on the caller's thread, saving two
    // thread hand-offs (most of a small message's latency).
    executing_ = true;
    ++issued_;
  }
  Status s = AsyncError();
  if (s.ok()) s = Execute({&args, 1});
  if (!s.ok()) Fail(s);
  std::unique_lock<std::mutex> lock(q_mu_);
  executing_ = false;
  ++completed_;
  NotifyAndUnlock(lock);
  return s;
}

Status Communicator::Impl::IssueOnStream(const CollArgs& args, GpuStream stream) {
  Status v = Validate(args);
  Result<cuda::MemSpace> space = cuda::MemSpace::kHost;
  bool managed = false;
  if (v.ok()) space = device_.Classify(args, rank, &managed);
  if (v.ok() && !space.ok()) v = space.status();
  if (!v.ok()) {
    LOOM_WARN(log::kColl, "rank %d: %s", rank, v.message().c_str());
    return v;
  }
  if (space.value() == cuda::MemSpace::kHost) return IssueBlocking(args);
  // Managed memory cannot be exported through CUDA IPC: staged (then every
  // rank must pass managed memory, as NCCL expects one kind on all ranks).
  const Placement where{true, stream, ipc_.Handles(args.kind) && !managed};
  if (GroupDepth() > 0) {
    GroupAdd(this, args, where);
    return Status::Ok();
  }
  Work w = SubmitGroup({args}, {where});
  // Returns once enqueued: only a failure to enqueue is this call's result.
  return w.Test() ? w.Wait() : Status::Ok();
}

Work Communicator::Impl::SubmitGroup(std::vector<CollArgs> items,
                                     const std::vector<Placement>& where) {
  if (std::none_of(where.begin(), where.end(), [](const Placement& p) { return p.device; })) {
    return Submit(std::move(items));
  }
  // A failed communicator enqueues nothing on the user's streams.
  if (Status e = AsyncError(); !e.ok()) return DoneWork(e);
  Work w;
  Status s = device_.StageAndQueue(
      std::move(items), where, rank, size,
      [&](std::vector<CollArgs> staged_items, std::shared_ptr<StagedOp> op) {
        w = Submit(std::move(staged_items), std::move(op));
      });
  if (!s.ok()) {
    Fail(s);
    return DoneWork(s);
  }
  // Refused at once (issued after Finalize): its streams must not wait for it.
  if (w.Test() && !w.Wait().ok()) ReleaseStreams();
  return w;
}

Status Communicator::Impl::Execute(std::span<const CollArgs> items) {
  const auto now = CoarseNow();
  const Deadline deadline = OpDeadline(now);
  // Send/Recv of one batch progress together; anything else runs in order.
  bool any_p2p = false;
  bool first = true;
  for (const CollArgs& a : items) {
    if (a.kind == OpKind::kSendRecv) {
      any_p2p = true;
      continue;
    }
    // The first operation starts now; a later one of a batch when it starts.
    const uint64_t seq = tracker_.Started(a, first ? now : CoarseNow());
    first = false;
    LOOM_TRY(RunOne(a, deadline));
    tracker_.Completed(seq, a);
  }
  if (!any_p2p) return Status::Ok();
  // Send/Recv on device buffers: read in place through CUDA IPC.
  std::vector<CollArgs> device_sr;
  for (const CollArgs& a : items) {
    if (a.kind == OpKind::kSendRecv && a.device) device_sr.push_back(a);
  }
  if (!device_sr.empty()) {
    const uint64_t seq = tracker_.Started(device_sr.front());
    for (size_t i = 1; i < device_sr.size(); ++i) tracker_.Started(device_sr[i]);
    Status s = ipc_.RunSendRecv(*engine_, rank, device_sr, deadline, abort_);
    if (!s.ok()) {
      return s.WithContext("Send/Recv on device buffers (CUDA IPC) on rank " +
                           std::to_string(rank) + " (" + host + ")");
    }
    tracker_.Completed(seq + device_sr.size() - 1, device_sr.back());
  }
  // Sends to self match receives from self in issue order: a local copy.
  std::vector<CollArgs> sr, self_sends, self_recvs;
  for (const CollArgs& a : items) {
    if (a.kind != OpKind::kSendRecv || a.device) continue;
    if (a.root != rank) {
      sr.push_back(a);
    } else {
      (a.send != nullptr ? self_sends : self_recvs).push_back(a);
    }
  }
  if (self_sends.size() != self_recvs.size()) {
    return InvalidUsage("rank " + std::to_string(rank) + " sends " +
                        std::to_string(self_sends.size()) + " message(s) to itself but receives " +
                        std::to_string(self_recvs.size()) +
                        " from itself: put each self Send with its Recv in one group");
  }
  for (size_t i = 0; i < self_sends.size(); ++i) {
    const size_t sb = self_sends[i].count * SizeOf(self_sends[i].type);
    const size_t rb = self_recvs[i].count * SizeOf(self_recvs[i].type);
    if (sb != rb) {
      return InvalidUsage("self Send of " + std::to_string(sb) + " bytes matched with a Recv of " +
                          std::to_string(rb) + " bytes");
    }
    if (sb > 0 && self_sends[i].send != self_recvs[i].recv) {
      std::memmove(self_recvs[i].recv, self_sends[i].send, sb);
    }
  }
  if (sr.empty()) return Status::Ok();
  uint64_t first_seq = 0;
  for (const CollArgs& a : sr) {
    uint64_t seq = tracker_.Started(a);
    if (first_seq == 0) first_seq = seq;
  }
  std::vector<Transfer> p2p;
  p2p.reserve(sr.size());
  for (const CollArgs& a : sr) {
    Transfer& t = p2p.emplace_back();
    t.peer = a.root;
    t.kind = OpKind::kSendRecv;
    t.bytes = a.count * SizeOf(a.type);
    t.type = a.type;
    if (a.send != nullptr) {
      t.dir = Transfer::Dir::kSend;
      t.src = a.send;
    } else {
      t.dir = Transfer::Dir::kRecv;
      t.dst = a.recv;
    }
  }
  LOOM_TRY(engine_->Run(p2p, deadline));
  tracker_.Completed(first_seq + sr.size() - 1, sr.back());
  return Status::Ok();
}

Status Communicator::Impl::RunOne(const CollArgs& a, Deadline deadline) {
  if (a.premul && !a.device) {
    // A pre-multiplied sum: scale this rank's input, then sum the scaled copies.
    // The scalar is read now, when the operation runs (a kPointer scalar of
    // a staged device operation was copied to pinned memory in stream order).
    const size_t elems = a.kind == OpKind::kReduceScatter ? a.count * size : a.count;
    if (elems > 0 && a.scalar.where == PreMulScalar::Where::kPointer && device_.ops() != nullptr) {
      LOOM_ASSIGN_OR_RETURN(const cuda::BufferPlace place,
                            device_.ops()->Classify(a.scalar.pointer));
      if (place.space == cuda::MemSpace::kDevice) {
        return InvalidUsage(std::string(OpKindName(a.kind)) +
                            ": the PreMulSum scalar is device memory but the buffers are host "
                            "memory; pass the scalar in host memory (or by value)");
      }
    }
    const void* scalar =
        a.scalar.where == PreMulScalar::Where::kValue ? a.scalar.value : a.scalar.pointer;
    CollArgs summed = a;
    summed.premul = false;
    if (a.kind == OpKind::kAllReduce || (a.kind == OpKind::kReduce && rank == a.root)) {
      // Scaled straight into the output, then summed in place there: no
      // scratch, and the in-place algorithms, which read one buffer less.
      PreMulInto(a.recv, a.send, elems, a.type, scalar);
      summed.send = a.recv;
    } else {
      void* scaled = premul_scratch_.Get(elems * SizeOf(a.type));
      PreMulInto(scaled, a.send, elems, a.type, scalar);
      summed.send = scaled;
    }
    return RunOne(summed, deadline);
  }
  const size_t bytes = a.count * SizeOf(a.type);
  if (a.device) {
    Status s = ipc_.Run(*engine_, rank, a, deadline, abort_);
    if (s.ok()) return s;
    return s.WithContext(std::string(OpKindName(a.kind)) + " on device buffers (CUDA IPC) on rank " +
                         std::to_string(rank) + " (" + host + ")");
  }
  // Tiny collectives of a one-host communicator: one cache line per rank
  // (unless NCCL_ALGO or LOOM_TUNE asks for particular algorithms).
  if (engine_->small_collectives() && algo_filter_.empty() && tune_.empty() &&
      FitsSmallSlots(a, size)) {
    LOOM_TRACE(log::kTuning, "%s %zu bytes on %d ranks: through shared-memory slots",
               OpKindName(a.kind), bytes, size);
    Status s = SmallCollective(*engine_, rank, a, deadline);
    if (s.ok()) return s;
    return s.WithContext(std::string(OpKindName(a.kind)) + " on rank " + std::to_string(rank) +
                         " (" + host + ")");
  }
  const CachedChoice& cached = Choose(a.kind, bytes);
  const Choice& c = cached.choice;
  const uint32_t kind_bit = 1u << static_cast<uint32_t>(a.kind);
  if (c.tune_ignored != Choice::TuneIgnored::kNo && (tune_warned_ & kind_bit) == 0) {
    tune_warned_ |= kind_bit;  // once per collective and communicator
    LOOM_WARN(log::kTuning, "LOOM_TUNE names %s for %s of %zu bytes, but %s; using %s",
              AlgoName(c.tuned), OpKindName(a.kind), bytes,
              c.tune_ignored == Choice::TuneIgnored::kExcludedByAlgo
                  ? "NCCL_ALGO excludes it"
                  : "it cannot run on this job",
              AlgoName(c.algo));
  }
  if (c.source == Choice::Source::kFallback && (algo_warned_ & kind_bit) == 0) {
    algo_warned_ |= kind_bit;  // once per collective and communicator
    LOOM_WARN(log::kTuning, "NCCL_ALGO allows no usable algorithm for %s here; using %s",
              OpKindName(a.kind), AlgoName(c.algo));
  }
  LOOM_TRACE(log::kTuning, "%s %zu bytes on %d ranks: %s by %s (%s)", OpKindName(a.kind), bytes,
             size, AlgoName(c.algo),
             c.source == Choice::Source::kTune ? "LOOM_TUNE"
             : c.source == Choice::Source::kModel ? "cost model"
                                                  : "fallback",
             DescribeEstimates(a.kind, bytes, cost_).c_str());
  Status s;
  bool ran = false;
  if (cached.ask_direct) {
    s = RunDirectIfAllShared(*engine_, rank, a, scratch_, deadline, &ran);
    if (ran) LOOM_TRACE(log::kTuning, "%s: Direct instead, every rank's buffers are shareable",
                        OpKindName(a.kind));
  }
  if (!ran && s.ok()) {
    s = c.algo == Algo::kHierarchical ? HierarchicalAllReduce(*engine_, hier_, a, deadline)
                                      : RunAlgorithm(*engine_, rank, c.algo, a, scratch_, deadline);
  }
  if (s.ok()) return s;
  return s.WithContext(std::string(OpKindName(a.kind)) + " on rank " + std::to_string(rank) + " (" +
                       host + ")");
}

// SelectAlgo is pure for a communicator (its model, NCCL_ALGO and LOOM_TUNE
// never change), so a small direct-mapped cache keyed by collective and size
// saves the cost model's arithmetic on every call of a training loop.
const Communicator::Impl::CachedChoice& Communicator::Impl::Choose(OpKind kind, size_t bytes) {
  const uint64_t key = (uint64_t{bytes} << 4) | static_cast<uint64_t>(kind);  // kind < 16
  const size_t slot = (key * 0x9E3779B97F4A7C15ull) >> (64 - kChoiceCacheBits);
  CachedChoice& e = choices_[slot];
  if (e.valid && e.kind == kind && e.bytes == bytes) return e;
  e.valid = true;
  e.kind = kind;
  e.bytes = bytes;
  e.choice = SelectAlgo(kind, bytes, cost_, algo_filter_, tune_);
  // A model pick other than Direct: ask whether every rank's buffers are
  // shareable (then Direct reads them in place) when Direct could run.
  e.ask_direct = e.choice.source == Choice::Source::kModel && e.choice.algo != Algo::kDirect &&
                 SharedDirectWorthAsking(kind, bytes, size) &&
                 algo_filter_.Allows(kind, Algo::kDirect) &&
                 std::isfinite(cost_.PredictUs(kind, Algo::kDirect, bytes));
  return e;
}

void Communicator::Impl::Fail(const Status& s) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(err_mu_);
    if (async_error_.ok()) {
      async_error_ = s;
      first = true;
    }
  }
  abort_.store(true);
  ReleaseStreams();  // no stream waits for an operation that will not run
  if (engine_) engine_->Wake();
  if (first) {
    LOOM_WARN(log::kColl, "rank %d: %s", rank, s.ToString().c_str());
    // Tell the other ranks, unless the error came from them.
    if (store_ && s.code() != Code::kRemoteError) store_->ReportFailure(s.ToString());
  }
}

void Communicator::Impl::Abort(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(err_mu_);
    if (async_error_.ok()) async_error_ = why;
  }
  abort_.store(true);
  ReleaseStreams();
  if (engine_) engine_->Wake();
}

// While an operation on device buffers executes, its streams must stay
// held: a staged one still writes the pinned memory they copy back once
// released (a copy would read memory being written), and one through CUDA
// IPC has its peers' buffers mapped until it returns (a released owner may
// free a buffer a peer still has open, which CUDA leaves undefined). So the
// thread executing it releases them as soon as the operation returns (Fail
// and Abort also set abort_, which it sees at its next wait).
// release_requested_ is stored before device_running_ is read here, and
// device_running_ cleared before release_requested_ is read there (all
// sequentially consistent), so one side always releases.
void Communicator::Impl::ReleaseStreams() {
  release_requested_.store(true);
  if (!device_running_.load()) device_.ReleaseAll();
}

Status Communicator::Impl::AsyncError() const {
  // Fail and Abort record the error before they set abort_.
  if (!abort_.load(std::memory_order_acquire)) return Status::Ok();
  std::lock_guard<std::mutex> lock(err_mu_);
  return async_error_;
}

Status Communicator::Impl::Drain(Deadline deadline) {
  std::unique_lock<std::mutex> lock(q_mu_);
  ++drain_waiters_;
  const bool drained =
      drained_cv_.wait_until(lock, deadline.at(), [&] { return completed_ == issued_; });
  --drain_waiters_;
  if (!drained) {
    return TimeoutError("rank " + std::to_string(rank) + ": " +
                        std::to_string(issued_ - completed_) +
                        " operation(s) still pending at the deadline");
  }
  return AsyncError();
}

Status Communicator::Impl::Finalize() {
  Status s = Drain(OpDeadline());
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    if (finalized_) return s;
    finalized_ = true;
  }
  // Not a collective (NCCL's destroy is not either: one thread may destroy
  // the communicators of ncclCommInitAll one after the other). Peers still
  // read our last bytes after we leave: shm FIFOs stay mapped on their side,
  // TCP delivers before the close, and the goodbye keeps the store from
  // reporting us as vanished.
  // Peers close their mappings of this rank's copy buffer (so it can be
  // freed), and stop asking this rank to close any once it said goodbye.
  if (store_) (void)ipc_.RetireCopyBuffer(*store_, OpDeadline());
  ipc_.CloseAllMappings();
  if (store_) store_->Bye();
  return s;
}

Result<uint64_t> Communicator::Impl::RegisterBuffer(const void* buf, size_t bytes) {
  if (buf == nullptr) return InvalidArgument("RegisterBuffer: buf is null");
  if (bytes == 0) return InvalidArgument("RegisterBuffer: bytes is 0");
  if (reinterpret_cast<uintptr_t>(buf) > UINTPTR_MAX - bytes) {
    return InvalidArgument("RegisterBuffer: " + std::to_string(bytes) +
                           " bytes from the buffer's address wrap around the address space");
  }
  return ipc_.Register(buf, bytes);
}

Status Communicator::Impl::DeregisterBuffer(uint64_t handle) {
  LOOM_ASSIGN_OR_RETURN(const DeviceIpc::Allocation mapped, ipc_.Unregister(handle));
  if (mapped.size == 0) return Status::Ok();
  // Operations issued before may still read it, here and on the peers.
  LOOM_TRY(Drain(OpDeadline()));
  return ipc_.ClosePeerMappings(*store_, mapped, "the deregistered buffer", OpDeadline())
      .WithContext("rank " + std::to_string(rank) + ": DeregisterBuffer");
}

// ---------------------------------------------------------------- Communicator

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  if (impl_ == nullptr) return;
  if (!impl_->abort_.load()) (void)impl_->Finalize();
  else if (impl_->store_) impl_->store_->Bye();
}

Result<std::unique_ptr<Communicator>> Communicator::Create(const UniqueId& id, int rank, int size,
                                                           const CommConfig& config) {
  if (size < 1) return InvalidArgument("communicator size must be at least 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size) {
    return InvalidArgument("rank " + std::to_string(rank) + " is out of range for size " +
                           std::to_string(size));
  }
  LOOM_ASSIGN_OR_RETURN(auto parts, internal::ParseUniqueId(id));
  LOOM_ASSIGN_OR_RETURN(auto impl,
                        Impl::Create(parts.host, parts.port, parts.secret, rank, size, config));
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Result<std::unique_ptr<Communicator>> Communicator::CreateFromEnv(const CommConfig& config) {
  LOOM_ASSIGN_OR_RETURN(auto env, ReadLaunchEnv([](const char* n) { return std::getenv(n); }));
  if (!env) {
    return InvalidUsage("no launcher environment found (LOOM_RANK/LOOM_WORLD_SIZE/LOOM_ROOT, "
                        "RANK/WORLD_SIZE/MASTER_ADDR, OMPI_COMM_WORLD_*, SLURM_PROCID, PMI_RANK); "
                        "start the program with `loom run -np N -- prog` or pass rank and size");
  }
  if (env->size == 1 && env->root_port == 0) {
    // A job of one needs no agreed address: serve a private store.
    LOOM_ASSIGN_OR_RETURN(UniqueId id, internal::CreateUniqueIdOn("127.0.0.1"));
    return Create(id, 0, 1, config);
  }
  if (env->rank == 0) LOOM_TRY(internal::HostStoreForEnv(*env));
  LOOM_ASSIGN_OR_RETURN(auto impl, Impl::Create(env->root_host, env->root_port, env->secret,
                                                env->rank, env->size, config));
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Result<std::unique_ptr<Communicator>> Communicator::Split(int color, int key,
                                                          const CommConfig& config) {
  return impl_->Split(color, key, config);
}

Status Communicator::Finalize() { return impl_->Finalize(); }
void Communicator::Abort() { impl_->Abort(RemoteError("communicator aborted by the application")); }
Status Communicator::AsyncError() const { return impl_->AsyncError(); }
int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
const std::string& Communicator::host() const { return impl_->host; }
Result<uint64_t> Communicator::RegisterBuffer(const void* buf, size_t bytes) {
  return impl_->RegisterBuffer(buf, bytes);
}

Status Communicator::DeregisterBuffer(uint64_t handle) {
  return impl_->DeregisterBuffer(handle);
}

Result<int> Communicator::cuda_device() const {
  if (impl_->cuda_device < 0) {
    return InvalidUsage("rank " + std::to_string(impl_->rank) +
                        " has no CUDA device (this process sees no GPU, or loom was built without "
                        "CUDA): it works on host buffers only");
  }
  return impl_->cuda_device;
}

namespace {
CollArgs Args(OpKind kind, const void* s, void* r, size_t count, DataType t,
              const Reduction& op = RedOp::kSum, int root = 0) {
  CollArgs a;
  a.kind = kind;
  a.send = s;
  a.recv = r;
  a.count = count;
  a.type = t;
  a.op = op.op;
  a.premul = op.premul;
  a.scalar = op.scalar;
  a.root = root;
  return a;
}
}  // namespace

Work Communicator::AllReduceAsync(const void* s, void* r, size_t n, DataType t,
                                  const Reduction& op) {
  return impl_->Issue(Args(OpKind::kAllReduce, s, r, n, t, op));
}
Work Communicator::ReduceScatterAsync(const void* s, void* r, size_t n, DataType t,
                                      const Reduction& op) {
  return impl_->Issue(Args(OpKind::kReduceScatter, s, r, n, t, op));
}
Work Communicator::AllGatherAsync(const void* s, void* r, size_t n, DataType t) {
  return impl_->Issue(Args(OpKind::kAllGather, s, r, n, t));
}
Work Communicator::BroadcastAsync(const void* s, void* r, size_t n, DataType t, int root) {
  return impl_->Issue(Args(OpKind::kBroadcast, s, r, n, t, RedOp::kSum, root));
}
Work Communicator::ReduceAsync(const void* s, void* r, size_t n, DataType t, const Reduction& op,
                               int root) {
  return impl_->Issue(Args(OpKind::kReduce, s, r, n, t, op, root));
}
Work Communicator::AllToAllAsync(const void* s, void* r, size_t n, DataType t) {
  return impl_->Issue(Args(OpKind::kAllToAll, s, r, n, t));
}
Work Communicator::SendAsync(const void* buf, size_t n, DataType t, int peer) {
  return impl_->Issue(Args(OpKind::kSendRecv, buf, nullptr, n, t, RedOp::kSum, peer));
}
Work Communicator::RecvAsync(void* buf, size_t n, DataType t, int peer) {
  return impl_->Issue(Args(OpKind::kSendRecv, nullptr, buf, n, t, RedOp::kSum, peer));
}
Work Communicator::BarrierAsync() {
  return impl_->Issue(Args(OpKind::kBarrier, nullptr, nullptr, 0, DataType::kUint8));
}

Status Communicator::AllReduce(const void* s, void* r, size_t n, DataType t, const Reduction& op) {
  return impl_->IssueBlocking(Args(OpKind::kAllReduce, s, r, n, t, op));
}
Status Communicator::ReduceScatter(const void* s, void* r, size_t n, DataType t,
                                   const Reduction& op) {
  return impl_->IssueBlocking(Args(OpKind::kReduceScatter, s, r, n, t, op));
}
Status Communicator::AllGather(const void* s, void* r, size_t n, DataType t) {
  return impl_->IssueBlocking(Args(OpKind::kAllGather, s, r, n, t));
}
Status Communicator::Broadcast(const void* s, void* r, size_t n, DataType t, int root) {
  return impl_->IssueBlocking(Args(OpKind::kBroadcast, s, r, n, t, RedOp::kSum, root));
}
Status Communicator::Reduce(const void* s, void* r, size_t n, DataType t, const Reduction& op,
                            int root) {
  return impl_->IssueBlocking(Args(OpKind::kReduce, s, r, n, t, op, root));
}
Status Communicator::AllToAll(const void* s, void* r, size_t n, DataType t) {
  return impl_->IssueBlocking(Args(OpKind::kAllToAll, s, r, n, t));
}
Status Communicator::Send(const void* buf, size_t n, DataType t, int peer) {
  return impl_->IssueBlocking(Args(OpKind::kSendRecv, buf, nullptr, n, t, RedOp::kSum, peer));
}
Status Communicator::Recv(void* buf, size_t n, DataType t, int peer) {
  return impl_->IssueBlocking(Args(OpKind::kSendRecv, nullptr, buf, n, t, RedOp::kSum, peer));
}
Status Communicator::Barrier() {
  return impl_->IssueBlocking(Args(OpKind::kBarrier, nullptr, nullptr, 0, DataType::kUint8));
}

Status Communicator::AllReduce(const void* s, void* r, size_t n, DataType t, const Reduction& op,
                               GpuStream st) {
  return impl_->IssueOnStream(Args(OpKind::kAllReduce, s, r, n, t, op), st);
}
Status Communicator::ReduceScatter(const void* s, void* r, size_t n, DataType t,
                                   const Reduction& op, GpuStream st) {
  return impl_->IssueOnStream(Args(OpKind::kReduceScatter, s, r, n, t, op), st);
}
Status Communicator::AllGather(const void* s, void* r, size_t n, DataType t, GpuStream st) {
  return impl_->IssueOnStream(Args(OpKind::kAllGather, s, r, n, t), st);
}
Status Communicator::Broadcast(const void* s, void* r, size_t n, DataType t, int root,
                               GpuStream st) {
  return impl_->IssueOnStream(Args(OpKind::kBroadcast, s, r, n, t, RedOp::kSum, root), st);
}
Status Communicator::Reduce(const void* s, void* r, size_t n, DataType t, const Reduction& op,
                            int root, GpuStream st) {
  return impl_->IssueOnStream(Args(OpKind::kReduce, s, r, n, t, op, root), st);
}
Status Communicator::AllToAll(const void* s, void* r, size_t n, DataType t, GpuStream st) {
  return impl_->IssueOnStream(Args(OpKind::kAllToAll, s, r, n, t), st);
}
Status Communicator::Send(const void* buf, size_t n, DataType t, int peer, GpuStream st) {
  return impl_->IssueOnStream(Args(OpKind::kSendRecv, buf, nullptr, n, t, RedOp::kSum, peer), st);
}
Status Communicator::Recv(void* buf, size_t n, DataType t, int peer, GpuStream st) {
  return impl_->IssueOnStream(Args(OpKind::kSendRecv, nullptr, buf, n, t, RedOp::kSum, peer), st);
}

const char* Version() { return LOOM_VERSION_STRING; }
int VersionCode() {
  return LOOM_VERSION_MAJOR * 10000 + LOOM_VERSION_MINOR * 100 + LOOM_VERSION_PATCH;
}

}  // namespace loom
