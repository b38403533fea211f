// Element types and reduction operators, numbered exactly like NCCL's
// ncclDataType_t and ncclRedOp_t so the C ABI converts them by value.
#pragma once

#include <cstddef>
#include <string_view>

namespace loom {

enum class DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};
inline constexpr int kNumDataTypes = 10;

enum class RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
inline constexpr int kNumRedOps = 5;

constexpr bool IsValid(DataType t) { return static_cast<int>(t) >= 0 && static_cast<int>(t) < kNumDataTypes; }
constexpr bool IsValid(RedOp op) { return static_cast<int>(op) >= 0 && static_cast<int>(op) < kNumRedOps; }

constexpr size_t SizeOf(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8: return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16: return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64: return 8;
  }
  return 0;
}

// The scalar of a pre-multiplied sum (NCCL's ncclRedOpCreatePreMulSum):
// every rank multiplies each element of its input by its own scalar, of the
// operation's datatype, before the inputs are summed. Integers wrap; floats
// round once (fp16/bf16: the exact fp32 product rounded to nearest even);
// a NaN product is the canonical quiet NaN.
struct PreMulScalar {
  enum class Where : int {
    kValue,    // `value` holds the scalar, taken when the reduction was made
    kPointer,  // read from `pointer` when the operation runs: device memory
               // for device buffers (in stream order), host memory otherwise
  };
  Where where = Where::kValue;
  DataType type = DataType::kFloat32;
  alignas(8) unsigned char value[8] = {};  // SizeOf(type) bytes of the scalar
  const void* pointer = nullptr;
};

// What a reducing collective computes: one of the RedOps, or a sum of
// pre-multiplied inputs. Every RedOp converts to it implicitly.
struct Reduction {
  Reduction(RedOp o) : op(o) {}  // NOLINT(google-explicit-constructor): a RedOp is a Reduction
  // `scalar` is SizeOf(type) bytes, copied now.
  static Reduction PreMulSum(const void* scalar, DataType type);
  // `scalar` is read when each operation runs (see PreMulScalar::kPointer).
  static Reduction PreMulSumAt(const void* scalar, DataType type);

  RedOp op = RedOp::kSum;  // kSum for a pre-multiplied sum
  bool premul = false;
  PreMulScalar scalar;
};

// nccl-tests spelling: "int8", "uint8", "int32", "uint32", "int64", "uint64",
// "half", "float", "double", "bfloat16".
std::string_view Name(DataType t);
// nccl-tests spelling: "sum", "prod", "max", "min", "avg".
std::string_view Name(RedOp op);

}  // namespace loom
