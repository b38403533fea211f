// The memory entry points of the NCCL C ABI: buffer registration and device
// memory (ncclCommRegister/Deregister, ncclMemAlloc/Free).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>

#include "comm/base/log.h"
#include "comm/device_path.h"
#include "comm/nccl/shim.h"

using loom::nccl_shim::Api;
using loom::nccl_shim::Printf;
using loom::nccl_shim::Usable;

#pragma GCC visibility push(default)

// Registration tells NCCL a buffer will be reused so it may map it once.
// loom's data paths do not use it yet: every buffer, registered or not, is
// handled per operation (what NCCL does when no transport can use a
// registration), so these calls check their arguments and keep the handles.
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return Api("ncclCommRegister", [&]() -> loom::Status {
    if (handle == nullptr) return loom::InvalidArgument("handle is NULL");
    LOOM_TRY(Usable(comm).status());
    if (buff == nullptr) return loom::InvalidArgument("buff is NULL");
    if (size == 0) return loom::InvalidArgument("size is 0");
    if (reinterpret_cast<uintptr_t>(buff) > UINTPTR_MAX - size) {
      return loom::InvalidArgument(
          Printf("buff %p + size %zu wraps around the address space", buff, size));
    }
    auto reg = std::make_unique<ncclComm::Registration>(ncclComm::Registration{buff, size});
    std::lock_guard<std::mutex> lock(comm->registrations_mu);
    comm->registrations.push_back(std::move(reg));
    *handle = comm->registrations.back().get();
    LOOM_INFO(loom::log::kReg,
              "comm %p: registered %p (%zu bytes) as %p; loom handles it like an "
              "unregistered buffer",
              static_cast<void*>(comm), buff, size, *handle);
    return loom::Status::Ok();
  });
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return Api("ncclCommDeregister", [&]() -> loom::Status {
    LOOM_TRY(Usable(comm).status());
    std::lock_guard<std::mutex> lock(comm->registrations_mu);
    auto& regs = comm->registrations;
    auto it =
        std::find_if(regs.begin(), regs.end(), [&](const auto& r) { return r.get() == handle; });
    if (it == regs.end()) {
      return loom::InvalidArgument(
          Printf("handle %p was not registered with this communicator (or was deregistered "
                 "already)",
                 handle));
    }
    LOOM_INFO(loom::log::kReg, "comm %p: deregistered %p (%p, %zu bytes)", static_cast<void*>(comm),
              handle, (*it)->buff, (*it)->size);
    regs.erase(it);
    return loom::Status::Ok();
  });
}

// Device memory on the current device, as cudaMalloc gives it (NCCL uses
// cuMem allocations so that NVLink SHARP can map them; loom maps device
// buffers through CUDA IPC, which takes cudaMalloc memory).
ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return Api("ncclMemAlloc", [&]() -> loom::Status {
    if (ptr == nullptr) return loom::InvalidArgument("ptr is NULL");
    loom::cuda::DeviceOps* ops = loom::DefaultDeviceOps();
    if (ops == nullptr) {
      return loom::Status(loom::Code::kUnhandledCudaError,
                          "no CUDA device in this process (or loom was built without CUDA): "
                          "ncclMemAlloc gives device memory; use malloc or loom::AllocShared "
                          "for host buffers");
    }
    if (size == 0) {  // as cudaMalloc
      *ptr = nullptr;
      return loom::Status::Ok();
    }
    LOOM_ASSIGN_OR_RETURN(*ptr, ops->AllocScratch(size));
    return loom::Status::Ok();
  });
}

ncclResult_t ncclMemFree(void* ptr) {
  return Api("ncclMemFree", [&]() -> loom::Status {
    if (ptr == nullptr) return loom::Status::Ok();
    loom::cuda::DeviceOps* ops = loom::DefaultDeviceOps();
    if (ops == nullptr) {
      return loom::InvalidArgument(
          Printf("ptr %p was not given by ncclMemAlloc: this process has no CUDA device", ptr));
    }
    LOOM_ASSIGN_OR_RETURN(loom::cuda::BufferPlace place, ops->Classify(ptr));
    if (place.space != loom::cuda::MemSpace::kDevice) {
      return loom::InvalidArgument(
          Printf("ptr %p is %s memory, so ncclMemAlloc did not give it", ptr, place.kind));
    }
    ops->FreeScratch(ptr);
    return loom::Status::Ok();
  });
}

#pragma GCC visibility pop
