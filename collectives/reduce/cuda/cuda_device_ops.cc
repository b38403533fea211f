// CudaDeviceOps: DeviceOps on the CUDA runtime. Stream waits use
// cuStreamWaitValue64 (fetched through the runtime's driver entry point, so
// nothing links libcuda) where the device supports 64-bit stream memory
// operations, and otherwise a host function on the stream that polls the word.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "collectives/reduce/cuda/cuda_device_ops.h"

#include "base/log.h"
#include "collectives/reduce/cuda/reduce_cuda.h"
#include "transports/cuda/cuda_runtime.h"

namespace loom::cuda {
namespace {

// The driver functions loom uses, or null where unavailable.
struct DriverFns {
  PFN_cuStreamWaitValue64_v11070 wait64 = nullptr;
  PFN_cuDeviceGetAttribute_v2000 attribute = nullptr;
  // GPUDirect RDMA: the allocation around a pointer, and its dma-buf.
  PFN_cuMemGetAddressRange_v3020 address_range = nullptr;
  PFN_cuMemGetHandleForAddressRange_v11070 range_handle = nullptr;
};

DriverFns LoadDriverFns() {
  DriverFns fns;
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &fn, 11070, cudaEnableDefault, &q) ==
          cudaSuccess &&
      q == cudaDriverEntryPointSuccess) {
    fns.wait64 = reinterpret_cast<PFN_cuStreamWaitValue64_v11070>(fn);
  }
  if (cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &fn, 2000, cudaEnableDefault, &q) ==
          cudaSuccess &&
      q == cudaDriverEntryPointSuccess) {
    fns.attribute = reinterpret_cast<PFN_cuDeviceGetAttribute_v2000>(fn);
  }
  if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020, cudaEnableDefault, &q) ==
          cudaSuccess &&
      q == cudaDriverEntryPointSuccess) {
    fns.address_range = reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(fn);
  }
  if (cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn, 11070,
                                       cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess) {
    fns.range_handle = reinterpret_cast<PFN_cuMemGetHandleForAddressRange_v11070>(fn);
  }
  (void)cudaGetLastError();
  return fns;
}

// What the host-function fallback polls; owned by the callback, which runs
// exactly once.
struct HostWait {
  const uint64_t* word;
  uint64_t value;
};

void CUDART_CB PollWord(void* arg) {
  std::unique_ptr<HostWait> w(static_cast<HostWait*>(arg));
  // atomic_ref needs a non-const object; the word is only read here.
  std::atomic_ref<uint64_t> word(*const_cast<uint64_t*>(w->word));
  while (word.load(std::memory_order_acquire) < w->value) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

class CudaOps final : public DeviceOps {
 public:
  const char* name() const override { return "cuda"; }

  Result<BufferPlace> Classify(const void* ptr) override {
    LOOM_ASSIGN_OR_RETURN(const PointerInfo info, ClassifyPointer(ptr));
    BufferPlace place;
    place.kind = MemoryKindName(info.kind);
    if (info.kind == MemoryKind::kDevice || info.kind == MemoryKind::kManaged) {
      place.space = MemSpace::kDevice;
      place.device = info.device;
    }
    return place;
  }

  Result<void*> AllocPinned(size_t bytes) override {
    void* p = nullptr;
    LOOM_TRY(CudaStatus(cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped),
                        "cudaHostAlloc(" + std::to_string(bytes) + " bytes)"));
    return p;
  }

  void FreePinned(void* p) override {
    if (p != nullptr) (void)cudaFreeHost(p);
  }

  Status CopyAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) override {
    return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
                      "cudaMemcpyAsync(" + std::to_string(bytes) + " bytes)");
  }

  Result<EventHandle> CreateEvent() override {
    cudaEvent_t e = nullptr;
    LOOM_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  void DestroyEvent(EventHandle event) override {
    if (event != nullptr) (void)cudaEventDestroy(event);
  }

  Status RecordEvent(EventHandle event, StreamHandle stream) override {
    return CudaStatus(cudaEventRecord(event, stream), "cudaEventRecord");
  }

  Result<bool> QueryEvent(EventHandle event) override {
    const cudaError_t err = cudaEventQuery(event);
    if (err == cudaSuccess) return true;
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    return CudaStatus(err, "cudaEventQuery");
  }

  Status StreamWaitValue(StreamHandle stream, const uint64_t* word, uint64_t value) override {
    if (UseMemOps()) {
      void* dev = nullptr;
      LOOM_CUDA_TRY(cudaHostGetDevicePointer(&dev, const_cast<uint64_t*>(word), 0));
      const CUresult r = fns_.wait64(stream, reinterpret_cast<CUdeviceptr>(dev), value,
                                     CU_STREAM_WAIT_VALUE_GEQ);
      if (r == CUDA_SUCCESS) return Status::Ok();
      return Status(Code::kUnhandledCudaError,
                    "cuStreamWaitValue64 failed: CUresult " + std::to_string(static_cast<int>(r)));
    }
    auto* w = new HostWait{word, value};
    const cudaError_t err = cudaLaunchHostFunc(stream, PollWord, w);
    if (err != cudaSuccess) delete w;  // never enqueued: the callback will not free it
    return CudaStatus(err, "cudaLaunchHostFunc(stream wait)");
  }

  Result<StreamHandle> NewStream() override {
    cudaStream_t s = nullptr;
    LOOM_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }

  void DestroyStream(StreamHandle stream) override {
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }

  Status ReduceAsync(void* dst, const void* a, const void* b, size_t count, DataType type,
                     RedOp op, StreamHandle stream) override {
    return CudaReduceInto(dst, a, b, count, type, op == RedOp::kAvg ? RedOp::kSum : op, stream);
  }

  Status ScaleForAvgAsync(void* buf, size_t count, DataType type, int nranks,
                          StreamHandle stream) override {
    return CudaScaleForAvg(buf, count, type, nranks, stream);
  }

  Status PreMulAsync(void* dst, const void* src, size_t count, DataType type,
                     const PreMulScalar& scalar, StreamHandle stream) override {
    return CudaPreMulInto(dst, src, count, type, scalar, stream);
  }

  Result<void*> AllocScratch(size_t bytes) override {
    void* p = nullptr;
    LOOM_TRY(CudaStatus(cudaMalloc(&p, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes)"));
    return p;
  }

  void FreeScratch(void* p) override {
    if (p != nullptr) (void)cudaFree(p);
  }

  IpcBackend& ipc() override {
    std::call_once(ipc_once_, [this] { ipc_ = MakeCudaIpcBackend(); });
    return *ipc_;
  }

  Result<int> CurrentDevice() override {
    int dev = 0;
    LOOM_CUDA_TRY(cudaGetDevice(&dev));
    return dev;
  }

  Status SetDevice(int device) override { return CudaStatus(cudaSetDevice(device), "cudaSetDevice"); }

  Result<std::string> CurrentBusId() override {
    int dev = 0;
    LOOM_CUDA_TRY(cudaGetDevice(&dev));
    char id[32] = {};
    LOOM_CUDA_TRY(cudaDeviceGetPCIBusId(id, sizeof(id), dev));
    std::string s(id);
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }

  Result<bool> CanAccessPeer(const std::string& bus_id) override {
    int dev = 0, peer = -1, ok = 0;
    LOOM_CUDA_TRY(cudaGetDevice(&dev));
    if (cudaDeviceGetByPCIBusId(&peer, bus_id.c_str()) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;  // not visible to this process (CUDA_VISIBLE_DEVICES)
    }
    if (peer == dev) return true;
    LOOM_CUDA_TRY(cudaDeviceCanAccessPeer(&ok, dev, peer));
    return ok != 0;
  }

  Status EnablePeerAccess(const std::string& bus_id) override {
    int peer = -1;
    LOOM_CUDA_TRY(cudaDeviceGetByPCIBusId(&peer, bus_id.c_str()));
    const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
      return Status::Ok();
    }
    return CudaStatus(e, "cudaDeviceEnablePeerAccess(" + bus_id + ")");
  }

  Result<bool> DmaBufSupported() override {
    const DriverFns& f = Fns();
    int dev = 0, ok = 0;
    if (f.attribute == nullptr || f.range_handle == nullptr || f.address_range == nullptr)
      return false;
    LOOM_CUDA_TRY(cudaGetDevice(&dev));
    return f.attribute(&ok, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) == CUDA_SUCCESS && ok != 0;
  }

  Result<Allocation> AllocationOf(const void* ptr, bool dmabuf) override {
    const DriverFns& f = Fns();
    if (f.address_range == nullptr || (dmabuf && f.range_handle == nullptr)) {
      return Status(Code::kUnhandledCudaError,
                    "the CUDA driver lacks cuMemGetAddressRange or "
                    "cuMemGetHandleForAddressRange (GPUDirect RDMA by dma-buf)");
    }
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r = f.address_range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr));
    if (r != CUDA_SUCCESS) {
      return Status(Code::kUnhandledCudaError,
                    "cuMemGetAddressRange failed: CUresult " + std::to_string(static_cast<int>(r)));
    }
    // dma-buf export wants host-page-aligned ranges (NCCL widens the same way).
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    Allocation a;
    a.base = static_cast<uintptr_t>(base) / page * page;
    a.bytes = (static_cast<uintptr_t>(base) + size + page - 1) / page * page - a.base;
    if (dmabuf) {
      int fd = -1;
      r = f.range_handle(&fd, static_cast<CUdeviceptr>(a.base), a.bytes,
                         CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
      if (r != CUDA_SUCCESS) {
        return Status(Code::kUnhandledCudaError,
                      "cuMemGetHandleForAddressRange (dma-buf) failed: CUresult " +
                          std::to_string(static_cast<int>(r)));
      }
      a.dmabuf_fd = fd;
    }
    return a;
  }

  Result<bool> RdmaWritesVisible() override {
    int dev = 0, ordering = 0, flush = 0;
    LOOM_CUDA_TRY(cudaGetDevice(&dev));
    LOOM_CUDA_TRY(cudaDeviceGetAttribute(&ordering, cudaDevAttrGPUDirectRDMAWritesOrdering, dev));
    LOOM_CUDA_TRY(cudaDeviceGetAttribute(&flush, cudaDevAttrGPUDirectRDMAFlushWritesOptions, dev));
    return ordering >= cudaGPUDirectRDMAWritesOrderingOwner ||
           (flush & cudaFlushGPUDirectRDMAWritesOptionHost) != 0;
  }

  Status FlushRdmaWrites() override {
    int dev = 0, ordering = 0;
    LOOM_CUDA_TRY(cudaGetDevice(&dev));
    LOOM_CUDA_TRY(cudaDeviceGetAttribute(&ordering, cudaDevAttrGPUDirectRDMAWritesOrdering, dev));
    if (ordering >= cudaGPUDirectRDMAWritesOrderingOwner) return Status::Ok();  // ordered natively
    return CudaStatus(
        cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                           cudaFlushGPUDirectRDMAWritesToOwner),
        "cudaDeviceFlushGPUDirectRDMAWrites");
  }

 private:
  const DriverFns& Fns() {
    std::call_once(fns_once_, [this] { fns_ = LoadDriverFns(); });
    return fns_;
  }

  // Whether the current device takes 64-bit stream waits; decided once
  // (loom's processes use one device) and logged.
  bool UseMemOps() {
    std::call_once(once_, [this] {
      Fns();
      int dev = 0, ok = 0;
      if (fns_.wait64 != nullptr && fns_.attribute != nullptr && cudaGetDevice(&dev) == cudaSuccess &&
          fns_.attribute(&ok, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) ==
              CUDA_SUCCESS) {
        mem_ops_ = ok != 0;
      }
      (void)cudaGetLastError();
      LOOM_INFO(log::kInit, "CUDA: streams wait for the communicator with %s",
                mem_ops_ ? "cuStreamWaitValue64" : "a polling host function (no 64-bit stream memory ops)");
    });
    return mem_ops_;
  }

  std::once_flag once_, ipc_once_, fns_once_;
  std::unique_ptr<IpcBackend> ipc_;
  DriverFns fns_;
  bool mem_ops_ = false;
};

}  // namespace

DeviceOps& CudaDeviceOps() {
  static CudaOps ops;
  return ops;
}

}  // namespace loom::cuda
