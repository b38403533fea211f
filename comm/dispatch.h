// The dispatcher: what runs one operation, or a batch, once the queue gave
// its caller the claim to execute. It checks the arguments (Validate),
// sends device buffers to the device paths, rewrites kAvg and PreMulSum
// into a sum (SumRewrite), asks SelectAlgo for the algorithm (cached per
// collective and size; the TUNING log says why), sets how the
// shared-memory FIFOs send, runs the algorithm, and records each operation
// in the op tracker. One per communicator; one thread at a time.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collectives/algos/algorithms.h"
#include "collectives/algos/hierarchical.h"
#include "collectives/select/selector.h"
#include "comm/device_ipc.h"
#include "comm/device_net.h"
#include "comm/device_path.h"
#include "comm/status_port.h"
#include "comm/stream_chooser.h"
#include "transports/engine.h"
#include "transports/peer_memory.h"

namespace loom {

class Dispatcher {
 public:
  // What setup decides for the choice of algorithms; the same on every
  // rank, so that every rank picks the same algorithm for the same call.
  struct Selection {
    CostModel cost;                   // from the job-wide topology
    AlgoFilter filter;                // NCCL_ALGO
    TuneTable tune;                   // LOOM_TUNE
    std::optional<HierGroups> hier;   // this rank's groups, when hosts have equal rank counts
  };
  // How sends into the shared-memory FIFOs go: `chooser` picks per call
  // from the times of this rank's collectives (stream_chooser.h); null when
  // LOOM_SHM_STREAM forces a way or the rank has no shared-memory peer.
  struct FifoSends {
    std::vector<PeerMemory*> conns;  // the shared-memory peers' (owned by the engine)
    bool streaming = false;             // the way `conns` send now
    std::unique_ptr<StreamChooser> chooser;
  };
  // The communicator's parts the dispatcher runs operations on; they
  // outlive it.
  struct Parts {
    Engine* engine = nullptr;
    DevicePath* device = nullptr;
    DeviceIpc* ipc = nullptr;
    DeviceNet* net = nullptr;
    const std::atomic<bool>* abort = nullptr;
    int rank = 0;
    int size = 1;
    std::string host;
    int cuda_device = -1;
    std::chrono::milliseconds timeout{0};  // per operation; 0 = none
  };

  // Filled by setup before Attach.
  Selection selection;
  FifoSends fifo;
  // What `loom doctor --attach` and the status port read.
  OpTracker tracker;

  void Attach(Parts parts) { parts_ = std::move(parts); }

  // Arguments against this communicator; the error names what is wrong.
  Status Validate(const CollArgs& a) const;
  // Runs validated items (one op, or a group's batch) in order; a group's
  // Send/Recv progress together. Only while holding the queue's claim.
  Status Execute(std::span<const CollArgs> items);

 private:
  Status RunOne(const CollArgs& a, Deadline deadline);
  Status RunSendRecv(std::span<const CollArgs> items, Deadline deadline);
  // SelectAlgo, cached: it is pure for a communicator.
  const Choice& Choose(OpKind kind, size_t bytes);
  // Choose, with the TUNING log lines of the choice.
  const Choice& Decide(OpKind kind, size_t bytes);
  void SetStreaming(bool on);
  Status InContext(const CollArgs& a, Status s) const;  // "AllReduce on rank 3 (host)"

  Parts parts_;
  // Grow-only scratch memory. Destroyed after the engine (the communicator
  // owns both in that order): a failed op abandons transfers that a
  // transport (UCX) may still read or write until the engine closes.
  Scratch scratch_;
  Scratch premul_scratch_;  // a PreMulSum's scaled input
  struct CachedChoice {
    bool valid = false;
    OpKind kind = OpKind::kInternal;
    size_t bytes = 0;
    Choice choice;
  };
  static constexpr int kChoiceCacheBits = 6;
  std::array<CachedChoice, size_t{1} << kChoiceCacheBits> choices_;
  uint32_t algo_warned_ = 0;  // bit per OpKind: NCCL_ALGO fallback already logged
  uint32_t tune_warned_ = 0;  // bit per OpKind: an ignored LOOM_TUNE entry already logged
};

}  // namespace loom
