// The NCCL-compatible C ABI (loom/nccl.h) over loom's C++ API: argument
// checks, the one Status -> ncclResult_t conversion, communicators and
// groups. Elsewhere: the collectives and send/recv (collectives.cc), memory
// (memory.cc), reduction operators (redop.cc), ncclConfig_t (config.cc),
// shrink/revoke/scalable init (lifecycle.cc), all-to-all/gather/scatter
// (rooted.cc), the group simulation's cost model (simulate.cc).
//
// Every entry point runs its body through Api(), which turns a non-OK Status
// or any exception into an ncclResult_t, records the message for
// ncclGetLastError and logs it at WARN. Nothing else converts results.
//
// Inside a group, operations are checked when called and collected here;
// the outermost ncclGroupEnd issues them in one loom group, and
// ncclGroupSimulateEnd prices and drops them.
#include "loom/nccl.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.h"
#include "comm/launch_env.h"
#include "comm/nccl/shim.h"
#include "comm/unique_id.h"
#include "loom/loom.hpp"

using loom::nccl_shim::Api;
using loom::nccl_shim::CheckBuffer;
using loom::nccl_shim::CheckRank;
using loom::nccl_shim::GroupedOp;
using loom::nccl_shim::InitRank;
using loom::nccl_shim::InitRequest;
using loom::nccl_shim::Issue;
using loom::nccl_shim::LogCreated;
using loom::nccl_shim::Operable;
using loom::nccl_shim::ParseConfig;
using loom::nccl_shim::Usable;

namespace {

// The C enums are converted by value, so their numbers must stay NCCL's and loom's.
static_assert(static_cast<int>(loom::Code::kUnhandledCudaError) == ncclUnhandledCudaError);
static_assert(static_cast<int>(loom::Code::kSystemError) == ncclSystemError);
static_assert(static_cast<int>(loom::Code::kInternalError) == ncclInternalError);
static_assert(static_cast<int>(loom::Code::kInvalidArgument) == ncclInvalidArgument);
static_assert(static_cast<int>(loom::Code::kInvalidUsage) == ncclInvalidUsage);
static_assert(static_cast<int>(loom::Code::kRemoteError) == ncclRemoteError);
static_assert(static_cast<int>(loom::Code::kInProgress) == ncclInProgress);
// loom's types are NCCL's up to bfloat16; fp8 only moves, as bytes (redop.cc).
static_assert(loom::kNumDataTypes == ncclFloat8e4m3);
static_assert(static_cast<int>(loom::DataType::kInt8) == ncclInt8);
static_assert(static_cast<int>(loom::DataType::kUint8) == ncclUint8);
static_assert(static_cast<int>(loom::DataType::kInt32) == ncclInt32);
static_assert(static_cast<int>(loom::DataType::kUint32) == ncclUint32);
static_assert(static_cast<int>(loom::DataType::kInt64) == ncclInt64);
static_assert(static_cast<int>(loom::DataType::kUint64) == ncclUint64);
static_assert(static_cast<int>(loom::DataType::kFloat16) == ncclFloat16);
static_assert(static_cast<int>(loom::DataType::kFloat32) == ncclFloat32);
static_assert(static_cast<int>(loom::DataType::kFloat64) == ncclFloat64);
static_assert(static_cast<int>(loom::DataType::kBfloat16) == ncclBfloat16);
static_assert(loom::kNumRedOps == ncclNumOps);
static_assert(static_cast<int>(loom::RedOp::kSum) == ncclSum);
static_assert(static_cast<int>(loom::RedOp::kProd) == ncclProd);
static_assert(static_cast<int>(loom::RedOp::kMax) == ncclMax);
static_assert(static_cast<int>(loom::RedOp::kMin) == ncclMin);
static_assert(static_cast<int>(loom::RedOp::kAvg) == ncclAvg);
static_assert(sizeof(ncclUniqueId) == sizeof(loom::UniqueId{}.bytes));
static_assert(loom::kSplitNoColor == NCCL_SPLIT_NOCOLOR);

}  // namespace

namespace {

// NCCL's per-thread state: groups are per thread, and so is the last error.
struct ThreadState {
  std::string last_error;
  int group_depth = 0;
  std::vector<ncclComm*> deferred;  // handles ncclGroupEnd must create
  std::vector<GroupedOp> grouped;   // operations ncclGroupEnd issues, in call order
};
thread_local ThreadState t_state;

// The one conversion from loom's results to NCCL's. Codes share NCCL's
// numbers; a timeout is reported as a remote error, as NCCL does for a peer
// that stops answering.
ncclResult_t ToNcclResult(const loom::Status& status) {
  switch (status.code()) {
    case loom::Code::kOk:
      return ncclSuccess;
    case loom::Code::kUnhandledCudaError:
      return ncclUnhandledCudaError;
    case loom::Code::kSystemError:
      return ncclSystemError;
    case loom::Code::kInternalError:
      return ncclInternalError;
    case loom::Code::kInvalidArgument:
      return ncclInvalidArgument;
    case loom::Code::kInvalidUsage:
      return ncclInvalidUsage;
    case loom::Code::kRemoteError:
      return ncclRemoteError;
    case loom::Code::kInProgress:
      return ncclInProgress;
    case loom::Code::kTimeout:
      return ncclRemoteError;
  }
  return ncclInternalError;
}

// Keeps a failure's text for ncclGetLastError. Never throws: it runs on the
// way out of the C boundary.
void RecordError(const char* func, const loom::Status& status) noexcept {
  try {
    t_state.last_error = std::string(func) + ": " + status.ToString();
  } catch (...) {
    t_state.last_error.clear();  // out of memory: an empty message beats none at all
  }
}

}  // namespace

namespace loom::nccl_shim {

ncclResult_t Finish(const char* func, const loom::Status& status) noexcept {
  if (status.ok()) return ncclSuccess;
  RecordError(func, status);
  LOOM_WARN(loom::log::kCall, "%s", t_state.last_error.c_str());
  return ToNcclResult(status);
}

}  // namespace loom::nccl_shim

namespace {

// --- argument conversion and checks ---

loom::UniqueId ToLoom(const ncclUniqueId& id) {
  loom::UniqueId out;
  std::memcpy(out.bytes.data(), id.internal, sizeof id.internal);
  return out;
}

}  // namespace

namespace loom::nccl_shim {

loom::Status CheckBuffer(const char* name, const void* buf, size_t count) {
  if (buf == nullptr && count > 0) {
    return loom::InvalidArgument(loom::StrPrintf("%s is NULL but count is %zu", name, count));
  }
  return loom::Status::Ok();
}

loom::Status CheckRank(const char* name, int value, int nranks) {
  if (value < 0 || value >= nranks) {
    return loom::InvalidArgument(
        loom::StrPrintf("%s %d is not a rank of this communicator (0..%d)", name, value, nranks - 1));
  }
  return loom::Status::Ok();
}

loom::Result<loom::Communicator*> Usable(ncclComm_t comm) {
  if (comm == nullptr) return loom::InvalidArgument("comm is NULL");
  if (comm->pending) {
    return loom::InvalidUsage(
        "communicator is still being created in the open group: use it after ncclGroupEnd");
  }
  if (comm->impl == nullptr) return comm->init_error.WithContext("communicator creation failed");
  return comm->impl.get();
}

loom::Result<loom::Communicator*> Operable(ncclComm_t comm) {
  LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Usable(comm));
  if (comm->revoked.load()) {
    return loom::InvalidUsage(
        "the communicator was revoked (ncclCommRevoke): only split, shrink, destroy and abort "
        "remain");
  }
  return c;
}

bool InGroup() {
  return t_state.group_depth > 0;
}

loom::Result<std::unique_ptr<ncclComm>> NewChildHandle(const char* func, ncclComm_t parent,
                                                       const ncclConfig_t* config) {
  if (InGroup()) {
    return loom::InvalidUsage(loom::StrPrintf(
        "%s inside a group is not supported: call it outside ncclGroupStart/ncclGroupEnd", func));
  }
  auto handle = std::make_unique<ncclComm>();
  if (config == nullptr) {
    handle->config = parent->config;
  } else {
    LOOM_ASSIGN_OR_RETURN(handle->config, ParseConfig(config));
  }
  return handle;
}

loom::Status Issue(const char* func, ncclComm* comm, OpCost cost,
                   std::function<loom::Status()> run) {
  if (!InGroup()) return run();
  t_state.grouped.push_back(GroupedOp{func, comm, cost, std::move(run)});
  return loom::Status::Ok();
}

}  // namespace loom::nccl_shim

namespace {

// --- creation ---

struct InitOutcome {
  std::unique_ptr<loom::Communicator> comm;
  loom::Status status;
};

InitOutcome CreateOne(const InitRequest& req) noexcept {
  InitOutcome out;
  try {
    auto created = loom::Communicator::Create(req.id, req.rank, req.nranks, req.config);
    if (created.ok()) {
      out.comm = std::move(created).value();
    } else {
      out.status = created.status();
    }
  } catch (const std::exception& e) {
    out.status = loom::InternalError(loom::StrPrintf("unexpected exception: %s", e.what()));
  } catch (...) {
    out.status = loom::InternalError("unexpected exception of unknown type");
  }
  return out;
}

// Ranks of one communicator that live in this process must rendezvous at the
// same time, so each is created on its own thread. Blocks until all are done.
std::vector<InitOutcome> CreateConcurrently(const std::vector<InitRequest>& requests) {
  std::vector<InitOutcome> out(requests.size());
  if (requests.size() == 1) {
    out[0] = CreateOne(requests[0]);
    return out;
  }
  std::vector<std::jthread> threads;  // joined on scope exit, also if a spawn throws
  threads.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&requests, &out, i] { out[i] = CreateOne(requests[i]); });
  }
  return out;
}

}  // namespace

namespace loom::nccl_shim {

void LogCreated(const ncclComm* comm) {
  // NCCL names its version once per process at INFO; so does loom, with
  // the file the loader took, so a user sees which libnccl.so.2 runs.
  static std::once_flag banner;
  std::call_once(banner, [] {
    Dl_info self{};
    const char* file = dladdr(reinterpret_cast<void*>(&ncclGetVersion), &self) != 0 && self.dli_fname
                           ? self.dli_fname
                           : "?";
    LOOM_INFO(loom::log::kInit, "loom %s implementing the NCCL API %d.%d.%d, loaded from %s",
              loom::Version(), NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, file);
  });
  const std::string& name = comm->config.name;
  LOOM_INFO(loom::log::kInit, "comm %p%s%s rank %d nranks %d host %s - Init COMPLETE",
            static_cast<const void*>(comm), name.empty() ? "" : " name ", name.c_str(),
            comm->impl->rank(), comm->impl->size(), comm->impl->host().c_str());
}

}  // namespace loom::nccl_shim

namespace {

// ncclGroupEnd's half of a deferred ncclCommInitRank. Returns the first failure.
loom::Status CompleteDeferredInits() {
  std::vector<ncclComm*> handles;
  handles.swap(t_state.deferred);
  std::vector<InitRequest> requests;
  requests.reserve(handles.size());
  for (ncclComm* h : handles) requests.push_back(*h->pending);
  std::vector<InitOutcome> outcomes = CreateConcurrently(requests);
  loom::Status first;
  for (size_t i = 0; i < handles.size(); ++i) {
    handles[i]->pending.reset();
    handles[i]->impl = std::move(outcomes[i].comm);
    handles[i]->init_error = outcomes[i].status;
    if (handles[i]->impl) {
      LogCreated(handles[i]);
    } else if (first.ok()) {
      first = outcomes[i].status.WithContext(loom::StrPrintf("rank %d", requests[i].rank));
    }
  }
  return first;
}

// Frees a handle (ncclCommDestroy, ncclCommAbort). loom's teardown is not
// collective, so one thread may free the ranks of ncclCommInitAll in turn. A
// handle freed before its group ended is never created, and the operations
// the group collected for it are dropped.
void Release(std::unique_ptr<ncclComm> comm) {
  auto& d = t_state.deferred;
  d.erase(std::remove(d.begin(), d.end(), comm.get()), d.end());
  auto& g = t_state.grouped;
  g.erase(std::remove_if(g.begin(), g.end(),
                         [&](const GroupedOp& op) { return op.comm == comm.get(); }),
          g.end());
  comm.reset();
}

}  // namespace

namespace loom::nccl_shim {

loom::Status InitRank(ncclComm_t* comm, int nranks, const loom::UniqueId& id, int rank,
                      const ncclConfig_t* config) {
  if (comm == nullptr) return loom::InvalidArgument("comm (the ncclComm_t to fill in) is NULL");
  *comm = nullptr;
  if (nranks < 1) {
    return loom::InvalidArgument(loom::StrPrintf("nranks is %d; it must be at least 1", nranks));
  }
  LOOM_TRY(CheckRank("rank", rank, nranks));
  LOOM_ASSIGN_OR_RETURN(loom::CommConfig parsed, ParseConfig(config));
  auto handle = std::make_unique<ncclComm>();
  handle->config = parsed;
  InitRequest request{id, rank, nranks, std::move(parsed)};
  if (t_state.group_depth > 0) {
    handle->pending = std::move(request);
    t_state.deferred.push_back(handle.get());
    *comm = handle.release();
    return loom::Status::Ok();
  }
  InitOutcome outcome = CreateOne(request);
  LOOM_TRY(outcome.status);
  handle->impl = std::move(outcome.comm);
  LogCreated(handle.get());
  *comm = handle.release();
  return loom::Status::Ok();
}

}  // namespace loom::nccl_shim

namespace {

// --- ncclGetUniqueId under a launcher ---

// The rendezvous Communicator::CreateFromEnv would use (same address, same
// secret derived from the job id), or nullopt when LOOM_ROOT is unset. Rank
// 0's process starts the store, as CreateFromEnv does. Ids from other
// launchers' variables (torchrun, MPI) are not derived: NCCL programs there
// ship the id themselves, and only LOOM_ROOT says the user wants otherwise.
loom::Result<std::optional<loom::UniqueId>> LauncherId() {
  const char* root = std::getenv("LOOM_ROOT");
  if (root == nullptr || *root == '\0') return std::optional<loom::UniqueId>();
  LOOM_ASSIGN_OR_RETURN(auto env,
                        loom::ReadLaunchEnv([](const char* name) { return std::getenv(name); }));
  if (!env) {
    return loom::InvalidUsage(
        "LOOM_ROOT is set but no rank/size is (LOOM_RANK/LOOM_WORLD_SIZE, RANK/WORLD_SIZE, ...): "
        "start the program with `loom run -np N -- prog`, or unset LOOM_ROOT and ship the id");
  }
  if (env->rank == 0) {
    LOOM_TRY(loom::internal::HostStoreForEnv(*env));
  }
  return std::optional<loom::UniqueId>(
      loom::internal::MakeUniqueId({env->root_host, env->root_port, env->secret}));
}

// The launcher reserved one rendezvous port, for one communicator: only the
// first ncclGetUniqueId in a process returns the launcher's id.
std::atomic<bool> g_launcher_id_taken{false};

}  // namespace

// ===================== the C ABI =====================
// Exported even when the library is built with -fvisibility=hidden; the
// version script (exports.map) keeps everything else local.
#pragma GCC visibility push(default)

ncclResult_t ncclGetVersion(int* version) {
  return Api("ncclGetVersion", [&]() -> loom::Status {
    if (version == nullptr) return loom::InvalidArgument("version is NULL");
    *version = NCCL_VERSION_CODE;
    return loom::Status::Ok();
  });
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return Api("ncclGetUniqueId", [&]() -> loom::Status {
    if (uniqueId == nullptr) return loom::InvalidArgument("uniqueId is NULL");
    std::optional<loom::UniqueId> id;
    if (!g_launcher_id_taken.exchange(true)) {
      LOOM_ASSIGN_OR_RETURN(id, LauncherId());
    }
    // The id carries the job secret: log where it came from, not its bytes.
    const char* origin = id ? "the launcher's (LOOM_ROOT)" : "fresh, hosted by this process";
    if (!id) {
      LOOM_ASSIGN_OR_RETURN(id, loom::UniqueId::Create());
    }
    std::memcpy(uniqueId->internal, id->bytes.data(), sizeof uniqueId->internal);
    LOOM_INFO(loom::log::kBootstrap, "ncclGetUniqueId: %s", origin);
    return loom::Status::Ok();
  });
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return Api("ncclCommInitRank", [&]() -> loom::Status {
    return InitRank(comm, nranks, ToLoom(commId), rank, nullptr);
  });
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  return Api("ncclCommInitRankConfig", [&]() -> loom::Status {
    return InitRank(comm, nranks, ToLoom(commId), rank, config);
  });
}

ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* /*devlist: host buffers*/) {
  return Api("ncclCommInitAll", [&]() -> loom::Status {
    if (comm == nullptr) return loom::InvalidArgument("comm (the array to fill in) is NULL");
    if (ndev < 1) return loom::InvalidArgument(loom::StrPrintf("ndev is %d; it must be at least 1", ndev));
    std::fill(comm, comm + ndev, nullptr);
    LOOM_ASSIGN_OR_RETURN(loom::UniqueId id, loom::UniqueId::Create());
    std::vector<InitRequest> requests;
    std::vector<std::unique_ptr<ncclComm>> handles;
    for (int r = 0; r < ndev; ++r) {
      requests.push_back(InitRequest{id, r, ndev, {}});
      handles.push_back(std::make_unique<ncclComm>());
    }
    std::vector<InitOutcome> outcomes = CreateConcurrently(requests);
    for (int r = 0; r < ndev; ++r) {
      LOOM_TRY(outcomes[r].status.WithContext(loom::StrPrintf("rank %d", r)));
    }
    for (int r = 0; r < ndev; ++r) {
      handles[r]->impl = std::move(outcomes[r].comm);
      LogCreated(handles[r].get());
      comm[r] = handles[r].release();
    }
    return loom::Status::Ok();
  });
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  return Api("ncclCommSplit", [&]() -> loom::Status {
    if (newcomm == nullptr) return loom::InvalidArgument("newcomm is NULL");
    *newcomm = nullptr;
    LOOM_ASSIGN_OR_RETURN(loom::Communicator * parent, Usable(comm));
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
      return loom::InvalidArgument(
          loom::StrPrintf("color %d is negative and not NCCL_SPLIT_NOCOLOR", color));
    }
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ncclComm> handle,
                          loom::nccl_shim::NewChildHandle("ncclCommSplit", comm, config));
    LOOM_ASSIGN_OR_RETURN(handle->impl, parent->Split(color, key, handle->config));
    if (handle->impl == nullptr) return loom::Status::Ok();  // NCCL_SPLIT_NOCOLOR
    LogCreated(handle.get());
    *newcomm = handle.release();
    return loom::Status::Ok();
  });
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return Api("ncclCommFinalize", [&]() -> loom::Status {
    LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Usable(comm));
    if (comm->revoked.load()) {
      return loom::InvalidArgument(
          "the communicator was revoked (ncclCommRevoke): destroy or abort it instead");
    }
    comm->finalized.store(true);
    return c->Finalize();
  });
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return Api("ncclCommDestroy", [&]() -> loom::Status {
    if (comm == nullptr) return loom::Status::Ok();
    Release(std::unique_ptr<ncclComm>(comm));
    return loom::Status::Ok();
  });
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return Api("ncclCommAbort", [&]() -> loom::Status {
    if (comm == nullptr) return loom::Status::Ok();
    // Abort also releases every stream waiting on this communicator.
    if (comm->impl) comm->impl->Abort();
    Release(std::unique_ptr<ncclComm>(comm));
    return loom::Status::Ok();
  });
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return Api("ncclCommGetAsyncError", [&]() -> loom::Status {
    if (comm == nullptr) return loom::InvalidArgument("comm is NULL");
    if (asyncError == nullptr) return loom::InvalidArgument("asyncError is NULL");
    if (comm->pending) {
      *asyncError = ncclInProgress;
      return loom::Status::Ok();
    }
    loom::Status error = comm->impl ? comm->impl->AsyncError() : comm->init_error;
    *asyncError = ToNcclResult(error);
    // The query itself succeeded, so no WARN (watchdogs poll this); but keep
    // the reason for ncclGetLastError.
    if (!error.ok()) RecordError("ncclCommGetAsyncError", error);
    return loom::Status::Ok();
  });
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled CUDA error (ncclGetLastError() has details)";
    case ncclSystemError:
      return "system call failed (ncclGetLastError() has details)";
    case ncclInternalError:
      return "internal error in loom (please report it)";
    case ncclInvalidArgument:
      return "invalid argument (ncclGetLastError() names it)";
    case ncclInvalidUsage:
      return "invalid usage (ncclGetLastError() says why)";
    case ncclRemoteError:
      return "a peer failed, timed out or the communicator was aborted";
    case ncclInProgress:
      return "operation in progress";
    case ncclNumResults:
      break;
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t /*comm: the last error is per thread*/) {
  return t_state.last_error.c_str();
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return Api("ncclCommCount", [&]() -> loom::Status {
    if (count == nullptr) return loom::InvalidArgument("count is NULL");
    if (comm != nullptr && comm->pending) {
      *count = comm->pending->nranks;
      return loom::Status::Ok();
    }
    LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Usable(comm));
    *count = c->size();
    return loom::Status::Ok();
  });
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return Api("ncclCommUserRank", [&]() -> loom::Status {
    if (rank == nullptr) return loom::InvalidArgument("rank is NULL");
    if (comm != nullptr && comm->pending) {
      *rank = comm->pending->rank;
      return loom::Status::Ok();
    }
    LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Usable(comm));
    *rank = c->rank();
    return loom::Status::Ok();
  });
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return Api("ncclCommCuDevice", [&]() -> loom::Status {
    if (device == nullptr) return loom::InvalidArgument("device is NULL");
    LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Usable(comm));
    LOOM_ASSIGN_OR_RETURN(*device, c->cuda_device());
    return loom::Status::Ok();
  });
}

ncclResult_t ncclGroupStart(void) {
  return Api("ncclGroupStart", []() -> loom::Status {
    ++t_state.group_depth;
    return loom::Status::Ok();
  });
}

namespace {

// Issues what the group collected as one loom group, which runs it (host
// buffers) or enqueues it (device buffers). Returns the first failure, its
// entry point named.
loom::Status RunGrouped(std::vector<GroupedOp> ops) {
  if (ops.empty()) return loom::Status::Ok();
  LOOM_TRY(loom::GroupStart());
  loom::Status first;
  for (GroupedOp& op : ops) {
    loom::Status s = op.run();
    if (first.ok() && !s.ok()) first = s.WithContext(loom::StrPrintf("%s in the group", op.func));
  }
  loom::Status ended = loom::GroupEnd();
  return first.ok() ? ended : first;
}

// The outermost ncclGroupEnd's work, or ncclGroupSimulateEnd's when
// `simulate` (then the operations are priced into *estimate_us, unless
// there are none, and dropped). Deferred creations complete either way, as
// in NCCL. Returns the first failure.
loom::Status EndOutermostGroup(bool simulate, float* estimate_us) {
  std::vector<GroupedOp> ops;
  ops.swap(t_state.grouped);
  loom::Status ended;
  if (simulate) {
    if (!ops.empty()) *estimate_us = static_cast<float>(loom::nccl_shim::EstimateUs(ops));
  } else {
    // Issue the collected operations first: they run on communicators that
    // exist already, and every rank of a deferred creation does the same.
    ended = RunGrouped(std::move(ops));
  }
  loom::Status created;
  if (!t_state.deferred.empty()) created = CompleteDeferredInits();
  return ended.ok() ? created : ended;
}

}  // namespace

ncclResult_t ncclGroupEnd(void) {
  return Api("ncclGroupEnd", []() -> loom::Status {
    if (t_state.group_depth == 0) {
      return loom::InvalidUsage("ncclGroupEnd without a matching ncclGroupStart");
    }
    if (--t_state.group_depth > 0) return loom::Status::Ok();
    return EndOutermostGroup(/*simulate=*/false, nullptr);
  });
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  if (simInfo == nullptr) return ncclGroupEnd();  // as NCCL
  return Api("ncclGroupSimulateEnd", [&]() -> loom::Status {
    if (t_state.group_depth == 0) {
      return loom::InvalidUsage("ncclGroupSimulateEnd without a matching ncclGroupStart");
    }
    if (--t_state.group_depth > 0) return loom::Status::Ok();
    // Read as ncclConfig_t is: `size` says how much of the struct the caller has.
    size_t size = 0;
    std::memcpy(&size, simInfo, sizeof size);
    ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
    info.magic = 0;
    std::memcpy(&info, simInfo, std::min(size, sizeof info));
    if (info.magic != NCCL_SIM_INFO_MAGIC) {
      // NCCL ends the group on this failure too, dropping what it collected.
      t_state.grouped.clear();
      LOOM_TRY(EndOutermostGroup(/*simulate=*/true, &info.estimatedTime));
      return loom::InvalidArgument(
          loom::StrPrintf("ncclSimInfo_t magic is 0x%x, not 0x%x (size %zu): initialise it with "
                 "NCCL_SIM_INFO_INITIALIZER; the group was ended and its operations dropped",
                 info.magic, NCCL_SIM_INFO_MAGIC, size));
    }
    loom::Status ended = EndOutermostGroup(/*simulate=*/true, &info.estimatedTime);
    std::memcpy(simInfo, &info, std::min(size, sizeof info));
    return ended;
  });
}

void ncclResetDebugInit(void) {
  try {
    loom::log::ReloadFromEnv();
  } catch (
      ...) {  // NOLINT(bugprone-empty-catch): no result to report it in; logging stays as it was
  }
}

LOOM_NCCL_PROFILING_ALIAS(ncclGetVersion);
LOOM_NCCL_PROFILING_ALIAS(ncclGetUniqueId);
LOOM_NCCL_PROFILING_ALIAS(ncclCommInitRank);
LOOM_NCCL_PROFILING_ALIAS(ncclCommInitRankConfig);
LOOM_NCCL_PROFILING_ALIAS(ncclCommInitAll);
LOOM_NCCL_PROFILING_ALIAS(ncclCommSplit);
LOOM_NCCL_PROFILING_ALIAS(ncclCommFinalize);
LOOM_NCCL_PROFILING_ALIAS(ncclCommDestroy);
LOOM_NCCL_PROFILING_ALIAS(ncclCommAbort);
LOOM_NCCL_PROFILING_ALIAS(ncclCommGetAsyncError);
LOOM_NCCL_PROFILING_ALIAS(ncclGetErrorString);
LOOM_NCCL_PROFILING_ALIAS(ncclGetLastError);
LOOM_NCCL_PROFILING_ALIAS(ncclCommCount);
LOOM_NCCL_PROFILING_ALIAS(ncclCommUserRank);
LOOM_NCCL_PROFILING_ALIAS(ncclCommCuDevice);
LOOM_NCCL_PROFILING_ALIAS(ncclGroupStart);
LOOM_NCCL_PROFILING_ALIAS(ncclGroupEnd);
LOOM_NCCL_PROFILING_ALIAS(ncclGroupSimulateEnd);
// Deprecated in the header, as in NCCL; naming it for the alias is not a use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
LOOM_NCCL_PROFILING_ALIAS(ncclResetDebugInit);
#pragma GCC diagnostic pop

#pragma GCC visibility pop
