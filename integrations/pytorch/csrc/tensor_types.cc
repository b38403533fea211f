// Torch dtypes and reduce ops to loom's (tensor_types.h).
#include "integrations/pytorch/csrc/tensor_types.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <optional>

namespace loom_torch {
namespace {

std::optional<loom::DataType> NativeType(at::ScalarType t) {
  switch (t) {
    case at::kChar: return loom::DataType::kInt8;
    case at::kByte: return loom::DataType::kUint8;
    case at::kInt: return loom::DataType::kInt32;
    case at::kLong: return loom::DataType::kInt64;
    case at::kHalf: return loom::DataType::kFloat16;
    case at::kFloat: return loom::DataType::kFloat32;
    case at::kDouble: return loom::DataType::kFloat64;
    case at::kBFloat16: return loom::DataType::kBfloat16;
    default: return std::nullopt;
  }
}

const char* OpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

// The PREMUL_SUM factor converted to `type` (the tensor's own dtype, as the
// inputs are multiplied in it).
loom::Reduction PreMulSum(const c10d::ReduceOp& op, at::ScalarType dtype, loom::DataType type,
                          const char* opname) {
  auto* supplement = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(supplement != nullptr, "loom: ", opname,
              ": PREMUL_SUM needs its factor (make the op with "
              "torch.distributed._make_nccl_premul_sum)");
  at::Tensor factor;
  if (!supplement->tensor_factors.empty()) {
    factor = supplement->tensor_factors.front().to(at::kCPU, dtype).reshape({-1});
    TORCH_CHECK(factor.numel() == 1, "loom: ", opname,
                ": PREMUL_SUM's factor tensor must hold one element, got ", factor.numel());
  } else {
    factor = at::scalar_tensor(supplement->double_factor, at::TensorOptions().dtype(dtype));
  }
  factor = factor.contiguous();
  return loom::Reduction::PreMulSum(factor.data_ptr(), type);
}

}  // namespace

LoomView MoveView(const at::Tensor& t) {
  if (auto type = NativeType(t.scalar_type())) return {*type, static_cast<size_t>(t.numel())};
  return {loom::DataType::kUint8, static_cast<size_t>(t.numel()) * t.element_size()};
}

LoomReduction ReductionFor(const at::Tensor& t, const c10d::ReduceOp& op, const char* opname) {
  const auto kind = static_cast<c10d::ReduceOp::RedOpType>(op.op_);
  const size_t n = static_cast<size_t>(t.numel());
  const at::ScalarType dtype = t.scalar_type();
  if (dtype == at::kBool) {
    switch (kind) {
      case c10d::ReduceOp::SUM:
      case c10d::ReduceOp::MAX:
      case c10d::ReduceOp::BOR: return {{loom::DataType::kUint8, n}, loom::RedOp::kMax};
      case c10d::ReduceOp::PRODUCT:
      case c10d::ReduceOp::MIN:
      case c10d::ReduceOp::BAND: return {{loom::DataType::kUint8, n}, loom::RedOp::kMin};
      default:
        TORCH_CHECK(false, "loom: ", opname, " on bool tensors supports SUM, PRODUCT, MIN, MAX, "
                    "BAND and BOR, not ", OpName(kind));
    }
  }
  if (dtype == at::kComplexFloat || dtype == at::kComplexDouble) {
    const loom::DataType real =
        dtype == at::kComplexFloat ? loom::DataType::kFloat32 : loom::DataType::kFloat64;
    switch (kind) {
      case c10d::ReduceOp::SUM: return {{real, 2 * n}, loom::RedOp::kSum};
      case c10d::ReduceOp::AVG: return {{real, 2 * n}, loom::RedOp::kAvg};
      default:
        TORCH_CHECK(false, "loom: ", opname, " on complex tensors supports SUM and AVG, not ",
                    OpName(kind));
    }
  }
  const auto type = NativeType(dtype);
  TORCH_CHECK(type.has_value(), "loom: ", opname, " cannot reduce ", dtype,
              " tensors; loom reduces float32, float64, float16, bfloat16, int8, uint8, int32, "
              "int64 (and bool, complex for some ops)");
  switch (kind) {
    case c10d::ReduceOp::SUM: return {{*type, n}, loom::RedOp::kSum};
    case c10d::ReduceOp::AVG: return {{*type, n}, loom::RedOp::kAvg};
    case c10d::ReduceOp::PRODUCT: return {{*type, n}, loom::RedOp::kProd};
    case c10d::ReduceOp::MIN: return {{*type, n}, loom::RedOp::kMin};
    case c10d::ReduceOp::MAX: return {{*type, n}, loom::RedOp::kMax};
    case c10d::ReduceOp::PREMUL_SUM: return {{*type, n}, PreMulSum(op, dtype, *type, opname)};
    default:
      TORCH_CHECK(false, "loom: ", opname, " does not support ReduceOp.", OpName(kind),
                  " (loom has no bitwise reductions except on bool); accepted: SUM, AVG, "
                  "PRODUCT, MIN, MAX, PREMUL_SUM");
  }
}

void CheckSameDtype(const std::vector<at::Tensor>& ts, const char* opname) {
  for (const at::Tensor& t : ts) {
    TORCH_CHECK(t.scalar_type() == ts.front().scalar_type(), "loom: ", opname,
                " needs tensors of one dtype, got ", ts.front().scalar_type(), " and ",
                t.scalar_type());
  }
}

}  // namespace loom_torch
