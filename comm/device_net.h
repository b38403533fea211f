// DeviceNet: collectives that only move data (all-gather, broadcast,
// all-to-all) on device buffers between hosts, when every link is IB with
// GPUDirect RDMA both ways (transports/ib/gdr.h). Each rank sends its
// blocks straight from GPU memory to every peer and receives every peer's
// block straight into GPU memory (granted, connection.h); its own block is
// a device copy. Nothing is staged through host memory, and the CPU never
// touches the data. Reductions still stage: loom reduces on the CPU.
//
// The same rule must hold on every rank for the same call (else one rank
// stages and runs a host algorithm while another runs this, and the
// transports name the mismatch): the job-wide flag is agreed at setup, and
// the rest depends only on the call's kind and count. Every rank must then
// pass device buffers to such a call, as with chunked staging.
#pragma once

#include <atomic>
#include <cstddef>
#include <optional>
#include <vector>

#include "collectives/algos/algorithms.h"
#include "transports/cuda/device_ops.h"
#include "transports/engine.h"

namespace loom {

// The transfers of one such collective for `rank` of `size`, and its own
// block's device copy (none when in place or nothing moves). Transfers are
// marked device. An in-place all-to-all sends from `snapshot` (a copy of the
// input that the caller makes first). Pure.
struct NetDirectPlan {
  struct Copy {
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
  };
  std::vector<Transfer> transfers;
  std::optional<Copy> local;
};
NetDirectPlan PlanNetDirect(const CollArgs& a, int rank, int size, const void* snapshot = nullptr);

// Tests: communicators created after this call enable DeviceNet with this
// smallest block whatever their links (0 restores the rule). A test's ranks
// share one process and shared memory, whose connections copy the fake's
// "device" memory as they copy host memory.
void SetDeviceNetForTesting(size_t min_recv_bytes);
size_t DeviceNetForTesting();

class DeviceNet {
 public:
  DeviceNet() = default;
  ~DeviceNet();  // waits (bounded) for its device copies, then frees
  DeviceNet(const DeviceNet&) = delete;
  DeviceNet& operator=(const DeviceNet&) = delete;

  // At setup, on every rank alike: on when every pair of ranks is linked
  // by IB and every rank has GPUDirect RDMA for sends and receives;
  // `min_recv_bytes` is the connections' smallest receive into GPU memory,
  // `device` the rank's GPU (current at creation), which Run selects on
  // the thread that runs it.
  void Enable(cuda::DeviceOps* ops, size_t min_recv_bytes, int device);
  bool enabled() const { return ops_ != nullptr; }

  // Whether a collective on device buffers runs here (the same answer on
  // every rank for the same call).
  bool Handles(const CollArgs& a) const;

  // Runs it: the device copies on this rank's stream, the transfers through
  // `engine`; returns once both finished and the NIC's writes are flushed.
  // kTimeout at `deadline`, RemoteError once `abort` is set.
  Status Run(Engine& engine, int rank, int size, const CollArgs& a, Deadline deadline,
             const std::atomic<bool>& abort);

 private:
  Status Copy(void* dst, const void* src, size_t bytes, Deadline deadline,
              const std::atomic<bool>& abort);

  cuda::DeviceOps* ops_ = nullptr;
  size_t min_recv_bytes_ = 0;
  int device_ = 0;
  cuda::StreamHandle stream_ = nullptr;
  cuda::EventHandle done_ = nullptr;
  bool have_stream_ = false;
  void* snapshot_ = nullptr;  // in-place all-to-all's input copy (grow-only)
  size_t snapshot_bytes_ = 0;
};

}  // namespace loom
