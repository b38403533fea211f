// ProcessGroupLoom (process_group_loom.h): setup, and torch's collectives as
// loom operations (point-to-point and all-to-all: exchange.cc; CUDA tensors:
// device_work.cc).
#include "integrations/pytorch/csrc/process_group_loom.h"

#include <Python.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

#include "integrations/pytorch/csrc/tensor_args.h"
#include "integrations/pytorch/csrc/tensor_types.h"

namespace loom_torch {
namespace {

// The store key under which rank 0 publishes the group's loom::UniqueId
// (the store torch hands over is already prefixed by the group's name).
constexpr const char* kUniqueIdKey = "loom_unique_id";

void Check(const loom::Status& s, const char* what) {
  TORCH_CHECK(s.ok(), "loom: ", what, ": ", s.ToString());
}

}  // namespace

ProcessGroupLoom::ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                   int size, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size),
      store_(store),
      timeout_(timeout),
      completer_(std::make_unique<Completer>()) {
  TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "loom: rank ", rank,
              " is not within world_size ", size);
  loom::UniqueId id;
  if (rank == 0) {
    auto created = loom::UniqueId::Create();
    Check(created.status(), "creating the group's UniqueId on rank 0");
    id = *created;
    store->set(kUniqueIdKey, std::vector<uint8_t>(id.bytes.begin(), id.bytes.end()));
  } else {
    std::vector<uint8_t> bytes = store->get(kUniqueIdKey);  // waits up to the store's timeout
    TORCH_CHECK(bytes.size() == id.bytes.size(), "loom: the store's ", kUniqueIdKey, " holds ",
                bytes.size(), " bytes, not a loom UniqueId (", id.bytes.size(),
                "); is another backend using the same store prefix?");
    std::copy(bytes.begin(), bytes.end(), id.bytes.begin());
  }
  loom::CommConfig config;
  config.timeout = timeout;
  config.name = "torch";
  auto comm = loom::Communicator::Create(id, rank, size, config);
  TORCH_CHECK(comm.ok(), "loom: creating the communicator for rank ", rank, " of world_size ", size,
              ": ", comm.status().ToString());
  comm_ = std::move(*comm);
  init();
}

ProcessGroupLoom::~ProcessGroupLoom() {
  // The last reference often dies under the GIL (Python dropping the group),
  // while a Completer thread or loom's worker may be freeing a tensor that
  // Python saw, which takes the GIL: waiting for them while holding it
  // would deadlock.
  PyThreadState* saved = nullptr;
  if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) saved = PyEval_SaveThread();
  comm_.reset();
  completer_.reset();
  if (saved != nullptr) PyEval_RestoreThread(saved);
}

void ProcessGroupLoom::setSequenceNumberForGroup() { sequenceNum_ = c10d::SequenceNum(0); }

uint64_t ProcessGroupLoom::getSequenceNumberForGroup() {
  return sequenceNum_.has_value() ? sequenceNum_->get() : 0;
}

c10::intrusive_ptr<LoomWork> ProcessGroupLoom::NewWork(c10d::OpType type, const char* title,
                                                       std::vector<at::Tensor> outputs) {
  if (sequenceNum_.has_value()) sequenceNum_->increment();
  return c10::make_intrusive<LoomWork>(getRank(), type, title, std::move(outputs));
}

std::unique_lock<std::mutex> ProcessGroupLoom::LockToIssue(const std::string& opname) {
  std::unique_lock<std::mutex> lock(issue_mu_);
  TORCH_CHECK(!coalescing_, "loom: ", opname,
              " inside batch_isend_irecv / a coalescing block; only send and recv can be batched");
  return lock;
}

std::unique_lock<std::mutex> ProcessGroupLoom::LockToIssue(LoomWork& work) {
  return LockToIssue(c10d::opTypeToString(work.retrieveOpType()));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::Launch(const c10::intrusive_ptr<LoomWork>& work,
                                                        std::vector<loom::Work> ops) {
  LoomWork::Start(work, std::move(ops), completer_.get());
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = One(tensors, "broadcast");
  CheckRank(opts.rootRank, size_, "root", "broadcast");
  TORCH_CHECK(opts.rootTensor == 0, "loom: broadcast: rootTensor must be 0 (one tensor a process)");
  if (OnCuda(t)) {
    const at::Tensor d = Contiguous(t, "broadcast");
    const LoomView v = MoveView(d);
    const int root = static_cast<int>(opts.rootRank);
    return OnDevice(c10d::OpType::BROADCAST, "loom:broadcast", tensors, tensors,
                    [this, d, v, root](loom::GpuStream s) {
                      return comm_->Broadcast(d.data_ptr(), d.data_ptr(), v.count, v.type, root, s);
                    });
  }
  auto copies = std::make_shared<CopyBacks>();
  at::Tensor flat = copies->InPlace(t);
  const LoomView v = MoveView(flat);
  auto work = NewWork(c10d::OpType::BROADCAST, "loom:broadcast", tensors);
  work->KeepAlive(flat);
  if (!copies->pairs.empty()) work->SetFinishStep([copies] { copies->Run(); });
  auto lock = LockToIssue(*work);
  return Launch(work, {comm_->BroadcastAsync(flat.data_ptr(), flat.data_ptr(), v.count, v.type,
                                              static_cast<int>(opts.rootRank))});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "loom: allreduce takes one tensor per process, got ",
              tensors.size());
  if (tensors.front().layout() == at::kSparse) return SparseAllreduce(tensors.front(), opts);
  const at::Tensor& t = One(tensors, "allreduce");
  const LoomReduction r = ReductionFor(t, opts.reduceOp, "allreduce");
  if (OnCuda(t)) {
    const at::Tensor d = Contiguous(t, "allreduce");
    return OnDevice(c10d::OpType::ALLREDUCE, "loom:all_reduce", tensors, tensors,
                    [this, d, r](loom::GpuStream s) {
                      return comm_->AllReduce(d.data_ptr(), d.data_ptr(), r.view.count,
                                              r.view.type, r.op, s);
                    });
  }
  auto copies = std::make_shared<CopyBacks>();
  at::Tensor flat = copies->InPlace(t);
  auto work = NewWork(c10d::OpType::ALLREDUCE, "loom:all_reduce", tensors);
  work->KeepAlive(flat);
  if (!copies->pairs.empty()) work->SetFinishStep([copies] { copies->Run(); });
  auto lock = LockToIssue(*work);
  return Launch(work, {comm_->AllReduceAsync(flat.data_ptr(), flat.data_ptr(), r.view.count,
                                              r.view.type, r.op)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "loom: allreduce_coalesced needs at least one tensor");
  for (const at::Tensor& t : tensors) CheckTensor(t, "allreduce_coalesced");
  CheckSameDtype(tensors, "allreduce_coalesced");
  if (OnCuda(tensors.front())) {
    (void)ReductionFor(tensors.front(), opts.reduceOp, "allreduce_coalesced");  // refuses here
    const c10d::ReduceOp op = opts.reduceOp;
    return OnDevice(c10d::OpType::ALLREDUCE_COALESCED, "loom:all_reduce_coalesced", tensors, tensors,
                    [this, tensors, op](loom::GpuStream s) {
                      // The concatenation and the copies back run on the current stream too.
                      at::Tensor flat = Concat(tensors);
                      const LoomReduction r = ReductionFor(flat, op, "allreduce_coalesced");
                      const loom::Status st = comm_->AllReduce(flat.data_ptr(), flat.data_ptr(),
                                                               r.view.count, r.view.type, r.op, s);
                      if (st.ok()) Unpack(flat, tensors);
                      return st;
                    });
  }
  at::Tensor flat = Concat(tensors);
  const LoomReduction r = ReductionFor(flat, opts.reduceOp, "allreduce_coalesced");
  auto work = NewWork(c10d::OpType::ALLREDUCE_COALESCED, "loom:all_reduce_coalesced", tensors);
  work->KeepAlive(flat);
  work->SetFinishStep([flat, tensors] { Unpack(flat, tensors); });
  auto lock = LockToIssue(*work);
  return Launch(work, {comm_->AllReduceAsync(flat.data_ptr(), flat.data_ptr(), r.view.count,
                                              r.view.type, r.op)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const at::Tensor& t = One(tensors, "reduce");
  CheckRank(opts.rootRank, size_, "root", "reduce");
  TORCH_CHECK(opts.rootTensor == 0, "loom: reduce: rootTensor must be 0 (one tensor a process)");
  const LoomReduction r = ReductionFor(t, opts.reduceOp, "reduce");
  if (OnCuda(t)) {
    const at::Tensor d = Contiguous(t, "reduce");
    const int root = static_cast<int>(opts.rootRank);
    return OnDevice(c10d::OpType::REDUCE, "loom:reduce", tensors, tensors,
                    [this, d, r, root](loom::GpuStream s) {
                      return comm_->Reduce(d.data_ptr(), d.data_ptr(), r.view.count, r.view.type,
                                           r.op, root, s);
                    });
  }
  auto copies = std::make_shared<CopyBacks>();
  at::Tensor flat = copies->InPlace(t);
  auto work = NewWork(c10d::OpType::REDUCE, "loom:reduce", tensors);
  work->KeepAlive(flat);
  if (!copies->pairs.empty()) work->SetFinishStep([copies] { copies->Run(); });
  auto lock = LockToIssue(*work);
  return Launch(work, {comm_->ReduceAsync(flat.data_ptr(), flat.data_ptr(), r.view.count,
                                           r.view.type, r.op, static_cast<int>(opts.rootRank))});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  const at::Tensor& in = One(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "loom: allgather takes one output list per process, got ",
              outputs.size());
  std::vector<at::Tensor>& outs = outputs.front();
  TORCH_CHECK(static_cast<int>(outs.size()) == size_, "loom: allgather needs ", size_,
              " output tensors (the group's size), got ", outs.size());
  for (const at::Tensor& o : outs) {
    CheckTensor(o, "allgather");
    TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                "loom: allgather: every output must have the input's numel and dtype (",
                in.numel(), ", ", in.scalar_type(), "), got ", o.numel(), ", ", o.scalar_type());
  }
  if (OnCuda(in)) {
    const at::Tensor d = Contiguous(in, "allgather");
    const int size = size_;
    return OnDevice(c10d::OpType::ALLGATHER, "loom:all_gather", inputs, outs,
                    [this, d, outs, size](loom::GpuStream s) {
                      at::Tensor flat = at::empty({static_cast<int64_t>(size) * d.numel()},
                                                  d.options());
                      const LoomView v = MoveView(d);
                      const loom::Status st =
                          comm_->AllGather(d.data_ptr(), flat.data_ptr(), v.count, v.type, s);
                      if (st.ok()) Unpack(flat, outs);
                      return st;
                    });
  }
  at::Tensor src = in.contiguous();
  at::Tensor flat = at::empty({static_cast<int64_t>(size_) * in.numel()},
                              in.options().memory_format(at::MemoryFormat::Contiguous));
  const LoomView v = MoveView(src);
  auto work = NewWork(c10d::OpType::ALLGATHER, "loom:all_gather", outs);
  work->KeepAlive(src);
  work->KeepAlive(flat);
  work->SetFinishStep([flat, outs] { Unpack(flat, outs); });
  auto lock = LockToIssue(*work);
  return Launch(work, {comm_->AllGatherAsync(src.data_ptr(), flat.data_ptr(), v.count, v.type)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& /*opts*/) {
  CheckTensor(input, "_allgather_base");
  CheckTensor(output, "_allgather_base");
  TORCH_CHECK(output.numel() == input.numel() * size_ &&
                  output.scalar_type() == input.scalar_type(),
              "loom: _allgather_base: the output must hold world_size (", size_,
              ") times the input's elements of its dtype; got input ", input.numel(), " ",
              input.scalar_type(), ", output ", output.numel(), " ", output.scalar_type());
  if (OnCuda(input)) {
    const at::Tensor in = Contiguous(input, "_allgather_base");
    const at::Tensor out = Contiguous(output, "_allgather_base");
    const LoomView v = MoveView(in);
    return OnDevice(c10d::OpType::_ALLGATHER_BASE, "loom:_all_gather_base", {input}, {output},
                    [this, in, out, v](loom::GpuStream s) {
                      return comm_->AllGather(in.data_ptr(), out.data_ptr(), v.count, v.type, s);
                    });
  }
  auto copies = std::make_shared<CopyBacks>();
  at::Tensor src = input.contiguous();
  at::Tensor dst = copies->Output(output);
  const LoomView v = MoveView(src);
  auto work = NewWork(c10d::OpType::_ALLGATHER_BASE, "loom:_all_gather_base", {output});
  work->KeepAlive(src);
  work->KeepAlive(dst);
  if (!copies->pairs.empty()) work->SetFinishStep([copies] { copies->Run(); });
  auto lock = LockToIssue(*work);
  return Launch(work, {comm_->AllGatherAsync(src.data_ptr(), dst.data_ptr(), v.count, v.type)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  TORCH_CHECK(!inputs.empty(), "loom: allgather_coalesced needs at least one input tensor");
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_, "loom: allgather_coalesced needs ",
              size_, " output lists (the group's size), got ", outputs.size());
  for (const at::Tensor& t : inputs) CheckTensor(t, "allgather_coalesced");
  CheckSameDtype(inputs, "allgather_coalesced");
  std::vector<at::Tensor> outs;
  for (const auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "loom: allgather_coalesced: each output list needs ",
                inputs.size(), " tensors (one per input), got ", list.size());
    for (size_t j = 0; j < list.size(); ++j) {
      CheckTensor(list[j], "allgather_coalesced");
      TORCH_CHECK(list[j].numel() == inputs[j].numel() &&
                      list[j].scalar_type() == inputs[j].scalar_type(),
                  "loom: allgather_coalesced: output ", j, " must match input ", j,
                  " in numel and dtype");
      outs.push_back(list[j]);
    }
  }
  if (OnCuda(inputs.front())) {
    const int size = size_;
    return OnDevice(c10d::OpType::ALLGATHER_COALESCED, "loom:all_gather_coalesced", inputs, outs,
                    [this, inputs, outs, size](loom::GpuStream s) {
                      at::Tensor src = Concat(inputs);
                      at::Tensor flat = at::empty({src.numel() * size}, src.options());
                      const LoomView v = MoveView(src);
                      const loom::Status st =
                          comm_->AllGather(src.data_ptr(), flat.data_ptr(), v.count, v.type, s);
                      if (st.ok()) Unpack(flat, outs);
                      return st;
                    });
  }
  at::Tensor src = Concat(inputs);
  at::Tensor flat = at::empty({src.numel() * size_}, src.options());
  const LoomView v = MoveView(src);
  auto work = NewWork(c10d::OpType::ALLGATHER_COALESCED, "loom:all_gather_coalesced", outs);
  work->KeepAlive(src);
  work->KeepAlive(flat);
  work->SetFinishStep([flat, outs] { Unpack(flat, outs); });
  auto lock = LockToIssue(*work);
  return Launch(work, {comm_->AllGatherAsync(src.data_ptr(), flat.data_ptr(), v.count, v.type)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const at::Tensor& in = One(inputs, "gather");
  CheckRank(opts.rootRank, size_, "root", "gather");
  const int root = static_cast<int>(opts.rootRank);
  if (OnCuda(in)) {
    const at::Tensor d = Contiguous(in, "gather");
    std::vector<at::Tensor> sends(size_), recvs(size_);
    std::vector<at::Tensor> outs;
    if (rank_ != root) {
      TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs.front().empty()),
                  "loom: gather: only the root (", root, ") passes output tensors");
      sends[root] = d;
    } else {
      TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs.front().size()) == size_,
                  "loom: gather: the root needs one list of ", size_, " output tensors");
      outs = outputs.front();
      for (int r = 0; r < size_; ++r) {
        TORCH_CHECK(outs[r].numel() == d.numel() && outs[r].scalar_type() == d.scalar_type(),
                    "loom: gather: every output must have the input's numel and dtype");
        if (r != root) recvs[r] = Contiguous(outs[r], "gather");
      }
    }
    return OnDevice(c10d::OpType::GATHER, "loom:gather", inputs, outs,
                    [this, d, sends, recvs, outs, root](loom::GpuStream s) {
                      if (!outs.empty()) outs[root].copy_(d.view(outs[root].sizes()));
                      return ExchangeOnStream(sends, recvs, s);
                    });
  }
  at::Tensor src = in.contiguous();
  const LoomView v = MoveView(src);
  if (rank_ != root) {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs.front().empty()),
                "loom: gather: only the root (", root, ") passes output tensors");
    auto work = NewWork(c10d::OpType::GATHER, "loom:gather", {});
    work->KeepAlive(src);
    auto lock = LockToIssue(*work);
    return Launch(work, {comm_->SendAsync(src.data_ptr(), v.count, v.type, root)});
  }
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs.front().size()) == size_,
              "loom: gather: the root needs one list of ", size_, " output tensors");
  std::vector<at::Tensor>& outs = outputs.front();
  auto copies = std::make_shared<CopyBacks>();
  std::vector<at::Tensor> dsts;
  for (const at::Tensor& o : outs) {
    CheckTensor(o, "gather");
    TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                "loom: gather: every output must have the input's numel and dtype");
    dsts.push_back(copies->Output(o));
  }
  dsts[root].copy_(src.view(dsts[root].sizes()));
  auto work = NewWork(c10d::OpType::GATHER, "loom:gather", outs);
  for (const at::Tensor& d : dsts) work->KeepAlive(d);
  work->KeepAlive(src);
  if (!copies->pairs.empty()) work->SetFinishStep([copies] { copies->Run(); });
  // Receives in rank order: each sender sends once, so none can deadlock.
  std::vector<loom::Work> ops;
  auto lock = LockToIssue(*work);
  for (int r = 0; r < size_; ++r) {
    if (r != root) ops.push_back(comm_->RecvAsync(dsts[r].data_ptr(), v.count, v.type, r));
  }
  return Launch(work, std::move(ops));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const at::Tensor& out = One(outputs, "scatter");
  CheckRank(opts.rootRank, size_, "root", "scatter");
  const int root = static_cast<int>(opts.rootRank);
  if (OnCuda(out)) {
    const at::Tensor d = Contiguous(out, "scatter");
    std::vector<at::Tensor> sends(size_), recvs(size_);
    std::vector<at::Tensor> ins;
    if (rank_ != root) {
      TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs.front().empty()),
                  "loom: scatter: only the root (", root, ") passes input tensors");
      recvs[root] = d;
    } else {
      TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs.front().size()) == size_,
                  "loom: scatter: the root needs one list of ", size_, " input tensors");
      ins = inputs.front();
      for (int r = 0; r < size_; ++r) {
        TORCH_CHECK(ins[r].numel() == d.numel() && ins[r].scalar_type() == d.scalar_type(),
                    "loom: scatter: every input must have the output's numel and dtype");
        if (r != root) sends[r] = Contiguous(ins[r], "scatter");
      }
    }
    ins.push_back(d);
    return OnDevice(c10d::OpType::SCATTER, "loom:scatter", ins, outputs,
                    [this, d, sends, recvs, ins, root](loom::GpuStream s) {
                      if (ins.size() > 1) d.copy_(ins[root].view(d.sizes()));
                      return ExchangeOnStream(sends, recvs, s);
                    });
  }
  auto copies = std::make_shared<CopyBacks>();
  at::Tensor dst = copies->Output(out);
  const LoomView v = MoveView(dst);
  auto work = NewWork(c10d::OpType::SCATTER, "loom:scatter", outputs);
  work->KeepAlive(dst);
  if (!copies->pairs.empty()) work->SetFinishStep([copies] { copies->Run(); });
  if (rank_ != root) {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs.front().empty()),
                "loom: scatter: only the root (", root, ") passes input tensors");
    auto lock = LockToIssue(*work);
    return Launch(work, {comm_->RecvAsync(dst.data_ptr(), v.count, v.type, root)});
  }
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs.front().size()) == size_,
              "loom: scatter: the root needs one list of ", size_, " input tensors");
  std::vector<at::Tensor> srcs;
  for (const at::Tensor& i : inputs.front()) {
    CheckTensor(i, "scatter");
    TORCH_CHECK(i.numel() == out.numel() && i.scalar_type() == out.scalar_type(),
                "loom: scatter: every input must have the output's numel and dtype");
    srcs.push_back(i.contiguous());
    work->KeepAlive(srcs.back());
  }
  dst.copy_(srcs[root].view(dst.sizes()));
  std::vector<loom::Work> ops;
  auto lock = LockToIssue(*work);
  for (int r = 0; r < size_; ++r) {
    if (r != root) ops.push_back(comm_->SendAsync(srcs[r].data_ptr(), v.count, v.type, r));
  }
  return Launch(work, std::move(ops));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = One(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs.front().size()) == size_,
              "loom: reduce_scatter needs one list of ", size_, " input tensors");
  for (const at::Tensor& i : inputs.front()) {
    CheckTensor(i, "reduce_scatter");
    TORCH_CHECK(i.numel() == out.numel() && i.scalar_type() == out.scalar_type(),
                "loom: reduce_scatter: every input must have the output's numel and dtype");
  }
  if (OnCuda(out)) {
    const at::Tensor d = Contiguous(out, "reduce_scatter");
    const LoomReduction r = ReductionFor(d, opts.reduceOp, "reduce_scatter");
    const std::vector<at::Tensor> ins = inputs.front();
    return OnDevice(c10d::OpType::REDUCE_SCATTER, "loom:reduce_scatter", ins, outputs,
                    [this, d, r, ins](loom::GpuStream s) {
                      at::Tensor src = Concat(ins);
                      return comm_->ReduceScatter(src.data_ptr(), d.data_ptr(), r.view.count,
                                                  r.view.type, r.op, s);
                    });
  }
  at::Tensor src = Concat(inputs.front());
  const LoomReduction r = ReductionFor(out, opts.reduceOp, "reduce_scatter");
  auto copies = std::make_shared<CopyBacks>();
  at::Tensor dst = copies->Output(out);
  auto work = NewWork(c10d::OpType::REDUCE_SCATTER, "loom:reduce_scatter", outputs);
  work->KeepAlive(src);
  work->KeepAlive(dst);
  if (!copies->pairs.empty()) work->SetFinishStep([copies] { copies->Run(); });
  auto lock = LockToIssue(*work);
  return Launch(work, {comm_->ReduceScatterAsync(src.data_ptr(), dst.data_ptr(), r.view.count,
                                                  r.view.type, r.op)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  CheckTensor(input, "_reduce_scatter_base");
  CheckTensor(output, "_reduce_scatter_base");
  TORCH_CHECK(input.numel() == output.numel() * size_ &&
                  input.scalar_type() == output.scalar_type(),
              "loom: _reduce_scatter_base: the input must hold world_size (", size_,
              ") times the output's elements of its dtype; got input ", input.numel(),
              ", output ", output.numel());
  const LoomReduction r = ReductionFor(output, opts.reduceOp, "_reduce_scatter_base");
  if (OnCuda(output)) {
    const at::Tensor in = Contiguous(input, "_reduce_scatter_base");
    const at::Tensor out = Contiguous(output, "_reduce_scatter_base");
    return OnDevice(c10d::OpType::_REDUCE_SCATTER_BASE, "loom:_reduce_scatter_base", {input},
                    {output}, [this, in, out, r](loom::GpuStream s) {
                      return comm_->ReduceScatter(in.data_ptr(), out.data_ptr(), r.view.count,
                                                  r.view.type, r.op, s);
                    });
  }
  auto copies = std::make_shared<CopyBacks>();
  at::Tensor src = input.contiguous();
  at::Tensor dst = copies->Output(output);
  auto work = NewWork(c10d::OpType::_REDUCE_SCATTER_BASE, "loom:_reduce_scatter_base", {output});
  work->KeepAlive(src);
  work->KeepAlive(dst);
  if (!copies->pairs.empty()) work->SetFinishStep([copies] { copies->Run(); });
  auto lock = LockToIssue(*work);
  return Launch(work, {comm_->ReduceScatterAsync(src.data_ptr(), dst.data_ptr(), r.view.count,
                                                  r.view.type, r.op)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::barrier(const c10d::BarrierOptions& /*opts*/) {
  auto work = NewWork(c10d::OpType::BARRIER, "loom:barrier", {});
  auto lock = LockToIssue(*work);
  return Launch(work, {comm_->BarrierAsync()});
}

// Sparse COO all-reduce (DDP with sparse gradients): every rank's indices
// and values are gathered (padded to the largest nnz), summed as one sparse
// tensor and coalesced. Runs with blocking loom calls on the caller's
// thread, so the returned Work is already complete.
c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::SparseAllreduce(
    at::Tensor& tensor, const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensor.device().is_cpu(), "loom: sparse allreduce takes CPU tensors");
  TORCH_CHECK(static_cast<c10d::ReduceOp::RedOpType>(opts.reduceOp.op_) == c10d::ReduceOp::SUM,
              "loom: sparse allreduce supports ReduceOp.SUM only");
  auto work = NewWork(c10d::OpType::ALLREDUCE, "loom:sparse_all_reduce", {tensor});
  loom::Status s;
  try {
    at::Tensor in = tensor.coalesce();
    at::Tensor indices = in._indices().contiguous();
    at::Tensor values = in._values().contiguous();
    const int64_t nnz = in._nnz();
    auto lock = LockToIssue("sparse allreduce");
    at::Tensor counts = at::empty({size_}, at::kLong);
    s = comm_->AllGather(&nnz, counts.data_ptr(), 1, loom::DataType::kInt64);
    Check(s, "sparse allreduce (gathering nnz)");
    const int64_t max_nnz = counts.max().item<int64_t>();
    const int64_t sparse_dims = indices.size(0);
    at::Tensor idx_pad = at::zeros({sparse_dims, max_nnz}, indices.options());
    idx_pad.narrow(1, 0, nnz).copy_(indices);
    std::vector<int64_t> vshape = values.sizes().vec();
    vshape[0] = max_nnz;
    at::Tensor val_pad = at::zeros(vshape, values.options());
    val_pad.narrow(0, 0, nnz).copy_(values);
    at::Tensor idx_all = at::empty({size_, sparse_dims, max_nnz}, indices.options());
    std::vector<int64_t> all_shape = vshape;
    all_shape.insert(all_shape.begin(), size_);
    at::Tensor val_all = at::empty(all_shape, values.options());
    const LoomView iv = MoveView(idx_pad);
    Check(comm_->AllGather(idx_pad.data_ptr(), idx_all.data_ptr(), iv.count, iv.type),
          "sparse allreduce (gathering indices)");
    const LoomView vv = MoveView(val_pad);
    Check(comm_->AllGather(val_pad.data_ptr(), val_all.data_ptr(), vv.count, vv.type),
          "sparse allreduce (gathering values)");
    std::vector<at::Tensor> idx_parts, val_parts;
    for (int r = 0; r < size_; ++r) {
      const int64_t n = counts[r].item<int64_t>();
      idx_parts.push_back(idx_all[r].narrow(1, 0, n));
      val_parts.push_back(val_all[r].narrow(0, 0, n));
    }
    at::Tensor sum = at::sparse_coo_tensor(at::cat(idx_parts, 1), at::cat(val_parts, 0),
                                           in.sizes(), in.options())
                         .coalesce();
    tensor.copy_(sum);
  } catch (const std::exception& e) {
    s = loom::Status(loom::Code::kInternalError, e.what());
  }
  LoomWork::StartDone(work, s);
  return work;
}

c10::intrusive_ptr<c10d::ProcessGroup> CreateProcessGroupLoom(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupLoom>(store, rank, size, timeout);
}

}  // namespace loom_torch
