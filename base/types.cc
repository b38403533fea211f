// Names of data types and reduction operators (nccl-tests spelling).
#include "loom/types.hpp"

#include <cstring>

namespace loom {

std::string_view Name(DataType t) {
  switch (t) {
    case DataType::kInt8: return "int8";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kUint32: return "uint32";
    case DataType::kInt64: return "int64";
    case DataType::kUint64: return "uint64";
    case DataType::kFloat16: return "half";
    case DataType::kFloat32: return "float";
    case DataType::kFloat64: return "double";
    case DataType::kBfloat16: return "bfloat16";
  }
  return "invalid";
}

std::string_view Name(RedOp op) {
  switch (op) {
    case RedOp::kSum: return "sum";
    case RedOp::kProd: return "prod";
    case RedOp::kMax: return "max";
    case RedOp::kMin: return "min";
    case RedOp::kAvg: return "avg";
  }
  return "invalid";
}

Reduction Reduction::PreMulSum(const void* scalar, DataType type) {
  Reduction r(RedOp::kSum);
  r.premul = true;
  r.scalar.type = type;
  if (scalar == nullptr) {
    r.scalar.where = PreMulScalar::Where::kPointer;  // a null pointer, which validation names
    return r;
  }
  r.scalar.where = PreMulScalar::Where::kValue;
  const size_t n = SizeOf(type);  // 0 for an invalid type, which validation names
  std::memcpy(r.scalar.value, scalar, n);
  return r;
}

Reduction Reduction::PreMulSumAt(const void* scalar, DataType type) {
  Reduction r(RedOp::kSum);
  r.premul = true;
  r.scalar.where = PreMulScalar::Where::kPointer;
  r.scalar.type = type;
  r.scalar.pointer = scalar;
  return r;
}

}  // namespace loom
