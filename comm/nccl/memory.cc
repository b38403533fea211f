// The memory entry points of the NCCL C ABI: buffer registration, windows
// (which are registrations here) and device memory (ncclCommRegister/
// Deregister, ncclCommWindowRegister/Deregister, ncclMemAlloc/Free).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>

#include "comm/device_path.h"
#include "comm/nccl/shim.h"

using loom::nccl_shim::Api;
using loom::nccl_shim::Usable;

namespace {

// ncclCommRegister's and ncclCommWindowRegister's work: the handle is the
// address of comm's entry for the buffer.
loom::Result<ncclComm::Registration*> Register(ncclComm_t comm, void* buff, size_t size,
                                               bool window) {
  LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Usable(comm));
  if (buff == nullptr) return loom::InvalidArgument("buff is NULL");
  if (size == 0) return loom::InvalidArgument("size is 0");
  if (reinterpret_cast<uintptr_t>(buff) > UINTPTR_MAX - size) {
    return loom::InvalidArgument(
        loom::StrPrintf("buff %p + size %zu wraps around the address space", buff, size));
  }
  LOOM_ASSIGN_OR_RETURN(const uint64_t id, c->RegisterBuffer(buff, size));
  auto reg =
      std::make_unique<ncclComm::Registration>(ncclComm::Registration{buff, size, id, window});
  std::lock_guard<std::mutex> lock(comm->registrations_mu);
  comm->registrations.push_back(std::move(reg));
  return comm->registrations.back().get();
}

// Takes back a handle of Register made with the same `window`.
loom::Status Deregister(ncclComm_t comm, const void* handle, bool window) {
  LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Usable(comm));
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(comm->registrations_mu);
    auto& regs = comm->registrations;
    auto it = std::find_if(regs.begin(), regs.end(),
                           [&](const auto& r) { return r.get() == handle && r->window == window; });
    if (it == regs.end()) {
      return loom::InvalidArgument(
          loom::StrPrintf("%s %p was not registered with this communicator by %s (or was deregistered "
                 "already)",
                 window ? "win" : "handle", handle,
                 window ? "ncclCommWindowRegister" : "ncclCommRegister"));
    }
    id = (*it)->id;
    regs.erase(it);
  }
  return c->DeregisterBuffer(id);
}

}  // namespace

#pragma GCC visibility push(default)

// Registration tells loom a buffer stays allocated until deregistered: with
// CUDA IPC on, peers keep their mapping of a registered device buffer across
// operations (Communicator::RegisterBuffer). Not collective.
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return Api("ncclCommRegister", [&]() -> loom::Status {
    if (handle == nullptr) return loom::InvalidArgument("handle is NULL");
    LOOM_ASSIGN_OR_RETURN(*handle, Register(comm, buff, size, /*window=*/false));
    return loom::Status::Ok();
  });
}

// Waits until every peer closed its mapping of the buffer, so the caller
// may free it on return.
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return Api("ncclCommDeregister",
             [&]() -> loom::Status { return Deregister(comm, handle, /*window=*/false); });
}

// NCCL's windows serve its symmetric kernels; loom has none, so a window is
// a registration (nothing more happens than with ncclCommRegister).
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                    int winFlags) {
  return Api("ncclCommWindowRegister", [&]() -> loom::Status {
    if (win == nullptr) return loom::InvalidArgument("win is NULL");
    if ((winFlags & ~NCCL_WIN_COLL_SYMMETRIC) != 0) {
      return loom::InvalidArgument(
          loom::StrPrintf("winFlags 0x%x: only NCCL_WIN_DEFAULT (0) and NCCL_WIN_COLL_SYMMETRIC (0x1) "
                 "exist",
                 static_cast<unsigned>(winFlags)));
    }
    LOOM_ASSIGN_OR_RETURN(ncclComm::Registration * reg,
                          Register(comm, buff, size, /*window=*/true));
    *win = reinterpret_cast<ncclWindow_t>(reg);
    return loom::Status::Ok();
  });
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return Api("ncclCommWindowDeregister",
             [&]() -> loom::Status { return Deregister(comm, win, /*window=*/true); });
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
          loom::StrPrintf("ptr %p was not given by ncclMemAlloc: this process has no CUDA device", ptr));
    }
    LOOM_ASSIGN_OR_RETURN(loom::cuda::BufferPlace place, ops->Classify(ptr));
    if (place.space != loom::cuda::MemSpace::kDevice) {
      return loom::InvalidArgument(
          loom::StrPrintf("ptr %p is %s memory, so ncclMemAlloc did not give it", ptr, place.kind));
    }
    ops->FreeScratch(ptr);
    return loom::Status::Ok();
  });
}

LOOM_NCCL_PROFILING_ALIAS(ncclCommRegister);
LOOM_NCCL_PROFILING_ALIAS(ncclCommDeregister);
LOOM_NCCL_PROFILING_ALIAS(ncclCommWindowRegister);
LOOM_NCCL_PROFILING_ALIAS(ncclCommWindowDeregister);
LOOM_NCCL_PROFILING_ALIAS(ncclMemAlloc);
LOOM_NCCL_PROFILING_ALIAS(ncclMemFree);

#pragma GCC visibility pop
