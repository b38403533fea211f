// The communicator life-cycle calls of NCCL 2.28: creation from several
// ids (ncclCommInitRankScalable), a smaller communicator without some ranks
// (ncclCommShrink) and revocation (ncclCommRevoke).
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "base/log.h"
#include "comm/nccl/shim.h"
#include "comm/unique_id.h"

using loom::nccl_shim::Api;
using loom::nccl_shim::CheckRank;
using loom::nccl_shim::InitRank;
using loom::nccl_shim::LogCreated;
using loom::nccl_shim::NewChildHandle;
using loom::nccl_shim::Usable;

namespace {

// ncclCommInitRankScalable: NCCL spreads its rendezvous over the ids; loom
// has one store per communicator, so it meets at the first id (made in rank
// 0's process in NCCL's scheme) once every id is a loom id.
loom::Status InitScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                          const ncclUniqueId* commIds, const ncclConfig_t* config) {
  if (newcomm == nullptr) return loom::InvalidArgument("newcomm is NULL");
  *newcomm = nullptr;
  if (nranks < 1) {
    return loom::InvalidArgument(loom::StrPrintf("nranks is %d; it must be at least 1", nranks));
  }
  if (nId < 1 || nId > nranks) {
    return loom::InvalidArgument(loom::StrPrintf("nId is %d; it must be 1 to nranks (%d)", nId, nranks));
  }
  if (commIds == nullptr) return loom::InvalidArgument("commIds is NULL");
  std::vector<loom::UniqueId> ids(static_cast<size_t>(nId));
  for (int i = 0; i < nId; ++i) {
    std::memcpy(ids[i].bytes.data(), commIds[i].internal, sizeof commIds[i].internal);
    if (auto parts = loom::internal::ParseUniqueId(ids[i]); !parts.ok()) {
      return parts.status().WithContext(loom::StrPrintf("commIds[%d]", i));
    }
  }
  return InitRank(newcomm, nranks, ids.front(), myrank, config);
}

// The ranks of a shrunk communicator: those of `nranks` not excluded, in
// order. Refuses what NCCL refuses (no list, an empty one, a caller in it)
// and what it would misread (ranks out of range, repeated).
loom::Result<std::vector<int>> KeptRanks(const int* exclude, int count, int me, int nranks) {
  if (exclude == nullptr) return loom::InvalidArgument("excludeRanksList is NULL");
  if (count < 1) {
    return loom::InvalidArgument(loom::StrPrintf("excludeRanksCount is %d; it must be at least 1", count));
  }
  std::vector<bool> excluded(static_cast<size_t>(nranks), false);
  for (int i = 0; i < count; ++i) {
    LOOM_TRY(CheckRank(loom::StrPrintf("excludeRanksList[%d]", i).c_str(), exclude[i], nranks));
    if (excluded[exclude[i]]) {
      return loom::InvalidArgument(
          loom::StrPrintf("excludeRanksList[%d]: rank %d is listed twice", i, exclude[i]));
    }
    excluded[exclude[i]] = true;
  }
  if (excluded[me]) {
    return loom::InvalidArgument(
        loom::StrPrintf("this rank (%d) is in excludeRanksList: excluded ranks must not call "
               "ncclCommShrink",
               me));
  }
  std::vector<int> kept;
  for (int r = 0; r < nranks; ++r) {
    if (!excluded[r]) kept.push_back(r);
  }
  return kept;
}

// The id of the shrunk communicator: its first rank makes it (and so hosts
// its store) and sends it to the other kept ranks over the parent, so the
// excluded ranks take no part. Every kept rank calls this.
loom::Result<loom::UniqueId> ShareNewId(loom::Communicator* parent, const std::vector<int>& kept) {
  loom::UniqueId id;
  const int leader = kept.front();
  if (parent->rank() == leader) {
    LOOM_ASSIGN_OR_RETURN(id, loom::UniqueId::Create());
  }
  if (kept.size() == 1) return id;
  LOOM_TRY(loom::GroupStart());
  loom::Status posted;
  if (parent->rank() == leader) {
    for (size_t i = 1; i < kept.size() && posted.ok(); ++i) {
      posted = parent->Send(id.bytes.data(), id.bytes.size(), loom::DataType::kUint8, kept[i]);
    }
  } else {
    posted = parent->Recv(id.bytes.data(), id.bytes.size(), loom::DataType::kUint8, leader);
  }
  loom::Status ended = loom::GroupEnd();
  LOOM_TRY((posted.ok() ? ended : posted)
               .WithContext(loom::StrPrintf("sending the new communicator's id from rank %d over the "
                                   "parent (a parent that failed cannot shrink: create a fresh "
                                   "communicator with ncclCommInitRank)",
                                   leader)));
  return id;
}

loom::Status Shrink(ncclComm_t comm, const int* exclude, int count, ncclComm_t* newcomm,
                    const ncclConfig_t* config, int flags) {
  if (newcomm == nullptr) return loom::InvalidArgument("newcomm is NULL");
  *newcomm = nullptr;
  LOOM_ASSIGN_OR_RETURN(loom::Communicator * parent, Usable(comm));
  if ((flags & ~NCCL_SHRINK_ABORT) != 0) {
    return loom::InvalidArgument(
        loom::StrPrintf("shrinkFlags 0x%x: only NCCL_SHRINK_DEFAULT (0) and NCCL_SHRINK_ABORT (0x1) exist",
               static_cast<unsigned>(flags)));
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<int> kept,
                        KeptRanks(exclude, count, parent->rank(), parent->size()));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ncclComm> handle,
                        NewChildHandle("ncclCommShrink", comm, config));
  // NCCL_SHRINK_ABORT ends the parent's pending operations first: a host
  // operation completed when its call returned, and device operations
  // already on streams are left to finish, so there is nothing to end.
  LOOM_ASSIGN_OR_RETURN(loom::UniqueId id, ShareNewId(parent, kept));
  const int new_rank =
      static_cast<int>(std::find(kept.begin(), kept.end(), parent->rank()) - kept.begin());
  LOOM_ASSIGN_OR_RETURN(
      handle->impl,
      loom::Communicator::Create(id, new_rank, static_cast<int>(kept.size()), handle->config));
  LogCreated(handle.get());
  *newcomm = handle.release();
  return loom::Status::Ok();
}

}  // namespace

#pragma GCC visibility push(default)

ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config) {
  return Api("ncclCommInitRankScalable",
             [&] { return InitScalable(newcomm, nranks, myrank, nId, commIds, config); });
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return Api("ncclCommShrink", [&] {
    return Shrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  });
}

// Host operations complete before their call returns, so revoking has
// nothing in flight to stop: it only makes later operations fail.
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return Api("ncclCommRevoke", [&]() -> loom::Status {
    if (comm == nullptr) return loom::Status::Ok();  // as NCCL
    if (revokeFlags != NCCL_REVOKE_DEFAULT) {
      return loom::InvalidArgument(
          loom::StrPrintf("revokeFlags is %d; it must be NCCL_REVOKE_DEFAULT (0)", revokeFlags));
    }
    LOOM_TRY(Usable(comm).status());
    if (comm->finalized.load()) {
      return loom::InvalidArgument("the communicator was finalized (ncclCommFinalize)");
    }
    if (comm->revoked.exchange(true)) {
      return loom::InvalidArgument("the communicator was revoked already");
    }
    LOOM_INFO(loom::log::kInit, "comm %p rank %d - Revoke COMPLETE", static_cast<void*>(comm),
              comm->impl->rank());
    return loom::Status::Ok();
  });
}

LOOM_NCCL_PROFILING_ALIAS(ncclCommInitRankScalable);
LOOM_NCCL_PROFILING_ALIAS(ncclCommShrink);
LOOM_NCCL_PROFILING_ALIAS(ncclCommRevoke);

#pragma GCC visibility pop
