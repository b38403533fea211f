// A thin C++ layer over the CUDA runtime: CUDA errors as loom::Status, device
// count, pointer classification, and RAII owners for streams, events and
// pinned host memory. Everything loom does with the runtime goes through here.
//
// No call here needs a GPU to be safe: without a driver or a device every
// query answers "none" (count 0, pointers are host memory) instead of failing,
// so the CPU paths keep working on a machine that merely has CUDA installed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "base/status.h"

namespace loom::cuda {

// The one conversion of a cudaError_t: OK for cudaSuccess, else
// kUnhandledCudaError with "<call> failed: <cudaGetErrorName> (<cudaGetErrorString>)".
// `call` names what was attempted, ideally with its arguments
// ("cudaMemcpyAsync(8 MiB D2D)"). Clears nothing: callers that want the
// sticky-error state reset use cudaGetLastError themselves.
Status CudaStatus(cudaError_t err, const std::string& call);

// Evaluates a runtime call once and returns its failure as a Status.
#define LOOM_CUDA_TRY(call) LOOM_TRY(::loom::cuda::CudaStatus((call), #call))

// Number of visible devices; 0 when there is no driver, no device, or the
// driver is older than the runtime (cudaGetDeviceCount reports all three as
// errors; here they all mean "no GPU"). Clears the runtime's last error so a
// later cudaGetLastError does not see it. Thread-safe, does not block.
int DeviceCount();

// "2 device(s) visible", or why none is ("no usable device
// (cudaErrorNoDevice: ...)"): what `loom info` prints.
std::string DeviceSummary();

// Where a pointer points, as cudaPointerGetAttributes says. kHost covers
// both plain (unregistered) host memory and pointers the runtime does not
// know; kPinnedHost is cudaMallocHost / cudaHostRegister memory.
enum class MemoryKind { kHost, kPinnedHost, kDevice, kManaged };
const char* MemoryKindName(MemoryKind kind);

struct PointerInfo {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;  // owning device for kDevice / kManaged, else -1
};

// Classifies `ptr`. Never fails for a host pointer, with or without a GPU:
// without a driver, or when the runtime does not know the pointer, it is
// kHost (and the runtime's last error is cleared). A real runtime failure
// (e.g. the device was lost) is returned as kUnhandledCudaError.
// Thread-safe, does not block on any stream.
Result<PointerInfo> ClassifyPointer(const void* ptr);

// Owns a non-blocking stream (cudaStreamNonBlocking: never serialises with
// the legacy default stream). Move-only; destroys the stream in its
// destructor (which does not wait for queued work: the runtime finishes it).
class Stream {
 public:
  Stream() = default;
  static Result<Stream> Create(int priority = 0);
  ~Stream();
  Stream(Stream&& other) noexcept : s_(std::exchange(other.s_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return s_; }
  // Blocks the calling thread until all queued work finished.
  Status Synchronize() const;

 private:
  explicit Stream(cudaStream_t s) : s_(s) {}
  cudaStream_t s_ = nullptr;
};

// Owns an event. Timing events (for benchmarks) record timestamps; the
// default ones are created with cudaEventDisableTiming, which is cheaper
// for pure ordering. Move-only.
class Event {
 public:
  Event() = default;
  static Result<Event> Create(bool timing = false);
  ~Event();
  Event(Event&& other) noexcept : e_(std::exchange(other.e_, nullptr)) {}
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return e_; }
  // Captures the work queued on `stream` so far; non-blocking.
  Status Record(cudaStream_t stream);
  // Makes `stream` wait (on the device, not the host) for this event.
  Status MakeStreamWait(cudaStream_t stream) const;
  // Non-blocking: true when the captured work is done; errors are returned.
  Result<bool> Query() const;
  // Blocks the calling thread until the captured work is done.
  Status Synchronize() const;
  // Milliseconds between two recorded timing events (start.ElapsedMs(stop)).
  Result<float> ElapsedMsUntil(const Event& stop) const;

 private:
  explicit Event(cudaEvent_t e) : e_(e) {}
  cudaEvent_t e_ = nullptr;
};

// Page-locked host memory (cudaHostAlloc, portable and mapped), the staging
// area between device buffers and the network. Move-only; frees on destroy.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static Result<PinnedBuffer> Allocate(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : p_(std::exchange(other.p_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return p_; }
  size_t size() const { return bytes_; }

 private:
  PinnedBuffer(void* p, size_t bytes) : p_(p), bytes_(bytes) {}
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace loom::cuda
