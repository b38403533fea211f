// Communicator: issuing operations into the queue (op_queue.h) or on the
// caller's thread, errors that stick, and the public methods; the
// dispatcher (dispatch.h) validates and runs each operation.
#include "comm/communicator_impl.h"

#include <chrono>
#include <thread>

#include "base/coarse_clock.h"
#include "base/log.h"
#include "comm/group.h"
#include "comm/launch_env.h"
#include "comm/unique_id.h"

namespace loom {

// ---------------------------------------------------------------- Work

Status Work::Wait(Deadline deadline) const {
  if (state_ == nullptr) return InvalidUsage("Wait on an empty Work handle");
  State& st = *state_;
  if (st.done.load(std::memory_order_acquire) != 0) return st.status;
  // Running an op here can take up to the op's own timeout: only a caller
  // prepared to wait that long helps; an earlier deadline just sleeps.
  OpQueue* owner = st.owner;
  if (owner != nullptr &&
      (deadline.never() || deadline.at() >= Deadline::After(owner->op_timeout()).at())) {
    owner->HelpUntil(state_.get());
  }
  st.sleepers.fetch_add(1, std::memory_order_seq_cst);
  while (st.done.load(std::memory_order_seq_cst) == 0) {
    timespec ts{};
    const timespec* timeout = nullptr;
    if (!deadline.never()) {
      const auto left = deadline.at() - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) {
        st.sleepers.fetch_sub(1, std::memory_order_relaxed);
        return TimeoutError("operation still running at the caller's deadline");
      }
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      ts = timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      timeout = &ts;
    }
    // Returns at once if done is no longer 0; wakes spuriously at times.
    Futex(&st.done, FUTEX_WAIT_PRIVATE, 0, timeout);
  }
  st.sleepers.fetch_sub(1, std::memory_order_relaxed);
  return st.status;
}

bool Work::Test() const {
  if (state_ == nullptr) return true;
  return state_->done.load(std::memory_order_acquire) != 0;
}

Status Work::OnComplete(std::function<void(const Status&)> callback) const {
  if (state_ == nullptr) return InvalidUsage("OnComplete on an empty Work handle");
  if (!callback) return InvalidArgument("OnComplete needs a callback, got an empty function");
  State& st = *state_;
  if (st.done.load(std::memory_order_acquire) != 0) {
    callback(st.status);
    return Status::Ok();
  }
  {
    std::lock_guard<std::mutex> lock(st.callbacks_mu);
    st.callbacks.push_back(std::move(callback));
  }
  // Pairs with Complete's store of done (see there).
  st.has_callbacks.store(1, std::memory_order_seq_cst);
  if (st.done.load(std::memory_order_seq_cst) != 0) st.RunCallbacks();
  return Status::Ok();
}

namespace {
Work DoneWork(Status s) {
  auto st = OpQueue::NewOp();
  st->Complete(std::move(s));
  return Work(std::move(st));
}
}  // namespace

// ---------------------------------------------------------------- Impl

Communicator::Impl::~Impl() {
  if (queue_) queue_->Stop();
  if (status_handle_ != 0) UnregisterStatusSource(status_handle_);
  // The store's reader thread calls back into this object: stop it first.
  store_.reset();
  queue_.reset();  // fails anything that never ran
}

Deadline Communicator::Impl::OpDeadline() const { return OpDeadline(CoarseNow()); }

Deadline Communicator::Impl::OpDeadline(std::chrono::steady_clock::time_point now) const {
  // A deadline of seconds needs no finer clock than a tick.
  if (timeout.count() <= 0) return Deadline::Never();
  return Deadline::At(now + timeout);
}

Work Communicator::Impl::Issue(CollArgs args) {
  Status v = dispatch_.Validate(args);
  if (!v.ok()) {
    LOOM_WARN(log::kColl, "rank %d: %s", rank, v.message().c_str());
    return DoneWork(v);
  }
  if (GroupDepth() > 0) {
    GroupAdd(this, args);
    return DoneWork(Status::Ok());
  }
  Op op = OpQueue::NewOp();
  op->one = args;
  return queue_->Enqueue(std::move(op));
}

Work Communicator::Impl::Submit(std::vector<CollArgs> items, std::shared_ptr<StagedOp> staged) {
  Op op = OpQueue::NewOp();
  if (items.size() == 1) {
    op->one = items.front();
  } else {
    op->many = std::move(items);
  }
  op->staged = std::move(staged);
  return queue_->Enqueue(std::move(op));
}

void Communicator::Impl::RunQueued(Work::State& op) {
  const bool device_op = op.staged != nullptr;
  if (device_op) device_running_.store(true);
  Status s = AsyncError();
  if (s.ok() && device_op) s = device_.AwaitReady(*op.staged, OpDeadline(), abort_);
  if (s.ok()) s = dispatch_.Execute(op.items());
  if (device_op) device_running_.store(false);
  if (!s.ok()) {
    s = Fail(s);  // records the error, then releases the streams
  } else if (device_op) {
    device_.Complete(*op.staged);
    if (release_requested_.load()) device_.ReleaseAll();  // deferred by ReleaseStreams
  }
  op.Finish(std::move(s));
}

Status Communicator::Impl::IssueBlocking(const CollArgs& args) {
  Status v = dispatch_.Validate(args);
  if (!v.ok()) {
    LOOM_WARN(log::kColl, "rank %d: %s", rank, v.message().c_str());
    return v;
  }
  if (GroupDepth() > 0) {
    GroupAdd(this, args);
    return Status::Ok();
  }
  return RunBlocking({&args, 1});
}

Status Communicator::Impl::RunBlocking(std::span<const CollArgs> items) {
  // Nothing queued or running: run on the caller's thread, saving two
  // thread hand-offs (most of a small message's latency).
  if (!queue_->ClaimIfIdle()) {
    // After the queued ops, or refused after Finalize.
    Op op = OpQueue::NewOp();
    if (items.size() == 1) {
      op->one = items.front();
    } else {
      op->many.assign(items.begin(), items.end());
    }
    return queue_->Enqueue(std::move(op)).Wait();
  }
  Status s = AsyncError();
  if (s.ok()) s = dispatch_.Execute(items);
  if (!s.ok()) s = Fail(s);
  queue_->Release();
  return s;
}

Status Communicator::Impl::IssueOnStream(const CollArgs& args, GpuStream stream) {
  Status v = dispatch_.Validate(args);
  Result<cuda::MemSpace> space = cuda::MemSpace::kHost;
  bool managed = false;
  if (v.ok()) space = device_.Classify(args, rank, &managed);
  if (v.ok() && !space.ok()) v = space.status();
  if (!v.ok()) {
    LOOM_WARN(log::kColl, "rank %d: %s", rank, v.message().c_str());
    return v;
  }
  if (space.value() == cuda::MemSpace::kHost) return IssueBlocking(args);
  // Managed memory cannot be exported through CUDA IPC nor as a dma-buf:
  // staged (then every rank must pass managed memory, as NCCL expects one
  // kind on all ranks).
  Placement where{true, stream, ipc_.Handles(args.kind) && !managed};
  // GPUDirect RDMA: Send/Recv the peer's connection takes in place, and the
  // data-moving collectives when every link has it (comm/device_net.h).
  if (!where.ipc && !managed && engine_ != nullptr) {
    where.gdr = args.kind == OpKind::kSendRecv
                    ? NetworkTakesDeviceBuffer(args, rank, engine_->connection(args.root))
                    : net_.Handles(args);
  }
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
  if (!s.ok()) return DoneWork(Fail(s));
  // Refused at once (issued after Finalize): its streams must not wait for it.
  if (w.Test() && !w.Wait().ok()) ReleaseStreams();
  return w;
}

Status Communicator::Impl::Fail(const Status& s) {
  // A peer that closed its connection or vanished has usually failed itself,
  // and the store is telling every rank why: wait a moment for that reason,
  // so that the error names the cause rather than the messenger.
  constexpr auto kCauseGrace = std::chrono::milliseconds(250);
  if (s.code() == Code::kRemoteError && store_ != nullptr) {
    const auto until = std::chrono::steady_clock::now() + kCauseGrace;
    while (!abort_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  bool first = false;
  Status reported;
  {
    std::lock_guard<std::mutex> lock(err_mu_);
    if (async_error_.ok()) {
      async_error_ = s;
      first = true;
    }
    reported = async_error_;
  }
  abort_.store(true);
  ReleaseStreams();  // no stream waits for an operation that will not run
  if (engine_) engine_->Wake();
  if (first) {
    LOOM_WARN(log::kColl, "rank %d: %s", rank, s.ToString().c_str());
    // Tell the other ranks, unless the error came from them.
    if (store_ && s.code() != Code::kRemoteError) store_->ReportFailure(s.ToString());
  }
  // This rank's own diagnosis stays its answer; what it learned from a peer
  // gives way to the cause recorded first.
  return s.code() == Code::kRemoteError ? reported : s;
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
  uint64_t pending = 0;
  if (!queue_->Drain(deadline, &pending)) {
    return TimeoutError("rank " + std::to_string(rank) + ": " +
                        (pending > 0 ? std::to_string(pending) + " operation(s) still pending"
                                     : std::string("an operation still running")) +
                        " at the deadline");
  }
  return AsyncError();
}

Status Communicator::Impl::Finalize() {
  Status s = Drain(OpDeadline());
  if (!queue_->Close()) return s;
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
