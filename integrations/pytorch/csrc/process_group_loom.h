// ProcessGroupLoom: torch.distributed's c10d::ProcessGroup on a loom
// Communicator. One communicator per group; its ranks meet through torch's
// Store (rank 0 publishes a loom::UniqueId). Every operation is issued to
// loom at once and returns a LoomWork that loom's completion callback
// completes; operations of one group run in issue order (loom's rule).
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "integrations/pytorch/csrc/loom_work.h"
#include "loom/loom.hpp"

namespace loom_torch {

class ProcessGroupLoom : public c10d::ProcessGroup {
 public:
  // Collective over the group's `size` ranks; blocks until all joined or
  // `timeout` (also every later operation's limit) passed, then throws
  // with loom's message.
  ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout);
  ~ProcessGroupLoom() override;

  const std::string getBackendName() const override { return "loom"; }
  // Counts the operations issued on this group from 0 (every rank issues
  // the same ones), as Gloo does; DDP's logging and debug wrappers read it.
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  loom::Communicator& communicator() { return *comm_; }

  // batch_isend_irecv: the sends and receives between these two calls are
  // issued as one loom group, in which they all progress together (one by
  // one, a receive issued before a send on both sides would wait forever:
  // loom runs a group's operations in order, as NCCL does). endCoalescing
  // returns when the group completed. Other operations are refused there.
  void startCoalescing() override;
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // Gloo's debugging barrier (monitored_barrier.cc): rank 0 waits up to
  // opts.timeout (the group's when unset) for every other rank and throws
  // naming the first late one, or all of them with `wait_all_ranks`; the
  // others throw when rank 0 did. Reached as group.monitored_barrier():
  // torch 1.13's dist.monitored_barrier accepts only the name gloo.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

 private:
  c10::intrusive_ptr<LoomWork> NewWork(c10d::OpType type, const char* title,
                                       std::vector<at::Tensor> outputs);
  // Arms completion of `work` by the loom operations `ops`.
  c10::intrusive_ptr<c10d::Work> Launch(const c10::intrusive_ptr<LoomWork>& work,
                                        std::vector<loom::Work> ops);
  // Grouped sends and receives (uneven all-to-all); GroupEnd waits for them.
  c10::intrusive_ptr<c10d::Work> ExchangeGrouped(const c10::intrusive_ptr<LoomWork>& work,
                                                 const std::vector<at::Tensor>& sends,
                                                 const std::vector<at::Tensor>& recvs);
  c10::intrusive_ptr<c10d::Work> SparseAllreduce(at::Tensor& tensor,
                                                 const c10d::AllreduceOptions& opts);

  // An operation on CUDA tensors (all on one device): `enqueue` issues
  // loom's stream forms on torch's current stream of that device, and the
  // Work completes in stream order (device_work.cc). In an extension built
  // against a PyTorch without CUDA it refuses, naming the device.
  using Enqueue = std::function<loom::Status(loom::GpuStream)>;
  c10::intrusive_ptr<c10d::Work> OnDevice(c10d::OpType type, const char* title,
                                          const std::vector<at::Tensor>& inputs,
                                          std::vector<at::Tensor> outputs,
                                          const Enqueue& enqueue);
  // The sends and receives of one exchange (uneven all-to-all, gather,
  // scatter) as one loom group on `stream`; a block of 0 elements is skipped.
  loom::Status ExchangeOnStream(const std::vector<at::Tensor>& sends,
                                const std::vector<at::Tensor>& recvs, loom::GpuStream stream);

  // Refuses a device send/recv inside batch_isend_irecv, naming `opname`.
  void NotBatched(const char* opname);

  // Issues one send or receive now, or collects it while coalescing.
  c10::intrusive_ptr<c10d::Work> PointToPoint(const c10::intrusive_ptr<LoomWork>& work,
                                              std::function<loom::Work()> issue);
  // Takes issue_mu_ for an operation that may not be batched: refused
  // inside batch_isend_irecv / a coalescing block, naming the operation.
  std::unique_lock<std::mutex> LockToIssue(const std::string& opname);
  std::unique_lock<std::mutex> LockToIssue(LoomWork& work);

  // startCoalescing .. endCoalescing: the collected operations and Works.
  bool coalescing_ = false;
  std::vector<std::function<loom::Work()>> coalesced_ops_;
  std::vector<c10::intrusive_ptr<LoomWork>> coalesced_works_;

  // The group's store (prefixed by torch for this group) and timeout.
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  uint64_t monitored_calls_ = 0;

  // Declared before comm_: destroyed after it, so the completions of ops
  // the communicator ends on destruction still run.
  std::unique_ptr<Completer> completer_;
  std::unique_ptr<loom::Communicator> comm_;
  // Ops issued by several threads enter loom one torch op at a time (one
  // torch op may be several loom ops).
  std::mutex issue_mu_;
};

// The creator torch.distributed.Backend.register_backend calls.
c10::intrusive_ptr<c10d::ProcessGroup> CreateProcessGroupLoom(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout);

}  // namespace loom_torch
