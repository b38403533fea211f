// Reduction operators of the NCCL C ABI: the built-in ncclRedOp_t values,
// the pre-multiplied sums of ncclRedOpCreatePreMulSum, and the conversion
// every reducing collective makes (ToReduction).
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "base/log.h"
#include "comm/nccl/shim.h"

using loom::nccl_shim::Api;
using loom::nccl_shim::RawEnum;
using loom::nccl_shim::ToDataType;
using loom::nccl_shim::Usable;

namespace loom::nccl_shim {

namespace {

bool IsFloat8(int v) {
  return v == ncclFloat8e4m3 || v == ncclFloat8e5m2;
}

loom::Status CheckTypeRange(int v) {
  if (v < 0 || v >= ncclNumTypes) {
    return loom::InvalidArgument(
        loom::StrPrintf("datatype %d is not an ncclDataType_t (valid: 0..%d)", v, ncclNumTypes - 1));
  }
  return loom::Status::Ok();
}

}  // namespace

loom::Result<loom::DataType> ToDataType(const ncclDataType_t& type) {
  const int v = RawEnum(type);
  LOOM_TRY(CheckTypeRange(v));
  if (IsFloat8(v)) {
    return loom::InvalidArgument(
        loom::StrPrintf("datatype %d (%s) cannot be reduced by loom; fp8 data only moves (all-gather, "
               "broadcast, all-to-all, gather, scatter, send/recv)",
               v, v == ncclFloat8e4m3 ? "ncclFloat8e4m3" : "ncclFloat8e5m2"));
  }
  return static_cast<loom::DataType>(v);
}

loom::Result<loom::DataType> ToMovedType(const ncclDataType_t& type) {
  const int v = RawEnum(type);
  LOOM_TRY(CheckTypeRange(v));
  if (IsFloat8(v)) return loom::DataType::kUint8;
  return static_cast<loom::DataType>(v);
}

loom::Result<loom::Reduction> ToReduction(ncclComm_t comm, const ncclRedOp_t& op) {
  const int v = RawEnum(op);
  if (v >= 0 && v < ncclNumOps) return loom::Reduction(static_cast<loom::RedOp>(v));
  if (v >= ncclNumOps && comm != nullptr) {
    std::lock_guard<std::mutex> lock(comm->user_ops_mu);
    const size_t i = static_cast<size_t>(v - ncclNumOps);
    if (i < comm->user_ops.size() && comm->user_ops[i]) return *comm->user_ops[i];
  }
  if (v >= ncclNumOps) {
    return loom::InvalidArgument(
        loom::StrPrintf("reduction op %d is not a built-in ncclRedOp_t (0..%d) nor one that "
               "ncclRedOpCreatePreMulSum made on this communicator and ncclRedOpDestroy has not "
               "destroyed",
               v, ncclNumOps - 1));
  }
  return loom::InvalidArgument(
      loom::StrPrintf("reduction op %d is not an ncclRedOp_t (built-ins: 0..%d)", v, ncclNumOps - 1));
}

}  // namespace loom::nccl_shim

#pragma GCC visibility push(default)

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  return Api("ncclRedOpCreatePreMulSum", [&]() -> loom::Status {
    if (op == nullptr) return loom::InvalidArgument("op is NULL");
    LOOM_TRY(Usable(comm).status());
    LOOM_ASSIGN_OR_RETURN(const loom::DataType type, ToDataType(datatype));
    if (scalar == nullptr) return loom::InvalidArgument("scalar is NULL");
    const int where = RawEnum(residence);
    if (where != ncclScalarDevice && where != ncclScalarHostImmediate) {
      return loom::InvalidArgument(
          loom::StrPrintf("residence %d is neither ncclScalarDevice (0) nor ncclScalarHostImmediate (1)",
                 where));
    }
    const loom::Reduction red = where == ncclScalarHostImmediate
                                    ? loom::Reduction::PreMulSum(scalar, type)
                                    : loom::Reduction::PreMulSumAt(scalar, type);
    std::lock_guard<std::mutex> lock(comm->user_ops_mu);
    size_t i = 0;
    while (i < comm->user_ops.size() && comm->user_ops[i]) ++i;
    if (i >= static_cast<size_t>(ncclMaxRedOp - ncclNumOps)) {
      return loom::InvalidUsage("too many reduction operators on this communicator");
    }
    if (i == comm->user_ops.size()) comm->user_ops.emplace_back();
    comm->user_ops[i] = red;
    const int value = ncclNumOps + static_cast<int>(i);
    std::memcpy(op, &value, sizeof value);
    LOOM_INFO(loom::log::kColl, "comm %p: op %d = PreMulSum of %s, scalar %s %p",
              static_cast<void*>(comm), value, std::string(loom::Name(type)).c_str(),
              where == ncclScalarHostImmediate ? "copied from" : "read at each call from",
              scalar);
    return loom::Status::Ok();
  });
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return Api("ncclRedOpDestroy", [&]() -> loom::Status {
    LOOM_TRY(Usable(comm).status());
    const int v = RawEnum(op);
    if (v >= 0 && v < ncclNumOps) {
      return loom::InvalidArgument(
          loom::StrPrintf("op %d is a built-in operator; only those of ncclRedOpCreatePreMulSum are "
                 "destroyed",
                 v));
    }
    std::lock_guard<std::mutex> lock(comm->user_ops_mu);
    const size_t i = static_cast<size_t>(v - ncclNumOps);
    if (v < 0 || i >= comm->user_ops.size() || !comm->user_ops[i]) {
      return loom::InvalidArgument(
          loom::StrPrintf("op %d was not made by ncclRedOpCreatePreMulSum on this communicator, or was "
                 "destroyed already",
                 v));
    }
    comm->user_ops[i].reset();
    return loom::Status::Ok();
  });
}

LOOM_NCCL_PROFILING_ALIAS(ncclRedOpCreatePreMulSum);
LOOM_NCCL_PROFILING_ALIAS(ncclRedOpDestroy);

#pragma GCC visibility pop
