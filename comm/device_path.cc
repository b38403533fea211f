// DevicePath: buffer classification, the pinned staging cache, and the
// stream/worker handshake of stream-ordered device-buffer operations.
#include "comm/device_path.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>
#include <string_view>
#include <thread>

#include "base/log.h"
#include "base/params.h"
#if LOOM_HAVE_CUDA
#include "collectives/reduce/cuda/cuda_device_ops.h"
#include "transports/cuda/cuda_runtime.h"
#endif

namespace loom {

namespace {

std::atomic<cuda::DeviceOps*> g_test_ops{nullptr};

constexpr uint64_t kReleased = std::numeric_limits<uint64_t>::max();
constexpr size_t kRegionAlign = 64;          // regions never share a cache line
constexpr size_t kMinBlock = size_t{64} << 10;  // small ops share one block size
// How long destructors wait for streams to drain (staging memory, DrainStream).
constexpr auto kDrainWait = std::chrono::seconds(10);

size_t AlignUp(size_t n) { return (n + kRegionAlign - 1) / kRegionAlign * kRegionAlign; }

size_t BlockSizeFor(size_t bytes) {
  size_t b = kMinBlock;
  while (b < bytes) b *= 2;
  return b;
}

// Bytes of the send and receive buffers `a` moves on `rank` of `size`; 0 for
// a buffer the operation does not use there (Validate's rules).
struct Extents {
  size_t send = 0, recv = 0;
};

Extents ExtentsOf(const CollArgs& a, int rank, int size) {
  const size_t bytes = a.count * SizeOf(a.type);
  const size_t all = bytes * static_cast<size_t>(size);
  switch (a.kind) {
    case OpKind::kAllReduce:
      return {bytes, bytes};
    case OpKind::kReduceScatter:
      return {all, bytes};
    case OpKind::kAllGather:
      return {bytes, all};
    case OpKind::kBroadcast:
      return {rank == a.root ? bytes : 0, bytes};
    case OpKind::kReduce:
      return {bytes, rank == a.root ? bytes : 0};
    case OpKind::kAllToAll:
      return {all, all};
    case OpKind::kSendRecv:
      return {a.send != nullptr ? bytes : 0, a.recv != nullptr ? bytes : 0};
    case OpKind::kBarrier:
    case OpKind::kInternal:
      break;
  }
  return {};
}

std::string Describe(const char* name, const cuda::BufferPlace& p) {
  std::string s = std::string(name) + " is " + p.kind + " memory";
  if (p.space == cuda::MemSpace::kDevice && p.device >= 0) s += " on GPU " + std::to_string(p.device);
  return s;
}

// Blocks of `count` elements a chunked operation's send and receive buffers
// hold on each rank: reduce-scatter and all-to-all send one block per rank,
// all-gather and all-to-all receive one per rank; the rest, one.
std::pair<int, int> ChunkBlocks(OpKind kind, int size) {
  const bool send_all = kind == OpKind::kReduceScatter || kind == OpKind::kAllToAll;
  const bool recv_all = kind == OpKind::kAllGather || kind == OpKind::kAllToAll;
  return {send_all ? size : 1, recv_all ? size : 1};
}

}  // namespace

cuda::DeviceOps* DefaultDeviceOps() {
  if (cuda::DeviceOps* t = g_test_ops.load()) return t;
#if LOOM_HAVE_CUDA
  static cuda::DeviceOps* real = cuda::DeviceCount() > 0 ? &cuda::CudaDeviceOps() : nullptr;
  return real;
#else
  return nullptr;
#endif
}

std::string GpuSummary() {
#if LOOM_HAVE_CUDA
  return cuda::DeviceSummary();
#else
  return "none: built without CUDA";
#endif
}

void SetDeviceOpsForTesting(cuda::DeviceOps* ops) { g_test_ops.store(ops); }

// One pinned staging block and the events of the op on one stream that uses
// it. Free for reuse once `drained` completed (the H2D copies out of it ran).
// Blocks of 0 bytes carry only the events (streams whose items are all IPC).
struct DevicePath::Block {
  void* mem = nullptr;
  size_t bytes = 0;
  cuda::EventHandle ready = nullptr;
  cuda::EventHandle drained = nullptr;
  bool staging = false;  // taken by the StageAndQueue call in progress
};

// The staged part of one queued operation: per stream, the event that says
// its input reached pinned memory.
struct StagedOp {
  uint64_t seq = 0;
  std::vector<cuda::EventHandle> ready;
  cuda::DeviceOps* ops = nullptr;
};

DevicePath::DevicePath() : ops_(DefaultDeviceOps()) {
  const int64_t chunk = params::kCudaStagingChunk.Get();
  chunk_bytes_ = chunk <= 0 ? 0 : static_cast<size_t>(std::max<int64_t>(4096, chunk));
}

DevicePath::~DevicePath() {
  if (ops_ == nullptr) return;
  ReleaseAll();
  std::lock_guard<std::mutex> lock(mu_);
  const auto until = std::chrono::steady_clock::now() + kDrainWait;
  bool leaked = false;
  for (auto& b : blocks_) {
    bool drained = false;
    for (;;) {
      Result<bool> q = ops_->QueryEvent(b->drained);
      drained = !q.ok() || q.value();  // a failed query: the stream is gone
      if (drained || std::chrono::steady_clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!drained) {
      leaked = true;
      continue;
    }
    ops_->DestroyEvent(b->ready);
    ops_->DestroyEvent(b->drained);
    ops_->FreePinned(b->mem);
  }
  if (leaked) {
    LOOM_WARN(log::kColl,
              "device staging memory still in use by a stream that does not progress; "
              "leaking it rather than freeing it under the stream");
    return;  // the signal word too: that stream may still wait on it
  }
  ops_->FreePinned(done_seq_);
}

Result<cuda::MemSpace> DevicePath::Classify(const CollArgs& a, int rank, bool* managed) const {
  if (managed != nullptr) *managed = false;
  if (ops_ == nullptr || a.count == 0) return cuda::MemSpace::kHost;
  // Size 1 is enough to tell which buffers the op touches here.
  const Extents e = ExtentsOf(a, rank, 1);
  cuda::BufferPlace send, recv;
  if (e.send > 0) {
    LOOM_ASSIGN_OR_RETURN(send, ops_->Classify(a.send));
  }
  if (e.recv > 0) {
    LOOM_ASSIGN_OR_RETURN(recv, ops_->Classify(a.recv));
  }
  if (e.send > 0 && e.recv > 0 && send.space != recv.space) {
    return InvalidUsage(std::string(OpKindName(a.kind)) + ": " + Describe("sendbuf", send) +
                        ", " + Describe("recvbuf", recv) +
                        ": both buffers must be device memory, or both host memory");
  }
  if (managed != nullptr) {
    *managed = std::string_view(send.kind) == "managed" || std::string_view(recv.kind) == "managed";
  }
  return e.send > 0 ? send.space : recv.space;
}

Status DevicePath::EnsureSignal() {
  if (done_seq_ != nullptr) return Status::Ok();
  LOOM_ASSIGN_OR_RETURN(void* p, ops_->AllocPinned(kRegionAlign));
  done_seq_ = static_cast<uint64_t*>(p);
  std::atomic_ref<uint64_t>(*done_seq_).store(released_ ? kReleased : 0, std::memory_order_release);
  return Status::Ok();
}

Result<DevicePath::Block*> DevicePath::Acquire(size_t bytes) {
  Block* best = nullptr;
  for (auto& b : blocks_) {
    if (b->staging || b->bytes < bytes) continue;
    LOOM_ASSIGN_OR_RETURN(const bool free, ops_->QueryEvent(b->drained));
    if (free && (best == nullptr || b->bytes < best->bytes)) best = b.get();
  }
  if (best == nullptr) {
    // Grow: drop idle blocks too small to serve this size again.
    for (auto it = blocks_.begin(); it != blocks_.end();) {
      Block& b = **it;
      Result<bool> free = ops_->QueryEvent(b.drained);
      if (!b.staging && b.bytes > 0 && b.bytes < bytes && free.ok() && free.value()) {
        ops_->DestroyEvent(b.ready);
        ops_->DestroyEvent(b.drained);
        ops_->FreePinned(b.mem);
        it = blocks_.erase(it);
      } else {
        ++it;
      }
    }
    auto b = std::make_unique<Block>();
    // A stream with only in-place (IPC) items needs the events, no memory.
    b->bytes = bytes == 0 ? 0 : BlockSizeFor(bytes);
    if (b->bytes > 0) {
      LOOM_ASSIGN_OR_RETURN(b->mem, ops_->AllocPinned(b->bytes));
      ++allocations_;
    }
    Result<cuda::EventHandle> ready = ops_->CreateEvent();
    Result<cuda::EventHandle> drained = ops_->CreateEvent();
    if (!ready.ok() || !drained.ok()) {
      if (ready.ok()) ops_->DestroyEvent(ready.value());
      if (drained.ok()) ops_->DestroyEvent(drained.value());
      ops_->FreePinned(b->mem);
      return ready.ok() ? drained.status() : ready.status();
    }
    b->ready = ready.value();
    b->drained = drained.value();
    LOOM_TRACE(log::kColl, "device staging: new pinned block of %zu bytes (%zu blocks)", b->bytes,
               blocks_.size() + 1);
    best = b.get();
    blocks_.push_back(std::move(b));
  }
  best->staging = true;
  return best;
}

Result<size_t> DevicePath::ScalarSlotBytes(const CollArgs& a) const {
  if (!a.premul || a.scalar.where != PreMulScalar::Where::kPointer) return size_t{0};
  LOOM_ASSIGN_OR_RETURN(const cuda::BufferPlace place, ops_->Classify(a.scalar.pointer));
  return place.space == cuda::MemSpace::kDevice ? AlignUp(SizeOf(a.type)) : size_t{0};
}

Status DevicePath::StageScalar(CollArgs& a, char* slot, cuda::StreamHandle stream) {
  LOOM_TRY(ops_->CopyAsync(slot, a.scalar.pointer, SizeOf(a.type), stream));
  a.scalar.pointer = slot;  // the host reads it there once `ready` passed
  return Status::Ok();
}

Status DevicePath::StageChunks(const CollArgs& a, cuda::StreamHandle stream, int rank, int size,
                               size_t chunk_elems, const QueueFn& queue) {
  const size_t es = SizeOf(a.type);
  const auto [send_blocks, recv_blocks] = ChunkBlocks(a.kind, size);
  // Chunk [off, off + len) of every block: block p's part sits at element
  // p * count + off of the user's buffer and at p * len of the pinned region,
  // which is exactly the layout the host algorithm expects for count = len.
  auto copy_blocks = [&](char* dst, size_t dst_stride, const char* src, size_t src_stride,
                         int blocks, size_t len) -> Status {
    for (int p = 0; p < blocks; ++p) {
      LOOM_TRY(ops_->CopyAsync(dst + p * dst_stride, src + p * src_stride, len * es, stream));
    }
    return Status::Ok();
  };
  struct Chunk {
    CollArgs args;  // pointers rewritten to the block
    size_t off;
    size_t recv_bytes;
    Block* block;
    std::shared_ptr<StagedOp> op;
  };
  std::vector<Chunk> chunks;
  LOOM_ASSIGN_OR_RETURN(const size_t slot, ScalarSlotBytes(a));
  Status failed;
  // 1. Every chunk's input to pinned memory, each followed by its `ready`.
  for (size_t off = 0; off < a.count && failed.ok(); off += chunk_elems) {
    Chunk c;
    c.args = a;
    c.off = off;
    c.args.count = std::min(chunk_elems, a.count - off);
    const size_t len = c.args.count;
    const Extents e = ExtentsOf(c.args, rank, size);
    Result<Block*> block = Acquire(AlignUp(e.send) + AlignUp(e.recv) + slot);
    if (!block.ok()) {
      failed = block.status();
      break;
    }
    c.block = block.value();
    char* base = static_cast<char*>(c.block->mem);
    c.recv_bytes = e.recv;
    c.args.send = e.send > 0 ? base : nullptr;
    c.args.recv = e.recv > 0 ? base + AlignUp(e.send) : nullptr;
    c.op = std::make_shared<StagedOp>();
    c.op->seq = ++next_seq_;
    c.op->ops = ops_;
    c.op->ready.push_back(c.block->ready);
    if (e.send > 0) {
      failed = copy_blocks(static_cast<char*>(const_cast<void*>(c.args.send)), len * es,
                           static_cast<const char*>(a.send) + off * es, a.count * es, send_blocks, len);
    }
    if (failed.ok() && slot > 0) {
      failed = StageScalar(c.args, base + AlignUp(e.send) + AlignUp(e.recv), stream);
    }
    if (failed.ok()) failed = ops_->RecordEvent(c.block->ready, stream);
    chunks.push_back(std::move(c));
  }
  // 2. Each chunk's results back once the host finished it.
  for (Chunk& c : chunks) {
    const size_t len = c.args.count;
    if (failed.ok()) failed = ops_->StreamWaitValue(stream, done_seq_, c.op->seq);
    if (failed.ok() && c.recv_bytes > 0) {
      failed = copy_blocks(static_cast<char*>(a.recv) + c.off * es, a.count * es,
                           static_cast<const char*>(c.args.recv), len * es, recv_blocks, len);
    }
    if (failed.ok()) failed = ops_->RecordEvent(c.block->drained, stream);
  }
  for (Chunk& c : chunks) c.block->staging = false;
  if (!failed.ok()) return failed;
  for (Chunk& c : chunks) queue({c.args}, std::move(c.op));
  return Status::Ok();
}

Status PollDeviceEvent(cuda::DeviceOps& ops, cuda::EventHandle event, Deadline deadline,
                       const std::atomic<bool>& abort, const char* what) {
  auto backoff = std::chrono::microseconds(1);
  for (;;) {
    LOOM_ASSIGN_OR_RETURN(const bool done, ops.QueryEvent(event));
    if (done) return Status::Ok();
    if (abort.load()) return RemoteError(std::string("aborted while ") + what + " ran");
    if (deadline.expired()) return TimeoutError(std::string(what) + " did not finish in time");
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::microseconds(100));
  }
}

Result<OwnStream> NewOwnStream(cuda::DeviceOps& ops) {
  OwnStream own;
  LOOM_ASSIGN_OR_RETURN(own.stream, ops.NewStream());
  Result<cuda::EventHandle> e = ops.CreateEvent();
  if (!e.ok()) {
    ops.DestroyStream(own.stream);
    return e.status();
  }
  own.event = e.value();
  return own;
}

bool DrainStream(cuda::DeviceOps& ops, cuda::StreamHandle stream, cuda::EventHandle event) {
  const auto until = std::chrono::steady_clock::now() + kDrainWait;
  if (!ops.RecordEvent(event, stream).ok()) return false;
  for (;;) {
    Result<bool> q = ops.QueryEvent(event);
    if (!q.ok() || q.value()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool NetworkTakesDeviceBuffer(const CollArgs& a, int rank, const Connection* to_peer) {
  if (a.kind != OpKind::kSendRecv || a.root == rank || to_peer == nullptr) return false;
  if (a.send != nullptr) return to_peer->sends_device_memory();
  const size_t from = to_peer->receives_device_memory_from();
  return from > 0 && a.count * SizeOf(a.type) >= from;
}

Status DevicePath::StageAndQueue(std::vector<CollArgs> items, const std::vector<Placement>& where,
                                 int rank, int size, const QueueFn& queue) {
  std::lock_guard<std::mutex> lock(mu_);
  LOOM_TRY(EnsureSignal());
  if (chunk_bytes_ > 0 && items.size() == 1 && where[0].device && !where[0].in_place()) {
    const CollArgs& a = items.front();
    // A chunk's larger region is about chunk_bytes_.
    const auto [send_blocks, recv_blocks] = ChunkBlocks(a.kind, size);
    const size_t per_elem = SizeOf(a.type) * static_cast<size_t>(std::max(send_blocks, recv_blocks));
    const size_t chunk_elems = std::max<size_t>(1, chunk_bytes_ / per_elem);
    const bool chunkable = a.kind != OpKind::kSendRecv && a.kind != OpKind::kBarrier &&
                           a.kind != OpKind::kInternal;
    if (chunkable && a.count > chunk_elems) {
      Status s = StageChunks(a, where[0].stream, rank, size, chunk_elems, queue);
      if (!s.ok()) {
        // Part of the work may be on the stream already: the caller fails
        // the communicator, which releases it.
        return s.WithContext("enqueueing device staging for " + std::string(OpKindName(a.kind)));
      }
      return Status::Ok();
    }
  }
  auto op = std::make_shared<StagedOp>();
  op->seq = ++next_seq_;
  op->ops = ops_;
  // Streams in order of first use; each gets one block holding its items'
  // regions, one D2H batch, one ready event and one release.
  std::vector<cuda::StreamHandle> streams;
  for (const Placement& p : where) {
    if (p.device && std::find(streams.begin(), streams.end(), p.stream) == streams.end()) {
      streams.push_back(p.stream);
    }
  }
  // Each staged item's scalar slot (0 for most), classified once, before
  // anything is enqueued.
  std::vector<size_t> slots(items.size(), 0);
  for (size_t i = 0; i < items.size(); ++i) {
    if (!where[i].device || where[i].in_place()) continue;
    LOOM_ASSIGN_OR_RETURN(slots[i], ScalarSlotBytes(items[i]));
  }
  std::vector<Block*> taken;
  auto untake = [&] {
    for (Block* b : taken) b->staging = false;
  };
  Status failed;
  for (cuda::StreamHandle stream : streams) {
    size_t need = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!where[i].device || where[i].in_place() || where[i].stream != stream) continue;
      const Extents e = ExtentsOf(items[i], rank, size);
      need += AlignUp(e.send) + AlignUp(e.recv) + slots[i];
    }
    Result<Block*> block = Acquire(need);
    if (!block.ok()) {
      failed = block.status();
      break;
    }
    Block* b = block.value();
    taken.push_back(b);
    char* base = static_cast<char*>(b->mem);
    // H2D copies to issue after the wait: (user buffer, pinned region, bytes).
    struct Back {
      void* dst;
      const void* src;
      size_t bytes;
    };
    std::vector<Back> back;
    size_t off = 0;
    for (size_t i = 0; i < items.size() && failed.ok(); ++i) {
      if (!where[i].device || where[i].stream != stream) continue;
      CollArgs& a = items[i];
      if (where[i].in_place()) {
        a.device = where[i].ipc;  // read in place on the device, after `ready`
        a.gdr = where[i].gdr;     // read or written in place by the NIC
        continue;
      }
      const Extents e = ExtentsOf(a, rank, size);
      const void* user_send = a.send;
      void* user_recv = a.recv;
      a.send = e.send > 0 ? base + off : nullptr;
      off += AlignUp(e.send);
      a.recv = e.recv > 0 ? base + off : nullptr;
      off += AlignUp(e.recv);
      if (e.send > 0) failed = ops_->CopyAsync(const_cast<void*>(a.send), user_send, e.send, stream);
      if (e.recv > 0) back.push_back({user_recv, a.recv, e.recv});
      if (failed.ok() && slots[i] > 0) {
        failed = StageScalar(a, base + off, stream);
        off += slots[i];
      }
    }
    if (failed.ok()) failed = ops_->RecordEvent(b->ready, stream);
    if (failed.ok()) failed = ops_->StreamWaitValue(stream, done_seq_, op->seq);
    for (const Back& c : back) {
      if (failed.ok()) failed = ops_->CopyAsync(c.dst, c.src, c.bytes, stream);
    }
    if (failed.ok()) failed = ops_->RecordEvent(b->drained, stream);
    if (!failed.ok()) break;
    op->ready.push_back(b->ready);
  }
  untake();
  if (!failed.ok()) {
    // Part of the work may be on a stream already: the caller fails the
    // communicator, which releases it.
    return failed.WithContext("enqueueing device staging for " +
                              std::string(OpKindName(items.front().kind)));
  }
  queue(std::move(items), std::move(op));
  return Status::Ok();
}

Status DevicePath::AwaitReady(const StagedOp& op, Deadline deadline,
                              const std::atomic<bool>& abort) const {
  auto backoff = std::chrono::microseconds(1);
  for (cuda::EventHandle e : op.ready) {
    for (;;) {
      LOOM_ASSIGN_OR_RETURN(const bool done, op.ops->QueryEvent(e));
      if (done) break;
      if (abort.load()) return RemoteError("aborted while waiting for the stream's earlier work");
      if (deadline.expired()) {
        return TimeoutError(
            "the work queued on the stream before this operation did not finish in time "
            "(a stream that waits for a later host event, or a hung kernel?)");
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::microseconds(200));
    }
  }
  return Status::Ok();
}

void DevicePath::Complete(const StagedOp& op) {
  std::atomic_ref<uint64_t> word(*done_seq_);
  uint64_t cur = word.load(std::memory_order_relaxed);
  // Never lower it: ReleaseAll may have stored kReleased concurrently.
  while (cur < op.seq && !word.compare_exchange_weak(cur, op.seq, std::memory_order_release)) {
  }
}

void DevicePath::ReleaseAll() {
  if (ops_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  released_ = true;
  if (done_seq_ != nullptr) {
    std::atomic_ref<uint64_t>(*done_seq_).store(kReleased, std::memory_order_release);
  }
}

size_t DevicePath::staging_allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocations_;
}

}  // namespace loom
