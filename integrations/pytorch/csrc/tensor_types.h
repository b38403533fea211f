// How torch tensors and reduce ops map onto loom's datatypes and reductions.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <ATen/ATen.h>

#include <cstddef>
#include <string>

#include "loom/loom.hpp"

namespace loom_torch {

// A tensor's bytes as loom sees them: a datatype and an element count.
struct LoomView {
  loom::DataType type;
  size_t count;
};

// For operations that only move bytes (broadcast, gathers, all-to-all,
// send/recv): the tensor's own loom type, else its bytes as uint8 (bool,
// int16, complex), which moves them exactly.
LoomView MoveView(const at::Tensor& t);

// For reductions: the loom datatype and reduction computing `op` on `t`
// exactly, or a c10::Error naming the dtype and op and what is accepted.
// bool reduces as uint8 0/1 (SUM, MAX, BOR: max; PRODUCT, MIN, BAND: min);
// complex SUM/AVG/PREMUL_SUM with a real factor reduce as pairs of reals.
struct LoomReduction {
  LoomView view;
  loom::Reduction op;
};
LoomReduction ReductionFor(const at::Tensor& t, const c10d::ReduceOp& op, const char* opname);

// Every tensor of `ts` has the dtype of the first; else an error naming
// `opname`.
void CheckSameDtype(const std::vector<at::Tensor>& ts, const char* opname);

}  // namespace loom_torch
