// What the files of the NCCL C ABI shim share: the object behind ncclComm_t,
// Api() (the one path from a loom::Status to an ncclResult_t), the checks
// every entry point makes, and Issue(), which runs an operation or collects
// it in the caller's open group. Private to comm/nccl; compiled with hidden
// visibility, so none of it is exported but the entry points.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/strings.h"
#include "loom/loom.hpp"
#include "loom/nccl.h"
#include "transports/transport.h"

// Exports NCCL's profiling name of an entry point, p<name>, as an ELF alias
// of it: the same code, as in NVIDIA's library. Put it after the definition.
#define LOOM_NCCL_PROFILING_ALIAS(name)                                    \
  extern "C" __attribute__((visibility("default"))) decltype(name) p##name \
      __attribute__((alias(#name)))

namespace loom::nccl_shim {

// What ncclCommInitRank inside a group leaves for ncclGroupEnd to do.
struct InitRequest {
  loom::UniqueId id;
  int rank = 0;
  int nranks = 0;
  loom::CommConfig config;
};

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
    return Finish(func, loom::InternalError(loom::StrPrintf("unexpected exception: %s", e.what())));
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
    bool window;  // made by ncclCommWindowRegister, so only its Deregister takes it
  };
  std::mutex registrations_mu;
  std::vector<std::unique_ptr<Registration>> registrations;
  // ncclRedOpCreatePreMulSum's operators: op ncclNumOps + i is user_ops[i]
  // until ncclRedOpDestroy empties the slot (which a later create reuses).
  std::mutex user_ops_mu;
  std::vector<std::optional<loom::Reduction>> user_ops;
  // ncclCommRevoke: operations are refused from then on. Any thread may set it.
  std::atomic<bool> revoked{false};
  // ncclCommFinalize was called (ncclCommRevoke refuses a finalized comm).
  std::atomic<bool> finalized{false};
};

namespace loom::nccl_shim {

// The communicator behind a handle, once created (revoked or not).
loom::Result<loom::Communicator*> Usable(ncclComm_t comm);
// The communicator behind a handle, if it can take operations now: created
// and not revoked (ncclInvalidUsage, as NCCL).
loom::Result<loom::Communicator*> Operable(ncclComm_t comm);

// NULL with a non-zero count is InvalidArgument naming `name`.
loom::Status CheckBuffer(const char* name, const void* buf, size_t count);
// InvalidArgument naming `name` unless 0 <= value < nranks.
loom::Status CheckRank(const char* name, int value, int nranks);

// Reads a caller's ncclConfig_t as NCCL does (config.cc): only the fields
// the caller's header had (its `version`), NCCL's refusals of bad values.
// NULL gives the defaults.
loom::Result<loom::CommConfig> ParseConfig(const ncclConfig_t* config);

// The handle of a communicator made from `parent` (split, shrink): refused
// inside a group, naming `func`; its config is `config`'s, or the parent's
// when `config` is NULL.
loom::Result<std::unique_ptr<ncclComm>> NewChildHandle(const char* func, ncclComm_t parent,
                                                       const ncclConfig_t* config);

// ncclCommInitRank and its variants: checks, then creates *comm now, or
// inside a group records it for ncclGroupEnd.
loom::Status InitRank(ncclComm_t* comm, int nranks, const loom::UniqueId& id, int rank,
                      const ncclConfig_t* config);
// Logs "Init COMPLETE" for a created communicator.
void LogCreated(const ncclComm* comm);
// True while this thread has a group open (ncclGroupStart without its End).
bool InGroup();

// What the cost model needs to price an operation (ncclGroupSimulateEnd):
// its kind and bytes as CostModel::PredictUs counts them, and the ranks.
struct OpCost {
  loom::OpKind kind = loom::OpKind::kSendRecv;
  size_t bytes = 0;
  int nranks = 1;
};

// An operation a group collected: ncclGroupEnd runs it, ncclGroupSimulateEnd
// prices it and drops it, freeing `comm` drops it.
struct GroupedOp {
  const char* func;  // the entry point, for the error's context
  ncclComm* comm;
  OpCost cost;
  std::function<loom::Status()> run;
};

// Runs `run` now, or inside a group collects it for ncclGroupEnd (so the
// arguments must have been checked already).
loom::Status Issue(const char* func, ncclComm* comm, OpCost cost,
                   std::function<loom::Status()> run);

// The predicted time of the group's operations run one after another, in
// microseconds (simulate.cc).
double EstimateUs(const std::vector<GroupedOp>& ops);

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

// The datatype of a reducing operation, or InvalidArgument naming a value
// outside ncclDataType_t or an fp8 type (loom does not reduce those).
loom::Result<loom::DataType> ToDataType(const ncclDataType_t& type);
// The datatype of an operation that only moves data: fp8 elements move as
// bytes (kUint8, the same size).
loom::Result<loom::DataType> ToMovedType(const ncclDataType_t& type);

// What `op` computes on `comm`: a built-in operator, or one of comm's
// ncclRedOpCreatePreMulSum operators (redop.cc). The enum is read as its
// int bytes, so any value a C caller passes is safe.
loom::Result<loom::Reduction> ToReduction(ncclComm_t comm, const ncclRedOp_t& op);

}  // namespace loom::nccl_shim
