// DeviceOps: the few device calls the communicator's stream-ordered path
// needs, behind one interface, so that path can be unit-tested on machines
// without a GPU (FakeDeviceOps) and run on the CUDA runtime elsewhere
// (CudaDeviceOps). No CUDA header is needed to use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "loom/types.hpp"
#include "transports/cuda/ipc.h"

// The opaque types CUDA declares: a cudaStream_t is a CUstream_st*, a
// cudaEvent_t a CUevent_st*. Declaring them here keeps CUDA headers out.
struct CUstream_st;
struct CUevent_st;

namespace loom::cuda {

using StreamHandle = CUstream_st*;  // == cudaStream_t; nullptr is the legacy default stream
using EventHandle = CUevent_st*;    // == cudaEvent_t

// Where a buffer lives for the communicator: host memory (plain or pinned)
// is used in place; device memory (and managed memory) is staged.
enum class MemSpace { kHost, kDevice };

struct BufferPlace {
  MemSpace space = MemSpace::kHost;
  int device = -1;           // owning GPU for kDevice, else -1
  const char* kind = "host";  // for messages: "host", "pinned host", "device", "managed"
};

// Contract of every implementation:
// - Thread-safe: any thread may call any method at any time.
// - Stream calls (Copy*, RecordEvent, StreamWaitValue) only enqueue: they
//   return once the work is queued, the work starts after everything queued
//   on that stream before it, and later work on the stream starts only after
//   it finished. None of them blocks the caller on the device.
// - Errors come back as kUnhandledCudaError naming the call.
class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual const char* name() const = 0;

  // Where `ptr` points. Never fails for host memory.
  virtual Result<BufferPlace> Classify(const void* ptr) = 0;

  // Page-locked host memory the device can read and write (staging buffers
  // and the signal word). FreePinned(nullptr) is a no-op. FreePinned must not
  // be called while queued stream work still uses the memory.
  virtual Result<void*> AllocPinned(size_t bytes) = 0;
  virtual void FreePinned(void* p) = 0;

  // Stream-ordered copies (see the contract above). Either side may be
  // device or pinned host memory.
  virtual Status CopyAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) = 0;

  // Events: capture the work queued on a stream so far. An event never
  // recorded queries as complete (as in CUDA).
  virtual Result<EventHandle> CreateEvent() = 0;
  virtual void DestroyEvent(EventHandle event) = 0;
  virtual Status RecordEvent(EventHandle event, StreamHandle stream) = 0;
  // Non-blocking: true once the captured work finished.
  virtual Result<bool> QueryEvent(EventHandle event) = 0;

  // Later work on `stream` waits until the 64-bit word at `word` (pinned
  // memory from AllocPinned, written by the host with a release store) is
  // >= `value`. The wait holds no SM and no host thread in CudaDeviceOps
  // when the device supports stream memory operations.
  virtual Status StreamWaitValue(StreamHandle stream, const uint64_t* word, uint64_t value) = 0;

  // --- What the CUDA IPC path (comm/device_ipc.h) needs ---

  // A stream of the communicator's own (non-blocking with respect to the
  // legacy default stream), and its release. DestroyStream(nullptr) is a no-op.
  virtual Result<StreamHandle> NewStream() = 0;
  virtual void DestroyStream(StreamHandle stream) = 0;

  // Stream-ordered reduction kernels with the semantics of ReduceInto and
  // ScaleForAvg (collectives/reduce/reduce.h); pointers may be the device's
  // own memory or a peer's mapped through ipc().
  virtual Status ReduceAsync(void* dst, const void* a, const void* b, size_t count, DataType type,
                             RedOp op, StreamHandle stream) = 0;
  virtual Status ScaleForAvgAsync(void* buf, size_t count, DataType type, int nranks,
                                  StreamHandle stream) = 0;
  // A PreMulSum's scaling with PreMulInto's semantics (reduce.h); a
  // kPointer scalar is device memory, read when the kernel runs.
  virtual Status PreMulAsync(void* dst, const void* src, size_t count, DataType type,
                             const PreMulScalar& scalar, StreamHandle stream) = 0;

  // Device memory of the current GPU for the communicator's own use
  // (cudaMalloc: may synchronise the device, so callers keep and reuse it).
  virtual Result<void*> AllocScratch(size_t bytes) = 0;
  virtual void FreeScratch(void* p) = 0;

  // Export and mapping of device allocations between processes (owned by
  // the implementation, alive as long as it is).
  virtual IpcBackend& ipc() = 0;
  // True when Open works on an export of this very process (the fake); the
  // CUDA runtime refuses that, so peers in one process use raw pointers.
  virtual bool ipc_within_process() const { return false; }

  // The calling thread's current device, and setting it: the communicator's
  // worker thread takes the device that was current at creation (NCCL's rule).
  virtual Result<int> CurrentDevice() = 0;
  virtual Status SetDevice(int device) = 0;

  // The PCI bus id of the current device ("0000:3b:00.0", lower case), which
  // names the GPU the same way in every process of the host.
  virtual Result<std::string> CurrentBusId() = 0;
  // Whether the current device can map memory of the GPU at `bus_id`
  // (another GPU of this host); false when this process cannot see it.
  virtual Result<bool> CanAccessPeer(const std::string& bus_id) = 0;
  // Lets the current device's work read and write the GPU at `bus_id`
  // through its raw pointers (ranks of one process on different GPUs);
  // already enabled counts as success.
  virtual Status EnablePeerAccess(const std::string& bus_id) = 0;

  // --- What GPUDirect RDMA needs (transports/ib/gdr.h) ---

  // Whether the current device's memory can be exported as a dma-buf.
  virtual Result<bool> DmaBufSupported() { return false; }
  // The device allocation holding `ptr`, widened to whole host pages, and
  // with `dmabuf` a dma-buf descriptor of that range, which the caller closes.
  struct Allocation {
    uintptr_t base = 0;
    size_t bytes = 0;
    int dmabuf_fd = -1;
  };
  virtual Result<Allocation> AllocationOf(const void* ptr, bool dmabuf) {
    (void)ptr, (void)dmabuf;
    return Status(Code::kUnhandledCudaError,
                  std::string(name()) + ": no device allocations to export");
  }
  // Whether work on the current device sees the NIC's completed writes into
  // its memory, natively (the writes ordering attribute) or after
  // FlushRdmaWrites; without either, receives must not land in device memory.
  virtual Result<bool> RdmaWritesVisible() { return true; }
  // Makes the NIC's completed writes into device memory visible to work
  // queued on the device afterwards (cudaDeviceFlushGPUDirectRDMAWrites;
  // nothing to do where the device orders them natively).
  virtual Status FlushRdmaWrites() { return Status::Ok(); }
};

}  // namespace loom::cuda
