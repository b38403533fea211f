// CUDA runtime wrapper: error conversion, device discovery, pointer
// classification and the RAII owners declared in cuda_runtime.h.
#include "transports/cuda/cuda_runtime.h"

#include "base/log.h"

namespace loom::cuda {

Status CudaStatus(cudaError_t err, const std::string& call) {
  if (err == cudaSuccess) return Status::Ok();
  std::string msg = call;
  msg += " failed: ";
  msg += cudaGetErrorName(err);
  msg += " (";
  msg += cudaGetErrorString(err);
  msg += ")";
  return Status(Code::kUnhandledCudaError, std::move(msg));
}

namespace {

struct DeviceQuery {
  int count = 0;
  std::string summary;
};

DeviceQuery QueryDeviceCount() {
  DeviceQuery q;
  const cudaError_t err = cudaGetDeviceCount(&q.count);
  if (err != cudaSuccess) {
    // No driver, no device, a stub libcuda or a too-old driver: all mean
    // "no GPU here" to loom. The runtime keeps the error as its last one.
    (void)cudaGetLastError();
    q.count = 0;
    q.summary = std::string("no usable device (") + cudaGetErrorName(err) + ": " +
                cudaGetErrorString(err) + ")";
    LOOM_INFO(log::kInit, "CUDA: %s; device buffers are unavailable", q.summary.c_str());
    return q;
  }
  q.summary = std::to_string(q.count) + " device(s) visible";
  LOOM_INFO(log::kInit, "CUDA: %s", q.summary.c_str());
  return q;
}

// Devices do not come and go within a process (CUDA_VISIBLE_DEVICES is read
// once at initialisation), so one query is enough; C++ makes it thread-safe.
const DeviceQuery& Devices() {
  static const DeviceQuery q = QueryDeviceCount();
  return q;
}

// Errors cudaPointerGetAttributes returns for a pointer that is plain host
// memory as far as CUDA can tell: no driver at all, or an unknown address.
bool MeansHostMemory(cudaError_t err) {
  switch (err) {
    case cudaErrorInvalidValue:
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorInitializationError:
      return true;
    default:
      return false;
  }
}

}  // namespace

int DeviceCount() { return Devices().count; }

std::string DeviceSummary() { return Devices().summary; }

const char* MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kPinnedHost:
      return "pinned host";
    case MemoryKind::kDevice:
      return "device";
    case MemoryKind::kManaged:
      return "managed";
  }
  return "unknown";
}

Result<PointerInfo> ClassifyPointer(const void* ptr) {
  PointerInfo info;
  // Without a device every pointer is host memory; skipping the call also
  // keeps the CPU path free of runtime calls.
  if (ptr == nullptr || DeviceCount() == 0) return info;
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (MeansHostMemory(err)) return info;
    return CudaStatus(err, "cudaPointerGetAttributes");
  }
  switch (attr.type) {
    case cudaMemoryTypeUnregistered:
      break;
    case cudaMemoryTypeHost:
      info.kind = MemoryKind::kPinnedHost;
      break;
    case cudaMemoryTypeDevice:
      info.kind = MemoryKind::kDevice;
      info.device = attr.device;
      break;
    case cudaMemoryTypeManaged:
      info.kind = MemoryKind::kManaged;
      info.device = attr.device;
      break;
  }
  return info;
}

// --- Stream -----------------------------------------------------------------

Result<Stream> Stream::Create(int priority) {
  cudaStream_t s = nullptr;
  LOOM_CUDA_TRY(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
  return Stream(s);
}

Stream::~Stream() {
  if (s_ != nullptr) (void)cudaStreamDestroy(s_);
}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (s_ != nullptr) (void)cudaStreamDestroy(s_);
    s_ = std::exchange(other.s_, nullptr);
  }
  return *this;
}

Status Stream::Synchronize() const {
  return CudaStatus(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
}

// --- Event ------------------------------------------------------------------

Result<Event> Event::Create(bool timing) {
  cudaEvent_t e = nullptr;
  LOOM_CUDA_TRY(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return Event(e);
}

Event::~Event() {
  if (e_ != nullptr) (void)cudaEventDestroy(e_);
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (e_ != nullptr) (void)cudaEventDestroy(e_);
    e_ = std::exchange(other.e_, nullptr);
  }
  return *this;
}

Status Event::Record(cudaStream_t stream) {
  return CudaStatus(cudaEventRecord(e_, stream), "cudaEventRecord");
}

Status Event::MakeStreamWait(cudaStream_t stream) const {
  return CudaStatus(cudaStreamWaitEvent(stream, e_, 0), "cudaStreamWaitEvent");
}

Result<bool> Event::Query() const {
  const cudaError_t err = cudaEventQuery(e_);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not a sticky error
    return false;
  }
  return CudaStatus(err, "cudaEventQuery");
}

Status Event::Synchronize() const {
  return CudaStatus(cudaEventSynchronize(e_), "cudaEventSynchronize");
}

Result<float> Event::ElapsedMsUntil(const Event& stop) const {
  float ms = 0;
  LOOM_CUDA_TRY(cudaEventElapsedTime(&ms, e_, stop.e_));
  return ms;
}

// --- PinnedBuffer -----------------------------------------------------------

Result<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes) {
  if (bytes == 0) return PinnedBuffer();
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
  if (err != cudaSuccess) {
    return CudaStatus(err, "cudaHostAlloc(" + std::to_string(bytes) + " bytes)");
  }
  return PinnedBuffer(p, bytes);
}

PinnedBuffer::~PinnedBuffer() {
  if (p_ != nullptr) (void)cudaFreeHost(p_);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (p_ != nullptr) (void)cudaFreeHost(p_);
    p_ = std::exchange(other.p_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

}  // namespace loom::cuda
