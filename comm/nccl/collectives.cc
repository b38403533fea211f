// The collectives and point-to-point calls of the NCCL C ABI that map one to
// one onto loom's (ncclAllReduce .. ncclRecv): argument checks as NCCL makes
// them, then the operation now or, inside a group, collected (Issue).
#include <cstddef>

#include "comm/nccl/shim.h"

using loom::nccl_shim::Api;
using loom::nccl_shim::CheckBuffer;
using loom::nccl_shim::CheckRank;
using loom::nccl_shim::Issue;
using loom::nccl_shim::Operable;
using loom::nccl_shim::ToDataType;
using loom::nccl_shim::ToMovedType;
using loom::nccl_shim::ToReduction;

#pragma GCC visibility push(default)

// With device buffers a call returns once enqueued on `stream` and completes
// in stream order (device_path.h); with host buffers the stream is unused and
// the call completes (or, in a group, is collected) before it returns.

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return Api("ncclAllReduce", [&]() -> loom::Status {
    LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Operable(comm));
    LOOM_ASSIGN_OR_RETURN(loom::DataType type, ToDataType(datatype));
    LOOM_ASSIGN_OR_RETURN(loom::Reduction red, ToReduction(comm, op));
    LOOM_TRY(CheckBuffer("sendbuff", sendbuff, count));
    LOOM_TRY(CheckBuffer("recvbuff", recvbuff, count));
    return Issue("ncclAllReduce", comm,
                 {loom::OpKind::kAllReduce, count * loom::SizeOf(type), c->size()},
                 [=] { return c->AllReduce(sendbuff, recvbuff, count, type, red, stream); });
  });
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return Api("ncclReduceScatter", [&]() -> loom::Status {
    LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Operable(comm));
    LOOM_ASSIGN_OR_RETURN(loom::DataType type, ToDataType(datatype));
    LOOM_ASSIGN_OR_RETURN(loom::Reduction red, ToReduction(comm, op));
    LOOM_TRY(CheckBuffer("sendbuff", sendbuff, recvcount));
    LOOM_TRY(CheckBuffer("recvbuff", recvbuff, recvcount));
    return Issue("ncclReduceScatter", comm,
                 {loom::OpKind::kReduceScatter, recvcount * loom::SizeOf(type), c->size()}, [=] {
                   return c->ReduceScatter(sendbuff, recvbuff, recvcount, type, red, stream);
                 });
  });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return Api("ncclAllGather", [&]() -> loom::Status {
    LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Operable(comm));
    LOOM_ASSIGN_OR_RETURN(loom::DataType type, ToMovedType(datatype));
    LOOM_TRY(CheckBuffer("sendbuff", sendbuff, sendcount));
    LOOM_TRY(CheckBuffer("recvbuff", recvbuff, sendcount));
    return Issue("ncclAllGather", comm,
                 {loom::OpKind::kAllGather, sendcount * loom::SizeOf(type), c->size()},
                 [=] { return c->AllGather(sendbuff, recvbuff, sendcount, type, stream); });
  });
}

namespace {
loom::Status Broadcast(const char* func, const void* sendbuff, void* recvbuff, size_t count,
                       ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Operable(comm));
  LOOM_ASSIGN_OR_RETURN(loom::DataType type, ToMovedType(datatype));
  LOOM_TRY(CheckRank("root", root, c->size()));
  if (c->rank() == root) {
    LOOM_TRY(CheckBuffer("sendbuff (on root)", sendbuff, count));
  }
  LOOM_TRY(CheckBuffer("recvbuff", recvbuff, count));
  return Issue(func, comm, {loom::OpKind::kBroadcast, count * loom::SizeOf(type), c->size()},
               [=] { return c->Broadcast(sendbuff, recvbuff, count, type, root, stream); });
}
}  // namespace

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return Api("ncclBroadcast", [&] {
    return Broadcast("ncclBroadcast", sendbuff, recvbuff, count, datatype, root, comm, stream);
  });
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return Api("ncclBcast", [&] {
    return Broadcast("ncclBcast", buff, buff, count, datatype, root, comm, stream);
  });
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return Api("ncclReduce", [&]() -> loom::Status {
    LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Operable(comm));
    LOOM_ASSIGN_OR_RETURN(loom::DataType type, ToDataType(datatype));
    LOOM_ASSIGN_OR_RETURN(loom::Reduction red, ToReduction(comm, op));
    LOOM_TRY(CheckRank("root", root, c->size()));
    LOOM_TRY(CheckBuffer("sendbuff", sendbuff, count));
    if (c->rank() == root) {
      LOOM_TRY(CheckBuffer("recvbuff (on root)", recvbuff, count));
    }
    return Issue("ncclReduce", comm, {loom::OpKind::kReduce, count * loom::SizeOf(type), c->size()},
                 [=] { return c->Reduce(sendbuff, recvbuff, count, type, red, root, stream); });
  });
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return Api("ncclSend", [&]() -> loom::Status {
    LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Operable(comm));
    LOOM_ASSIGN_OR_RETURN(loom::DataType type, ToMovedType(datatype));
    LOOM_TRY(CheckRank("peer", peer, c->size()));
    LOOM_TRY(CheckBuffer("sendbuff", sendbuff, count));
    return Issue("ncclSend", comm, {loom::OpKind::kSendRecv, count * loom::SizeOf(type), 2},
                 [=] { return c->Send(sendbuff, count, type, peer, stream); });
  });
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return Api("ncclRecv", [&]() -> loom::Status {
    LOOM_ASSIGN_OR_RETURN(loom::Communicator * c, Operable(comm));
    LOOM_ASSIGN_OR_RETURN(loom::DataType type, ToMovedType(datatype));
    LOOM_TRY(CheckRank("peer", peer, c->size()));
    LOOM_TRY(CheckBuffer("recvbuff", recvbuff, count));
    return Issue("ncclRecv", comm, {loom::OpKind::kSendRecv, count * loom::SizeOf(type), 2},
                 [=] { return c->Recv(recvbuff, count, type, peer, stream); });
  });
}

LOOM_NCCL_PROFILING_ALIAS(ncclAllReduce);
LOOM_NCCL_PROFILING_ALIAS(ncclReduceScatter);
LOOM_NCCL_PROFILING_ALIAS(ncclAllGather);
LOOM_NCCL_PROFILING_ALIAS(ncclBroadcast);
LOOM_NCCL_PROFILING_ALIAS(ncclBcast);
LOOM_NCCL_PROFILING_ALIAS(ncclReduce);
LOOM_NCCL_PROFILING_ALIAS(ncclSend);
LOOM_NCCL_PROFILING_ALIAS(ncclRecv);

#pragma GCC visibility pop
