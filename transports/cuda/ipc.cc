// CUDA IPC: the runtime backend (export, open, close of device allocations)
// and the mapping cache.
#include "transports/cuda/ipc.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/log.h"
#include "transports/cuda/cuda_runtime.h"

namespace loom::cuda {

static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(IpcExport::handle));

namespace {

// cuMemGetAddressRange through the runtime's driver entry point, so loom
// does not link libcuda (a CPU-only machine has none and must still load us).
Result<PFN_cuMemGetAddressRange_v3020> AddressRangeFn() {
  static void* fn = nullptr;
  static cudaError_t err = [] {
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020, cudaEnableDefault, &q);
    return e == cudaSuccess && q != cudaDriverEntryPointSuccess ? cudaErrorSymbolNotFound : e;
  }();
  if (err != cudaSuccess)
    return CudaStatus(err, "cudaGetDriverEntryPointByVersion(cuMemGetAddressRange)");
  return reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(fn);
}

class CudaIpcBackend final : public IpcBackend {
 public:
  Result<IpcExport> Export(const void* ptr) override {
    LOOM_ASSIGN_OR_RETURN(const PointerInfo info, ClassifyPointer(ptr));
    if (info.kind != MemoryKind::kDevice) {
      return InvalidArgument(std::string("CUDA IPC needs device memory from cudaMalloc; the ") +
                             "buffer is " + MemoryKindName(info.kind) + " memory");
    }
    LOOM_ASSIGN_OR_RETURN(auto range, AddressRangeFn());
    CUdeviceptr base = 0;
    size_t size = 0;
    const CUresult r = range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr));
    if (r != CUDA_SUCCESS) {
      return Status(Code::kUnhandledCudaError,
                    "cuMemGetAddressRange failed: CUresult " + std::to_string(static_cast<int>(r)));
    }
    cudaIpcMemHandle_t h;
    LOOM_CUDA_TRY(cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base)));
    IpcExport e;
    std::memcpy(e.handle.data(), &h, sizeof(h));
    e.base = base;
    e.size = size;
    e.offset = reinterpret_cast<uintptr_t>(ptr) - base;
    return e;
  }

  Result<void*> Open(const IpcExport& e) override {
    cudaIpcMemHandle_t h;
    std::memcpy(&h, e.handle.data(), sizeof(h));
    void* p = nullptr;
    const cudaError_t err = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      return CudaStatus(err, "cudaIpcOpenMemHandle(" + std::to_string(e.size) + " bytes)");
    }
    return p;
  }

  void Close(void* mapped_base) override {
    const Status s = CudaStatus(cudaIpcCloseMemHandle(mapped_base), "cudaIpcCloseMemHandle");
    if (!s.ok()) LOOM_WARN(log::kP2P, "%s", s.ToString().c_str());
  }
};

}  // namespace

std::unique_ptr<IpcBackend> MakeCudaIpcBackend() {
  return std::make_unique<CudaIpcBackend>();
}

}  // namespace loom::cuda
