// The block collectives NCCL added in 2.28 (ncclAlltoAll, ncclGather,
// ncclScatter). All-to-all is loom's AllToAll; gather and scatter are, as in
// NCCL, a group of sends and receives: every rank exchanges one block with
// the root, the root with every rank (itself included, unless in place).
#include <cstddef>

#include "comm/nccl/shim.h"

using loom::nccl_shim::Api;
using loom::nccl_shim::CheckBuffer;
using loom::nccl_shim::CheckRank;
using loom::nccl_shim::Issue;
using loom::nccl_shim::Operable;
using loom::nccl_shim::ToMovedType;

namespace {

// Runs `post` (which posts sends and receives) inside a loom group of its
// own, nested in the caller's if one is open, so that they progress
// together. Returns the first failure.
template <typename Post>
loom::Status InOneGroup(Post&& post) {
  LOOM_TRY(loom::GroupStart());
  loom::Status posted = post();
  loom::Status ended = loom::GroupEnd();
  return posted.ok() ? ended : posted;
}

// Keeps the first failure of several calls.
struct FirstError {
  loom::Status status;
  void Keep(const loom::Status& s) {
    if (status.ok() && !s.ok()) status = s;
  }
};

// Gather on this rank: block `count` of every rank to root's recv + i*block.
loom::Status PostGather(loom::Communicator* c, const char* send, char* recv, size_t count,
                        loom::DataType type, int root, cudaStream_t stream) {
  const size_t block = count * loom::SizeOf(type);
  FirstError first;
  bool in_place = false;
  if (c->rank() == root) {
    for (int r = 0; r < c->size(); ++r) {
      char* dst = recv + static_cast<size_t>(r) * block;
      if (r == root && dst == send) {
        in_place = true;
        continue;
      }
      first.Keep(c->Recv(dst, count, type, r, stream));
    }
  }
  if (!in_place) first.Keep(c->Send(send, count, type, root, stream));
  return first.status;
}

// Scatter on this rank: root's send + i*block to rank i's recv.
loom::Status PostScatter(loom::Communicator* c, const char* send, char* recv, size_t count,
                         loom::DataType type, int root, cudaStream_t stream) {
  const size_t block = count * loom::SizeOf(type);
  FirstError first;
  bool in_place = false;
  if (c->rank() == root) {
    for (int r = 0; r < c->size(); ++r) {
      const char* src = send + static_cast<size_t>(r) * block;
      if (r == root && src == recv) {
        in_place = true;
        continue;
      }
      first.Keep(c->Send(src, count, type, r, stream));
    }
  }
  if (!in_place) first.Keep(c->Recv(recv, count, type, root, stream));
  return first.status;
}

enum class Rooted { kGather, kScatter };

// ncclGather and ncclScatter: the buffer of nranks blocks (gather's recvbuff,
// scatter's sendbuff) is significant on root only.
loom::Status GatherOrScatter(Rooted which, const char* func, const void* sendbuff, void* recvbuff,
                             size_t count, const ncclDataType_t& datatype, int root, ncclComm_t comm,
                             cudaStream_t stream) {
  LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Operable(comm));
  LOOM_ASSIGN_OR_RETURN(loom::DataType type, ToMovedType(datatype));
  LOOM_TRY(CheckRank("root", root, c->size()));
  const bool is_root = c->rank() == root;
  if (which == Rooted::kGather) {
    LOOM_TRY(CheckBuffer("sendbuff", sendbuff, count));
    if (is_root) LOOM_TRY(CheckBuffer("recvbuff (on root)", recvbuff, count));
  } else {
    if (is_root) LOOM_TRY(CheckBuffer("sendbuff (on root)", sendbuff, count));
    LOOM_TRY(CheckBuffer("recvbuff", recvbuff, count));
  }
  if (count == 0) return loom::Status::Ok();  // nothing moves, as in NCCL
  const auto* send = static_cast<const char*>(sendbuff);
  auto* recv = static_cast<char*>(recvbuff);
  // Priced as the root's n-1 blocks through its link, one after another.
  const loom::nccl_shim::OpCost cost{loom::OpKind::kAllGather, count * loom::SizeOf(type),
                                     c->size()};
  return Issue(func, comm, cost, [=] {
    return InOneGroup([&] {
      return which == Rooted::kGather ? PostGather(c, send, recv, count, type, root, stream)
                                      : PostScatter(c, send, recv, count, type, root, stream);
    });
  });
}

}  // namespace

#pragma GCC visibility push(default)

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return Api("ncclAlltoAll", [&]() -> loom::Status {
    LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Operable(comm));
    LOOM_ASSIGN_OR_RETURN(loom::DataType type, ToMovedType(datatype));
    LOOM_TRY(CheckBuffer("sendbuff", sendbuff, count));
    LOOM_TRY(CheckBuffer("recvbuff", recvbuff, count));
    return Issue("ncclAlltoAll", comm,
                 {loom::OpKind::kAllToAll, count * loom::SizeOf(type), c->size()},
                 [=] { return c->AllToAll(sendbuff, recvbuff, count, type, stream); });
  });
}

ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return Api("ncclGather", [&] {
    return GatherOrScatter(Rooted::kGather, "ncclGather", sendbuff, recvbuff, count, datatype, root,
                           comm, stream);
  });
}

ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return Api("ncclScatter", [&] {
    return GatherOrScatter(Rooted::kScatter, "ncclScatter", sendbuff, recvbuff, count, datatype,
                           root, comm, stream);
  });
}

LOOM_NCCL_PROFILING_ALIAS(ncclAlltoAll);
LOOM_NCCL_PROFILING_ALIAS(ncclGather);
LOOM_NCCL_PROFILING_ALIAS(ncclScatter);

#pragma GCC visibility pop
