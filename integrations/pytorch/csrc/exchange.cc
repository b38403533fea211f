// ProcessGroupLoom's point-to-point side (process_group_loom.h): send and
// recv, batches (coalescing), all-to-all, and the grouped exchanges they
// share, on host memory and on a CUDA stream.
#include "integrations/pytorch/csrc/process_group_loom.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "integrations/pytorch/csrc/tensor_args.h"
#include "integrations/pytorch/csrc/tensor_types.h"

namespace loom_torch {

void ProcessGroupLoom::startCoalescing() {
  std::lock_guard<std::mutex> lock(issue_mu_);
  TORCH_CHECK(!coalescing_, "loom: startCoalescing while already coalescing");
  coalescing_ = true;
}

void ProcessGroupLoom::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& /*reqs*/) {
  std::vector<std::function<loom::Work()>> ops;
  std::vector<c10::intrusive_ptr<LoomWork>> works;
  {
    std::lock_guard<std::mutex> lock(issue_mu_);
    TORCH_CHECK(coalescing_, "loom: endCoalescing without startCoalescing");
    coalescing_ = false;
    ops.swap(coalesced_ops_);
    works.swap(coalesced_works_);
  }
  loom::Status s = loom::Status::Ok();
  if (!ops.empty()) {
    // Inside a group the calls only collect (their Works are complete and
    // OK); GroupEnd issues them as one operation and waits for it.
    s = loom::GroupStart();
    if (s.ok()) {
      std::lock_guard<std::mutex> lock(issue_mu_);
      loom::Status refused = loom::Status::Ok();
      for (auto& issue : ops) {
        // A call refused by loom's argument checks is not in the group.
        loom::Status one = issue().Wait();
        if (!one.ok() && refused.ok()) refused = one;
      }
      s = loom::GroupEnd();
      if (s.ok()) s = refused;
    }
  }
  for (auto& w : works) LoomWork::StartDone(w, s);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::PointToPoint(
    const c10::intrusive_ptr<LoomWork>& work, std::function<loom::Work()> issue) {
  std::lock_guard<std::mutex> lock(issue_mu_);
  if (coalescing_) {
    coalesced_ops_.push_back(std::move(issue));
    coalesced_works_.push_back(work);
    return work;
  }
  return Launch(work, {issue()});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::ExchangeGrouped(
    const c10::intrusive_ptr<LoomWork>& work, const std::vector<at::Tensor>& sends,
    const std::vector<at::Tensor>& recvs) {
  // Own block: a local copy; the others in one group, in which all sends
  // and receives progress together (one by one they could deadlock).
  if (recvs[rank_].numel() > 0) recvs[rank_].copy_(sends[rank_].view(recvs[rank_].sizes()));
  {
    auto lock = LockToIssue(*work);
  }
  loom::Status s = loom::GroupStart();
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(issue_mu_);
    loom::Status first_refused = loom::Status::Ok();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const LoomView sv = MoveView(sends[r]);
      const LoomView rv = MoveView(recvs[r]);
      // Inside a group the calls only collect; one refused by loom's
      // argument checks is not in the group and says why here.
      loom::Status refused = loom::Status::Ok();
      if (sv.count > 0) refused = comm_->SendAsync(sends[r].data_ptr(), sv.count, sv.type, r).Wait();
      if (rv.count > 0 && refused.ok()) {
        refused = comm_->RecvAsync(recvs[r].data_ptr(), rv.count, rv.type, r).Wait();
      }
      if (!refused.ok() && first_refused.ok()) first_refused = refused;
    }
    s = loom::GroupEnd();
    if (s.ok()) s = first_refused;
  }
  LoomWork::StartDone(work, s);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& /*opts*/) {
  CheckTensor(input, "alltoall_base");
  CheckTensor(output, "alltoall_base");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(),
              "loom: alltoall_base needs input and output of one dtype, got ",
              input.scalar_type(), " and ", output.scalar_type());
  if (OnCuda(input)) {
    Contiguous(input, "alltoall_base");
    Contiguous(output, "alltoall_base");
  }
  auto copies = std::make_shared<CopyBacks>();
  at::Tensor src = input.contiguous();
  at::Tensor dst = copies->Output(output);
  // Splits are along dim 0, as rows of `row` elements.
  auto splits = [&](const std::vector<int64_t>& given, const at::Tensor& t, const char* which) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    std::vector<int64_t> s = given;
    if (s.empty()) {
      TORCH_CHECK(rows % size_ == 0, "loom: alltoall_base: without split sizes the ", which,
                  "'s first dimension (", rows, ") must divide by world_size ", size_);
      s.assign(size_, rows / size_);
    }
    TORCH_CHECK(static_cast<int>(s.size()) == size_, "loom: alltoall_base: ", which,
                " split sizes need ", size_, " entries, got ", s.size());
    TORCH_CHECK(std::accumulate(s.begin(), s.end(), int64_t{0}) == rows, "loom: alltoall_base: ",
                which, " split sizes add up to ",
                std::accumulate(s.begin(), s.end(), int64_t{0}), ", not the first dimension ",
                rows);
    return s;
  };
  const std::vector<int64_t> in_s = splits(input_split_sizes, src, "input");
  const std::vector<int64_t> out_s = splits(output_split_sizes, dst, "output");
  const bool even = std::all_of(in_s.begin(), in_s.end(), [&](int64_t x) { return x == in_s[0]; }) &&
                    std::all_of(out_s.begin(), out_s.end(), [&](int64_t x) { return x == in_s[0]; }) &&
                    src.numel() == dst.numel();
  const LoomView v = MoveView(src);
  if (even && OnCuda(src)) {
    const int size = size_;
    return OnDevice(c10d::OpType::ALLTOALL_BASE, "loom:all_to_all", {input}, {output},
                    [this, src, dst, v, size](loom::GpuStream s) {
                      return comm_->AllToAll(src.data_ptr(), dst.data_ptr(), v.count / size, v.type,
                                             s);
                    });
  }
  // Uneven: a block to and from each rank, exchanged in one group.
  std::vector<at::Tensor> sends, recvs;
  if (!even) {
    const int64_t in_row = src.dim() == 0 || src.size(0) == 0 ? 0 : src.numel() / src.size(0);
    const int64_t out_row = dst.dim() == 0 || dst.size(0) == 0 ? 0 : dst.numel() / dst.size(0);
    at::Tensor src_flat = src.reshape({-1});
    at::Tensor dst_flat = dst.view({-1});
    int64_t so = 0, ro = 0;
    for (int r = 0; r < size_; ++r) {
      sends.push_back(src_flat.narrow(0, so, in_s[r] * in_row));
      recvs.push_back(dst_flat.narrow(0, ro, out_s[r] * out_row));
      so += in_s[r] * in_row;
      ro += out_s[r] * out_row;
    }
  }
  if (OnCuda(src)) {
    const int me = rank_;
    return OnDevice(c10d::OpType::ALLTOALL_BASE, "loom:all_to_all", {input}, {output},
                    [this, sends, recvs, me](loom::GpuStream s) {
                      if (recvs[me].numel() > 0) recvs[me].copy_(sends[me].view(recvs[me].sizes()));
                      return ExchangeOnStream(sends, recvs, s);
                    });
  }
  auto work = NewWork(c10d::OpType::ALLTOALL_BASE, "loom:all_to_all", {output});
  work->KeepAlive(src);
  work->KeepAlive(dst);
  if (!copies->pairs.empty()) work->SetFinishStep([copies] { copies->Run(); });
  if (even) {
    auto lock = LockToIssue(*work);
    return Launch(work, {comm_->AllToAllAsync(src.data_ptr(), dst.data_ptr(), v.count / size_,
                                               v.type)});
  }
  return ExchangeGrouped(work, sends, recvs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& /*opts*/) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ &&
                  static_cast<int>(outputs.size()) == size_,
              "loom: alltoall needs ", size_, " input and ", size_, " output tensors, got ",
              inputs.size(), " and ", outputs.size());
  for (const at::Tensor& t : inputs) CheckTensor(t, "alltoall");
  for (const at::Tensor& t : outputs) CheckTensor(t, "alltoall");
  std::vector<at::Tensor> both = inputs;
  both.insert(both.end(), outputs.begin(), outputs.end());
  CheckSameDtype(both, "alltoall");
  if (OnCuda(inputs.front())) {
    for (const at::Tensor& t : both) Contiguous(t, "alltoall");
    const int me = rank_;
    return OnDevice(c10d::OpType::ALLTOALL, "loom:all_to_all", inputs, outputs,
                    [this, inputs, outputs, me](loom::GpuStream s) {
                      if (outputs[me].numel() > 0) {
                        outputs[me].copy_(inputs[me].view(outputs[me].sizes()));
                      }
                      return ExchangeOnStream(inputs, outputs, s);
                    });
  }
  auto copies = std::make_shared<CopyBacks>();
  std::vector<at::Tensor> sends, recvs;
  for (const at::Tensor& t : inputs) sends.push_back(t.contiguous());
  for (const at::Tensor& t : outputs) recvs.push_back(copies->Output(t));
  auto work = NewWork(c10d::OpType::ALLTOALL, "loom:all_to_all", outputs);
  for (const at::Tensor& t : sends) work->KeepAlive(t);
  for (const at::Tensor& t : recvs) work->KeepAlive(t);
  const bool even = std::all_of(both.begin(), both.end(),
                                [&](const at::Tensor& t) { return t.numel() == both[0].numel(); });
  if (even) {
    at::Tensor src = Concat(sends);
    at::Tensor flat = at::empty_like(src);
    work->KeepAlive(src);
    work->KeepAlive(flat);
    work->SetFinishStep([flat, outputs] { Unpack(flat, outputs); });
    const LoomView v = MoveView(sends[0]);
    auto lock = LockToIssue(*work);
    return Launch(work,
                  {comm_->AllToAllAsync(src.data_ptr(), flat.data_ptr(), v.count, v.type)});
  }
  if (!copies->pairs.empty()) work->SetFinishStep([copies] { copies->Run(); });
  return ExchangeGrouped(work, sends, recvs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::send(std::vector<at::Tensor>& tensors,
                                                      int dst_rank, int /*tag*/) {
  const at::Tensor& t = One(tensors, "send");
  CheckRank(dst_rank, size_, "destination", "send");
  if (OnCuda(t)) {
    NotBatched("send");
    const at::Tensor d = Contiguous(t, "send");
    const LoomView v = MoveView(d);
    return OnDevice(c10d::OpType::SEND, "loom:send", tensors, {},
                    [this, d, v, dst_rank](loom::GpuStream s) {
                      return comm_->Send(d.data_ptr(), v.count, v.type, dst_rank, s);
                    });
  }
  at::Tensor src = t.contiguous();
  const LoomView v = MoveView(src);
  auto work = NewWork(c10d::OpType::SEND, "loom:send", {});
  work->KeepAlive(src);
  return PointToPoint(work, [this, src, v, dst_rank] {
    return comm_->SendAsync(src.data_ptr(), v.count, v.type, dst_rank);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::recv(std::vector<at::Tensor>& tensors,
                                                      int src_rank, int /*tag*/) {
  const at::Tensor& t = One(tensors, "recv");
  CheckRank(src_rank, size_, "source", "recv");
  if (OnCuda(t)) {
    NotBatched("recv");
    const at::Tensor d = Contiguous(t, "recv");
    const LoomView v = MoveView(d);
    return OnDevice(c10d::OpType::RECV, "loom:recv", {}, tensors,
                    [this, d, v, src_rank](loom::GpuStream s) {
                      return comm_->Recv(d.data_ptr(), v.count, v.type, src_rank, s);
                    });
  }
  auto copies = std::make_shared<CopyBacks>();
  at::Tensor dst = copies->Output(t);
  const LoomView v = MoveView(dst);
  auto work = NewWork(c10d::OpType::RECV, "loom:recv", tensors);
  work->KeepAlive(dst);
  if (!copies->pairs.empty()) work->SetFinishStep([copies] { copies->Run(); });
  return PointToPoint(work, [this, dst, v, src_rank] {
    return comm_->RecvAsync(dst.data_ptr(), v.count, v.type, src_rank);
  });
}

void ProcessGroupLoom::NotBatched(const char* opname) {
  std::lock_guard<std::mutex> lock(issue_mu_);
  TORCH_CHECK(!coalescing_, "loom: ", opname, " of a CUDA tensor inside batch_isend_irecv: "
              "batches take CPU tensors; issue device sends and receives one by one");
}

loom::Status ProcessGroupLoom::ExchangeOnStream(const std::vector<at::Tensor>& sends,
                                                const std::vector<at::Tensor>& recvs,
                                                loom::GpuStream stream) {
  if (loom::Status s = loom::GroupStart(); !s.ok()) return s;
  loom::Status first_refused = loom::Status::Ok();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    // Inside a group the calls only collect; one refused is not in the group.
    loom::Status refused = loom::Status::Ok();
    if (sends[r].defined() && sends[r].numel() > 0) {
      const LoomView v = MoveView(sends[r]);
      refused = comm_->Send(sends[r].data_ptr(), v.count, v.type, r, stream);
    }
    if (refused.ok() && recvs[r].defined() && recvs[r].numel() > 0) {
      const LoomView v = MoveView(recvs[r]);
      refused = comm_->Recv(recvs[r].data_ptr(), v.count, v.type, r, stream);
    }
    if (!refused.ok() && first_refused.ok()) first_refused = refused;
  }
  const loom::Status s = loom::GroupEnd();
  return s.ok() ? first_refused : s;
}

#if !LOOM_TORCH_CUDA
c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::OnDevice(c10d::OpType /*type*/, const char* title,
                                                          const std::vector<at::Tensor>& inputs,
                                                          std::vector<at::Tensor> outputs,
                                                          const Enqueue& /*enqueue*/) {
  const at::Device device = !inputs.empty() ? inputs.front().device() : outputs.front().device();
  TORCH_CHECK(false, title, " got a tensor on ", device,
              "; this loom_torch was built against a PyTorch without CUDA, so it moves CPU "
              "tensors only (rebuild it against a CUDA-enabled PyTorch, or move the tensor to "
              "the CPU)");
}
#endif

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::recvAnysource(std::vector<at::Tensor>& /*t*/,
                                                               int /*tag*/) {
  TORCH_CHECK(false, "loom: recv from any source is not supported: loom matches every receive "
              "to one named peer; pass src= to recv/irecv");
}

}  // namespace loom_torch
