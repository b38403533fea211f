// What the files of the NCCL C ABI shim share: the object behind ncclComm_t,
// Api() (the one path from a loom::Status to an ncclResult_t) and the checks
// every entry point makes. Private to comm/nccl; compiled with hidden
// visibility, so none of it is exported.
#pragma once

#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "loom/loom.hpp"
#include "loom/nccl.h"

namespace loom::nccl_shim {

// What ncclCommInitRank inside a group leaves for ncclGroupEnd to do.
struct InitRequest {
  loom::UniqueId id;
  int rank = 0;
  int nranks = 0;
  loom::CommConfig config;
};

// printf into a std::string (at most 511 characters).
std::string Printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Records a failure for ncclGetLastError, logs it at WARN and converts it;
// ncclSuccess for OK.
ncclResult_t Finish(const char* func, const loom::Status& status) noexcept;

// Runs one API call's body (returning loom::Status) so that no exception
// crosses the C boundary.
template <typename Body>
ncclResult_t Api(const char* func, Body&& body) noexcept {
  try {
    return Finish(func, body());
  } catch (const std::exception& e) {
    return Finish(func, loom::InternalError(Printf("unexpected exception: %s", e.what())));
  } catch (...) {
    return Finish(func, loom::InternalError("unexpected exception of unknown type"));
  }
}

}  // namespace loom::nccl_shim

// The object behind ncclComm_t. Owned by the caller from creation until
// ncclCommDestroy/ncclCommAbort.
struct ncclComm {
  // Null while a creation deferred to ncclGroupEnd is pending, or after it failed.
  std::unique_ptr<loom::Communicator> impl;
  // What ncclCommSplit with a NULL config inherits.
  loom::CommConfig config;
  // Set by ncclCommInitRank inside a group, cleared by ncclGroupEnd.
  std::optional<loom::nccl_shim::InitRequest> pending;
  // Why the deferred creation failed; reported by every later call.
  loom::Status init_error;
  // ncclCommRegister's handles, each the address of its entry; freed by
  // ncclCommDeregister or with the communicator. Any thread may (de)register.
  struct Registration {
    const void* buff;
    size_t size;
    uint64_t id;  // Communicator::RegisterBuffer's handle
  };
  std::mutex registrations_mu;
  std::vector<std::unique_ptr<Registration>> registrations;
  // ncclRedOpCreatePreMulSum's operators: op ncclNumOps + i is user_ops[i]
  // until ncclRedOpDestroy empties the slot (which a later create reuses).
  std::mutex user_ops_mu;
  std::vector<std::optional<loom::Reduction>> user_ops;
};

namespace loom::nccl_shim {

// The communicator behind a handle, if it can take operations now.
loom::Result<loom::Communicator*> Usable(ncclComm_t comm);

// An enum a C caller passed, read as its int bytes: the caller may pass any
// int, and loading a C++ enum outside its range (e.g. (ncclDataType_t)42) is
// undefined, so range checks must not load it.
template <typename Enum>
int RawEnum(const Enum& e) {
  static_assert(sizeof(Enum) == sizeof(int));
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// The datatype, or InvalidArgument naming a value outside ncclDataType_t.
loom::Result<loom::DataType> ToDataType(const ncclDataType_t& type);

// What `op` computes on `comm`: a built-in operator, or one of comm's
// ncclRedOpCreatePreMulSum operators (redop.cc). The enum is read as its
// int bytes, so any value a C caller passes is safe.
loom::Result<loom::Reduction> ToReduction(ncclComm_t comm, const ncclRedOp_t& op);

}  // namespace loom::nccl_shim
