// ProcessGroupLoom (process_group_loom.h): torch's collectives as loom
// operations on CPU tensors.
#include "integrations/pytorch/csrc/process_group_loom.h"

#include <Python.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "integrations/pytorch/csrc/tensor_types.h"

namespace loom_torch {
namespace {

// The store key under which rank 0 publishes the group's loom::UniqueId
// (the store torch hands over is already prefixed by the group's name).
constexpr const char* kUniqueIdKey = "loom_unique_id";

void Check(const loom::Status& s, const char* what) {
  TORCH_CHECK(s.ok(), "loom: ", what, ": ", s.ToString());
}

void CheckTensor(const at::Tensor& t, const char* opname) {
  TORCH_CHECK(t.layout() == at::kStrided, "loom: ", opname, " takes dense (strided) tensors, got ",
              t.layout());
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "loom: ", opname, " got a tensor on ",
              t.device(), "; loom_torch moves CPU and CUDA tensors");
}

// CUDA tensors take the device path (OnDevice), CPU tensors the host one.
bool OnCuda(const at::Tensor& t) { return t.device().is_cuda(); }

// Loom reads and writes a device tensor in place, so it must be dense in
// memory, as with the nccl backend.
const at::Tensor& Contiguous(const at::Tensor& t, const char* opname) {
  TORCH_CHECK(t.is_contiguous(), "loom: ", opname, ": CUDA tensors must be contiguous");
  return t;
}

const at::Tensor& One(const std::vector<at::Tensor>& ts, const char* opname) {
  TORCH_CHECK(ts.size() == 1, "loom: ", opname, " takes one tensor per process, got ", ts.size());
  CheckTensor(ts.front(), opname);
  return ts.front();
}

void CheckRank(int64_t r, int size, const char* what, const char* opname) {
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
void Unpack(const at::Tensor& flat, const std::vector<at::Tensor>& outs) {
  int64_t offset = 0;
  for (const at::Tensor& o : outs) {
    const int64_t n = o.numel();
    o.copy_(flat.narrow(0, offset, n).view(o.sizes()));
    offset += n;
  }
}

at::Tensor Concat(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const at::Tensor& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

}  // namespace

ProcessGroupLoom::ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                   int size, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size), completer_(std::make_unique<Completer>()) {
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

std::unique_lock<std::mutex> ProcessGroupLoom::LockToIssue(const std::string& opname) {
  std::unique_lock<std::mutex> lock(issue_mu_);
  TORCH_CHECK(!coalescing_, "loom: ", opname,
              " inside batch_isend_irecv / a coalescing block; only send and recv can be batched");
  return lock;
}

std::unique_lock<std::mutex> ProcessGroupLoom::LockToIssue(LoomWork& work) {
  return LockToIssue(c10d::opTypeToString(work.retrieveOpType()));
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
