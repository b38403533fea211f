// DevicePath: a communicator's stream-ordered path for device buffers. It
// classifies buffers, stages device data through a reused pinned-host cache,
// and lets the user's stream wait for the communicator on a host-written
// sequence word, so collectives on device memory run the host algorithms.
//
// Per staged operation, on each user stream involved, at issue time:
//   D2H(send regions -> pinned)  record(ready)  wait(done_seq >= seq)
//   H2D(pinned -> recv regions)  record(drained)
// The worker waits for `ready` by polling (deadline and abort aware), runs
// the host algorithm on the pinned regions, then stores done_seq = seq.
// Abort or any failure stores done_seq = UINT64_MAX: every stream waiting
// on this communicator goes on at once (outputs undefined, AsyncError says why).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/algos/algorithms.h"
#include "transports/cuda/device_ops.h"
#include "transports/transport.h"

namespace loom {

// How one issued item is placed: device items are ordered on `stream`, and
// staged through pinned host memory unless `ipc` (then the device reads the
// peers' buffers in place, comm/device_ipc.h) or `gdr` (a Send/Recv the
// network transport reads or writes in place, GPUDirect RDMA).
struct Placement {
  bool device = false;
  cuda::StreamHandle stream = nullptr;
  bool ipc = false;
  bool gdr = false;
  bool in_place() const { return ipc || gdr; }
};

// Whether the connection to a Send/Recv's peer moves its device buffer in
// place: sends when the connection sends from GPU memory, receives when it
// receives this many bytes straight into GPU memory. Never for a message
// to self or without a connection. Pure.
bool NetworkTakesDeviceBuffer(const CollArgs& a, int rank, const Connection* to_peer);

// Waits for recorded device work by polling `event` with backoff (1 us
// doubling to 100 us), never blocking in the driver: kTimeout at
// `deadline`, RemoteError once `abort` is set, naming `what`.
Status PollDeviceEvent(cuda::DeviceOps& ops, cuda::EventHandle event, Deadline deadline,
                       const std::atomic<bool>& abort, const char* what);

// A stream of the communicator's own and an event to wait for it: both, or
// neither and the error.
struct OwnStream {
  cuda::StreamHandle stream = nullptr;
  cuda::EventHandle event = nullptr;
};
Result<OwnStream> NewOwnStream(cuda::DeviceOps& ops);

// For destructors: whether everything queued on `stream` finished within
// 10 s (recorded on `event`, polled every millisecond); a failed query
// counts as finished. When not, the caller leaks what the work may touch.
bool DrainStream(cuda::DeviceOps& ops, cuda::StreamHandle stream, cuda::EventHandle event);

// One queued operation's device side (defined in device_path.cc). Shared
// between the queued Op and nobody else; opaque to the communicator.
struct StagedOp;

// Process-wide DeviceOps new communicators use: the one set for tests, else
// the CUDA runtime's when built with CUDA and a device is visible, else none
// (then every buffer is host memory and the path costs one null check).
cuda::DeviceOps* DefaultDeviceOps();

// The GPUs this process sees, in a line: "2 device(s) visible", why none
// is, or that the build has no CUDA.
std::string GpuSummary();
// Tests: communicators created after this call use `ops` (nullptr restores
// the default). `ops` must outlive those communicators.
void SetDeviceOpsForTesting(cuda::DeviceOps* ops);

// Thread-safety: Classify is const and safe from any thread; Stage runs on
// issuing threads (serialised inside); AwaitReady/Complete run on the one
// thread executing operations; ReleaseAll from any thread, any time.
class DevicePath {
 public:
  DevicePath();  // takes DefaultDeviceOps(); allocates nothing until the first device op
  // Releases every wait, then frees the pinned memory once the streams have
  // drained it (bounded; memory a stuck stream may still touch is leaked
  // with a WARN rather than freed under it).
  ~DevicePath();
  DevicePath(const DevicePath&) = delete;
  DevicePath& operator=(const DevicePath&) = delete;

  // Where `a`'s buffers live, for a rank `rank` of `size`. kHost when there
  // are no device ops, nothing to move, or both buffers are host memory;
  // InvalidUsage naming both buffers when one is device memory and the other
  // host memory.
  // `managed` (optional) tells whether a buffer it uses is managed memory:
  // device space, but not exportable through CUDA IPC, so such calls stage.
  Result<cuda::MemSpace> Classify(const CollArgs& a, int rank, bool* managed = nullptr) const;

  // A single staged collective larger than the chunk
  // (LOOM_CUDA_STAGING_CHUNK) is split into one operation per chunk of the
  // per-rank blocks, each with its own sequence number: the stream copies
  // every chunk to pinned memory first, then waits for and copies back each
  // in turn, so the device-to-host copies, the host algorithm and the copies
  // back overlap. Every rank must then stage the same way: a rank passing
  // host memory for the same call runs one operation where this one runs
  // several (the transports name the mismatch); LOOM_CUDA_STAGING_CHUNK=0
  // stages whole buffers, for jobs that mix GPU and CPU ranks.
  //
  // Stages `items` (those with where[i].device; others are left alone) and
  // hands them with their StagedOp to `queue`, under one lock so that
  // sequence order is queue order. Rewrites the device pointers of `items`
  // to pinned regions, except for `ipc` items, which keep them and are
  // marked CollArgs::device, and `gdr` items, marked CollArgs::gdr (the
  // streams of both only wait). Returns once everything is enqueued on the streams;
  // an enqueue failure is returned, and the caller must then release the
  // streams (part of the work may be on them already).
  using QueueFn = std::function<void(std::vector<CollArgs>, std::shared_ptr<StagedOp>)>;
  Status StageAndQueue(std::vector<CollArgs> items, const std::vector<Placement>& where, int rank,
                       int size, const QueueFn& queue);

  // Blocks until the work queued on each stream before `op` has finished
  // (its data is in the pinned regions), polling with backoff; kTimeout at
  // `deadline`, RemoteError once `abort` is set.
  Status AwaitReady(const StagedOp& op, Deadline deadline, const std::atomic<bool>& abort) const;
  // The host part of `op` succeeded: its streams copy the results back.
  void Complete(const StagedOp& op);
  // Releases every current and future wait on this communicator. Idempotent.
  void ReleaseAll();

  // Pinned staging blocks allocated so far (for tests: no growth at steady state).
  size_t staging_allocations() const;
  // The device layer in use; null when every buffer is host memory.
  cuda::DeviceOps* ops() const { return ops_; }

 private:
  struct Block;
  Result<Block*> Acquire(size_t bytes);  // mu_ held
  Status EnsureSignal();                 // mu_ held
  // A staged PreMulSum whose scalar is device memory: the stream copies the
  // scalar into a pinned slot with the inputs (ScalarSlotBytes: the slot's
  // size, else 0), and the host algorithm reads it there (StageScalar
  // enqueues the copy and points `a` at the slot).
  Result<size_t> ScalarSlotBytes(const CollArgs& a) const;
  Status StageScalar(CollArgs& a, char* slot, cuda::StreamHandle stream);
  // The chunked form of StageAndQueue (see there); mu_ held.
  Status StageChunks(const CollArgs& a, cuda::StreamHandle stream, int rank, int size,
                     size_t chunk_elems, const QueueFn& queue);

  cuda::DeviceOps* ops_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Block>> blocks_;
  size_t allocations_ = 0;
  uint64_t* done_seq_ = nullptr;  // pinned signal word; UINT64_MAX once released for good
  uint64_t next_seq_ = 0;
  size_t chunk_bytes_ = 0;  // LOOM_CUDA_STAGING_CHUNK, read at creation; 0 = whole buffers
  bool released_ = false;  // ReleaseAll ran (before or after the word existed)
};

}  // namespace loom
