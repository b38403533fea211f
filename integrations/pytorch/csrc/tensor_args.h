// Argument checks and tensor plumbing shared by ProcessGroupLoom's
// operations (process_group_loom.cc, exchange.cc).
#pragma once

#include <c10/util/Exception.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace loom_torch {

inline void CheckTensor(const at::Tensor& t, const char* opname) {
  TORCH_CHECK(t.layout() == at::kStrided, "loom: ", opname, " takes dense (strided) tensors, got ",
              t.layout());
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "loom: ", opname, " got a tensor on ",
              t.device(), "; loom_torch moves CPU and CUDA tensors");
}

// CUDA tensors take the device path (OnDevice), CPU tensors the host one.
inline bool OnCuda(const at::Tensor& t) { return t.device().is_cuda(); }

// Loom reads and writes a device tensor in place, so it must be dense in
// memory, as with the nccl backend.
inline const at::Tensor& Contiguous(const at::Tensor& t, const char* opname) {
  TORCH_CHECK(t.is_contiguous(), "loom: ", opname, ": CUDA tensors must be contiguous");
  return t;
}

inline const at::Tensor& One(const std::vector<at::Tensor>& ts, const char* opname) {
  TORCH_CHECK(ts.size() == 1, "loom: ", opname, " takes one tensor per process, got ", ts.size());
  CheckTensor(ts.front(), opname);
  return ts.front();
}

inline void CheckRank(int64_t r, int size, const char* what, const char* opname) {
  TORCH_CHECK(r >= 0 && r < size, "loom: ", opname, ": ", what, " ", r,
              " is not a rank of this group (0..", size - 1, ")");
}

// Results that land in a contiguous stand-in and are copied into the
// caller's tensor when the op has completed.
struct CopyBacks {
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs;  // (caller's, stand-in)
  // A contiguous tensor holding `t` (t itself when contiguous) whose
  // contents are copied back into t at the end.
  at::Tensor InPlace(const at::Tensor& t) {
    at::Tensor flat = t.contiguous();
    if (!flat.is_same(t)) pairs.emplace_back(t, flat);
    return flat;
  }
  // Same, for an output whose contents before the op do not matter.
  at::Tensor Output(const at::Tensor& t) {
    if (t.is_contiguous()) return t;
    at::Tensor flat = at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
    pairs.emplace_back(t, flat);
    return flat;
  }
  void Run() {
    for (auto& [user, flat] : pairs) user.copy_(flat);
  }
};

// Copies the chunks of `flat` (rows of count elements) into `outs`.
inline void Unpack(const at::Tensor& flat, const std::vector<at::Tensor>& outs) {
  int64_t offset = 0;
  for (const at::Tensor& o : outs) {
    const int64_t n = o.numel();
    o.copy_(flat.narrow(0, offset, n).view(o.sizes()));
    offset += n;
  }
}

inline at::Tensor Concat(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const at::Tensor& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

}  // namespace loom_torch
