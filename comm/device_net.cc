// DeviceNet (device_net.h): data-moving collectives between hosts straight
// from and into GPU memory over GPUDirect RDMA.
#include "comm/device_net.h"

#include <chrono>
#include <thread>

#include "base/log.h"
#include "comm/device_path.h"

namespace loom {

namespace {
std::atomic<size_t> g_testing_min_recv{0};

Transfer DeviceTransfer(Transfer::Dir dir, int peer, const CollArgs& a, size_t bytes) {
  Transfer t;
  t.dir = dir;
  t.peer = peer;
  t.kind = a.kind;
  t.bytes = bytes;
  t.type = a.type;
  t.device = true;
  return t;
}
}  // namespace

void SetDeviceNetForTesting(size_t min_recv_bytes) { g_testing_min_recv.store(min_recv_bytes); }
size_t DeviceNetForTesting() { return g_testing_min_recv.load(); }

NetDirectPlan PlanNetDirect(const CollArgs& a, int rank, int size, const void* snapshot) {
  NetDirectPlan plan;
  const size_t b = a.count * SizeOf(a.type);
  const char* send = static_cast<const char*>(snapshot != nullptr ? snapshot : a.send);
  char* recv = static_cast<char*>(a.recv);
  auto send_to = [&](int p, const void* src) {
    Transfer t = DeviceTransfer(Transfer::Dir::kSend, p, a, b);
    t.src = src;
    plan.transfers.push_back(t);
  };
  auto recv_from = [&](int p, void* dst) {
    Transfer t = DeviceTransfer(Transfer::Dir::kRecv, p, a, b);
    t.dst = dst;
    plan.transfers.push_back(t);
  };
  auto local = [&](void* dst, const void* src) {
    if (b > 0 && dst != src) plan.local = NetDirectPlan::Copy{dst, src, b};
  };
  switch (a.kind) {
    case OpKind::kAllGather:  // own block to everyone, everyone's into its slot
      for (int p = 0; p < size; ++p) {
        if (p == rank) continue;
        send_to(p, send);
        recv_from(p, recv + p * b);
      }
      local(recv + rank * b, send);
      break;
    case OpKind::kAllToAll:  // block p to rank p, rank p's block into slot p
      for (int p = 0; p < size; ++p) {
        if (p == rank) continue;
        send_to(p, send + p * b);
        recv_from(p, recv + p * b);
      }
      local(recv + rank * b, send + rank * b);
      break;
    case OpKind::kBroadcast:  // the root to everyone
      if (rank == a.root) {
        for (int p = 0; p < size; ++p) {
          if (p != rank) send_to(p, send);
        }
        local(recv, send);
      } else {
        recv_from(a.root, recv);
      }
      break;
    default: break;
  }
  return plan;
}

DeviceNet::~DeviceNet() {
  if (!have_stream_) return;
  (void)ops_->SetDevice(device_);
  // A failed operation's copy may still run: let it finish (bounded).
  if (!DrainStream(*ops_, stream_, done_)) {
    LOOM_WARN(log::kNet, "device copies of the communicator do not finish; leaking their stream");
    return;
  }
  ops_->FreeScratch(snapshot_);
  ops_->DestroyEvent(done_);
  ops_->DestroyStream(stream_);
}

void DeviceNet::Enable(cuda::DeviceOps* ops, size_t min_recv_bytes, int device) {
  ops_ = ops;
  min_recv_bytes_ = min_recv_bytes;
  device_ = device;
}

bool DeviceNet::Handles(const CollArgs& a) const {
  if (ops_ == nullptr || min_recv_bytes_ == 0) return false;
  const bool moves_only =
      a.kind == OpKind::kAllGather || a.kind == OpKind::kAllToAll || a.kind == OpKind::kBroadcast;
  return moves_only && a.count * SizeOf(a.type) >= min_recv_bytes_;
}

Status DeviceNet::Copy(void* dst, const void* src, size_t bytes, Deadline deadline,
                       const std::atomic<bool>& abort) {
  LOOM_TRY(ops_->CopyAsync(dst, src, bytes, stream_));
  LOOM_TRY(ops_->RecordEvent(done_, stream_));
  return PollDeviceEvent(*ops_, done_, deadline, abort, "a device copy");
}

Status DeviceNet::Run(Engine& engine, int rank, int size, const CollArgs& a, Deadline deadline,
                      const std::atomic<bool>& abort) {
  // The worker thread never chose a device: the stream, the copies, the
  // IB registrations and the flush all belong to this rank's GPU.
  LOOM_TRY(ops_->SetDevice(device_));
  if (!have_stream_) {
    LOOM_ASSIGN_OR_RETURN(const OwnStream own, NewOwnStream(*ops_));
    stream_ = own.stream;
    done_ = own.event;
    have_stream_ = true;
  }
  const size_t b = a.count * SizeOf(a.type);
  const void* snapshot = nullptr;
  if (a.kind == OpKind::kAllToAll && a.send == a.recv) {
    // In place: the receives would overwrite blocks not sent yet.
    const size_t all = b * static_cast<size_t>(size);
    if (snapshot_bytes_ < all) {
      ops_->FreeScratch(snapshot_);
      snapshot_ = nullptr;
      snapshot_bytes_ = 0;
      LOOM_ASSIGN_OR_RETURN(snapshot_, ops_->AllocScratch(all));
      snapshot_bytes_ = all;
    }
    LOOM_TRY(Copy(snapshot_, a.send, all, deadline, abort));
    snapshot = snapshot_;
  }
  NetDirectPlan plan = PlanNetDirect(a, rank, size, snapshot);
  if (plan.local) {
    LOOM_TRY(ops_->CopyAsync(plan.local->dst, plan.local->src, plan.local->bytes, stream_));
  }
  LOOM_TRY(engine.Run(plan.transfers, deadline));
  if (plan.local) {
    LOOM_TRY(ops_->RecordEvent(done_, stream_));
    LOOM_TRY(PollDeviceEvent(*ops_, done_, deadline, abort, "this rank's own block's device copy"));
  }
  return ops_->FlushRdmaWrites().WithContext("after receiving into GPU memory");
}

}  // namespace loom
