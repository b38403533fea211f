// The dispatcher (dispatch.h): Validate, Execute, RunOne, the cached choice.
#include "comm/dispatch.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "collectives/reduce/reduce.h"
#include "base/coarse_clock.h"
#include "base/log.h"
#include "comm/group.h"

namespace loom {

Status Dispatcher::Validate(const CollArgs& a) const {
  const int rank = parts_.rank, size = parts_.size;
  // Named only in an error: a call's path is the latency of a small one.
  auto what = [&a] { return std::string(OpKindName(a.kind)); };
  if (!IsValid(a.type)) {
    return InvalidArgument(what() + ": invalid datatype " +
                           std::to_string(static_cast<int>(a.type)));
  }
  if (!IsValid(a.op)) {
    return InvalidArgument(what() + ": invalid reduction op " +
                           std::to_string(static_cast<int>(a.op)));
  }
  // Only AllReduce, ReduceScatter and Reduce take a Reduction.
  if (a.premul) {
    if (a.op != RedOp::kSum) {
      return InvalidArgument(what() + ": a PreMulSum reduces with sum, not " +
                             std::string(Name(a.op)));
    }
    if (a.scalar.type != a.type) {
      return InvalidArgument(what() + ": the PreMulSum scalar is " +
                             std::string(Name(a.scalar.type)) +
                             " but the operation's datatype is " + std::string(Name(a.type)) +
                             " (create the reduction with the datatype "
                             "of the buffers)");
    }
    if (a.scalar.where == PreMulScalar::Where::kPointer && a.scalar.pointer == nullptr) {
      return InvalidArgument(what() + ": the PreMulSum scalar pointer is null");
    }
  }
  // Elements moved per rank buffer: whole-communicator buffers are size x count.
  size_t blocks = 1;
  if (a.kind == OpKind::kReduceScatter || a.kind == OpKind::kAllGather ||
      a.kind == OpKind::kAllToAll) {
    blocks = static_cast<size_t>(size);
  }
  const size_t es = SizeOf(a.type);
  size_t total_bytes = 0;  // es * blocks cannot overflow: at most 8 x INT_MAX
  if (__builtin_mul_overflow(a.count, es * blocks, &total_bytes)) {
    return InvalidArgument(what() + ": count " + std::to_string(a.count) +
                           " overflows the address space");
  }
  const bool rooted = a.kind == OpKind::kBroadcast || a.kind == OpKind::kReduce ||
                      a.kind == OpKind::kSendRecv;
  if (rooted && (a.root < 0 || a.root >= size)) {
    return InvalidArgument(what() + ": " + (a.kind == OpKind::kSendRecv ? "peer " : "root ") +
                           std::to_string(a.root) + " is not a rank of this communicator of " +
                           std::to_string(size));
  }
  if (a.kind == OpKind::kSendRecv && a.root == rank && GroupDepth() == 0) {
    return InvalidUsage("Send/Recv with this rank itself (" + std::to_string(rank) +
                        ") only works inside GroupStart/GroupEnd, together with the matching "
                        "Recv/Send");
  }
  if (a.count > 0 && a.kind != OpKind::kBarrier) {
    bool needs_send = a.kind != OpKind::kSendRecv || a.recv == nullptr;
    bool needs_recv = a.kind != OpKind::kSendRecv || a.send == nullptr;
    if (a.kind == OpKind::kBroadcast && rank != a.root) needs_send = false;
    if (a.kind == OpKind::kReduce && rank != a.root) needs_recv = false;
    if (needs_send && a.send == nullptr) {
      return InvalidArgument(what() + ": send buffer is null with count " +
                             std::to_string(a.count));
    }
    if (needs_recv && a.recv == nullptr) {
      return InvalidArgument(what() + ": receive buffer is null with count " +
                             std::to_string(a.count));
    }
  }
  return Status::Ok();
}

Status Dispatcher::Execute(std::span<const CollArgs> items) {
  const auto now = CoarseNow();
  // A deadline of seconds needs no finer clock than a tick.
  const Deadline deadline =
      parts_.timeout.count() > 0 ? Deadline::At(now + parts_.timeout) : Deadline::Never();
  // Send/Recv of one batch progress together; anything else runs in order.
  bool any_p2p = false;
  bool first = true;
  for (const CollArgs& a : items) {
    if (a.kind == OpKind::kSendRecv) {
      any_p2p = true;
      continue;
    }
    // The first operation starts now; a later one of a batch when it starts.
    const uint64_t seq = tracker.Started(a, first ? now : CoarseNow());
    first = false;
    LOOM_TRY(RunOne(a, deadline));
    tracker.Completed(seq, a);
  }
  if (!any_p2p) return Status::Ok();
  return RunSendRecv(items, deadline);
}

// A batch's Send/Recv, all at once: on device buffers through CUDA IPC,
// to this rank itself as copies, and the rest as one engine run.
Status Dispatcher::RunSendRecv(std::span<const CollArgs> items, Deadline deadline) {
  const int rank = parts_.rank;
  const std::string& host = parts_.host;
  // Send/Recv on device buffers: read in place through CUDA IPC.
  std::vector<CollArgs> device_sr;
  for (const CollArgs& a : items) {
    if (a.kind == OpKind::kSendRecv && a.device) device_sr.push_back(a);
  }
  if (!device_sr.empty()) {
    const uint64_t seq = tracker.Started(device_sr.front());
    for (size_t i = 1; i < device_sr.size(); ++i) tracker.Started(device_sr[i]);
    Status s = parts_.ipc->RunSendRecv(*parts_.engine, rank, device_sr, deadline, *parts_.abort);
    if (!s.ok()) {
      return s.WithContext("Send/Recv on device buffers (CUDA IPC) on rank " +
                           std::to_string(rank) + " (" + host + ")");
    }
    tracker.Completed(seq + device_sr.size() - 1, device_sr.back());
  }
  // Sends to self match receives from self in issue order: a local copy.
  std::vector<CollArgs> sr, self_sends, self_recvs;
  for (const CollArgs& a : items) {
    if (a.kind != OpKind::kSendRecv || a.device) continue;
    if (a.root != rank) {
      sr.push_back(a);
    } else {
      (a.send != nullptr ? self_sends : self_recvs).push_back(a);
    }
  }
  if (self_sends.size() != self_recvs.size()) {
    return InvalidUsage("rank " + std::to_string(rank) + " sends " +
                        std::to_string(self_sends.size()) + " message(s) to itself but receives " +
                        std::to_string(self_recvs.size()) +
                        " from itself: put each self Send with its Recv in one group");
  }
  for (size_t i = 0; i < self_sends.size(); ++i) {
    const size_t sb = self_sends[i].count * SizeOf(self_sends[i].type);
    const size_t rb = self_recvs[i].count * SizeOf(self_recvs[i].type);
    if (sb != rb) {
      return InvalidUsage("self Send of " + std::to_string(sb) + " bytes matched with a Recv of " +
                          std::to_string(rb) + " bytes");
    }
    if (sb > 0 && self_sends[i].send != self_recvs[i].recv) {
      std::memmove(self_recvs[i].recv, self_sends[i].send, sb);
    }
  }
  if (sr.empty()) return Status::Ok();
  uint64_t first_seq = 0;
  for (const CollArgs& a : sr) {
    uint64_t seq = tracker.Started(a);
    if (first_seq == 0) first_seq = seq;
  }
  std::vector<Transfer> p2p;
  p2p.reserve(sr.size());
  for (const CollArgs& a : sr) {
    Transfer& t = p2p.emplace_back();
    t.peer = a.root;
    t.kind = OpKind::kSendRecv;
    t.bytes = a.count * SizeOf(a.type);
    t.type = a.type;
    t.device = a.gdr;  // GPUDirect RDMA: the NIC reads or writes it in place
    if (a.send != nullptr) {
      t.dir = Transfer::Dir::kSend;
      t.src = a.send;
    } else {
      t.dir = Transfer::Dir::kRecv;
      t.dst = a.recv;
    }
  }
  // Sends the way the latest exploration concluded, not an exploration's.
  if (fifo.chooser) SetStreaming(fifo.chooser->latest());
  const bool any_gdr = std::any_of(sr.begin(), sr.end(), [](const CollArgs& a) { return a.gdr; });
  if (any_gdr) {
    // GPU memory is registered (and the NIC's writes flushed) on this
    // thread, which never chose a device: the rank's GPU.
    LOOM_TRY(parts_.device->ops()->SetDevice(parts_.cuda_device));
  }
  LOOM_TRY(parts_.engine->Run(p2p, deadline));
  // What the NIC wrote into device memory must be visible to the work the
  // user's stream runs once released.
  if (std::any_of(sr.begin(), sr.end(),
                  [](const CollArgs& a) { return a.gdr && a.recv != nullptr; })) {
    LOOM_TRY(parts_.device->ops()->FlushRdmaWrites().WithContext("after receiving into GPU memory"));
  }
  tracker.Completed(first_seq + sr.size() - 1, sr.back());
  return Status::Ok();
}

Status Dispatcher::RunOne(const CollArgs& a, Deadline deadline) {
  const int rank = parts_.rank, size = parts_.size;
  const std::string& host = parts_.host;
  if (a.gdr) {
    Status s = parts_.net->Run(*parts_.engine, rank, size, a, deadline, *parts_.abort);
    if (s.ok()) return s;
    return s.WithContext(std::string(OpKindName(a.kind)) +
                         " on device buffers (GPUDirect RDMA) on rank " + std::to_string(rank) +
                         " (" + host + ")");
  }
  if (a.device) {
    Status s = parts_.ipc->Run(*parts_.engine, rank, a, deadline, *parts_.abort);
    if (s.ok()) return s;
    return s.WithContext(std::string(OpKindName(a.kind)) + " on device buffers (CUDA IPC) on rank " +
                         std::to_string(rank) + " (" + host + ")");
  }
  // A scalar is read only when there is something to scale.
  if (a.premul && a.count > 0 && a.scalar.where == PreMulScalar::Where::kPointer &&
      parts_.device->ops() != nullptr) {
    LOOM_ASSIGN_OR_RETURN(const cuda::BufferPlace place, parts_.device->ops()->Classify(a.scalar.pointer));
    if (place.space == cuda::MemSpace::kDevice) {
      return InvalidUsage(std::string(OpKindName(a.kind)) +
                          ": the PreMulSum scalar is device memory but the buffers are host "
                          "memory; pass the scalar in host memory (or by value)");
    }
  }
  const SumRewrite rewrite(a, rank, size, premul_scratch_);
  const CollArgs& summed = rewrite.args();
  const size_t bytes = a.count * SizeOf(a.type);
  const Choice& c = Decide(a.kind, bytes);
  std::optional<StreamChooser::Plan> plan;
  std::chrono::steady_clock::time_point start;
  // Only the FIFOs' times say how sends into them should go: not Direct's
  // reads of the peers' inputs in place, nor the slots'.
  if (fifo.chooser && c.algo != Algo::kDirect && c.algo != Algo::kSlots) {
    plan = fifo.chooser->Next(a.kind, bytes);
    SetStreaming(plan->stream);
    if (plan->slot >= 0) start = std::chrono::steady_clock::now();
  }
  const AlgoContext ctx{*parts_.engine, rank, scratch_, selection.hier ? &*selection.hier : nullptr};
  Status s;
  bool ran_direct = false;
  if (c.direct_if_shared) {
    s = RunDirectIfAllShared(*parts_.engine, rank, summed, scratch_, deadline, &ran_direct);
    if (ran_direct) LOOM_TRACE(log::kTuning, "%s: Direct instead, every rank's buffers are shareable",
                               OpKindName(a.kind));
  }
  if (!ran_direct && s.ok()) s = RunAlgorithm(ctx, c.algo, summed, deadline);
  if (!s.ok()) return InContext(a, std::move(s));
  rewrite.Finish();
  if (plan && plan->slot >= 0 && !ran_direct) {
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    const std::optional<StreamChooser::Exploration> found =
        fifo.chooser->Record(*plan, bytes, took.count());
    if (found) {
      const char* kept = found->switched != found->stream ? "streaming" : "the cache";
      const char* other = found->switched != found->stream ? "the cache" : "streaming";
      // Switches are rare and matter (INFO); every exploration is TRACE.
      LOOM_LOG(found->switched ? log::Level::kInfo : log::Level::kTrace, log::kShm | log::kTuning,
               "%s of %zu bytes: sends into the shared-memory FIFOs through %s %.3f ns/B, "
               "through %s %.3f ns/B (explored): %s",
               OpKindName(a.kind), bytes, kept, found->kept_ns_per_byte, other,
               found->other_ns_per_byte,
               !found->switched ? "kept"
               : found->stream  ? "they stream from now on"
                                : "they go through the cache from now on");
    }
  }
  return Status::Ok();
}

const Choice& Dispatcher::Decide(OpKind kind, size_t bytes) {
  const Choice& c = Choose(kind, bytes);
  const uint32_t kind_bit = 1u << static_cast<uint32_t>(kind);
  if (c.tune_ignored != Choice::TuneIgnored::kNo && (tune_warned_ & kind_bit) == 0) {
    tune_warned_ |= kind_bit;  // once per collective and communicator
    LOOM_WARN(log::kTuning, "LOOM_TUNE names %s for %s of %zu bytes, but %s; using %s",
              AlgoName(c.tuned), OpKindName(kind), bytes,
              c.tune_ignored == Choice::TuneIgnored::kExcludedByAlgo
                  ? "NCCL_ALGO excludes it"
                  : "it cannot run on this job",
              AlgoName(c.algo));
  }
  if (c.source == Choice::Source::kFallback && (algo_warned_ & kind_bit) == 0) {
    algo_warned_ |= kind_bit;  // once per collective and communicator
    LOOM_WARN(log::kTuning, "NCCL_ALGO allows no usable algorithm for %s here; using %s",
              OpKindName(kind), AlgoName(c.algo));
  }
  LOOM_TRACE(log::kTuning, "%s %zu bytes on %d ranks: %s by %s (%s)", OpKindName(kind), bytes,
             parts_.size, AlgoName(c.algo),
             c.source == Choice::Source::kTune ? "LOOM_TUNE"
             : c.source == Choice::Source::kModel ? "cost model"
                                                  : "fallback",
             DescribeEstimates(kind, bytes, selection.cost).c_str());
  return c;
}

Status Dispatcher::InContext(const CollArgs& a, Status s) const {
  if (s.ok()) return s;
  return s.WithContext(std::string(OpKindName(a.kind)) + " on rank " + std::to_string(parts_.rank) +
                       " (" + parts_.host + ")");
}

void Dispatcher::SetStreaming(bool on) {
  if (on == fifo.streaming) return;
  fifo.streaming = on;
  for (PeerMemory* c : fifo.conns) c->set_streaming_sends(on);
}

// SelectAlgo is pure for a communicator (its model, NCCL_ALGO and LOOM_TUNE
// never change), so a small direct-mapped cache keyed by collective and size
// saves the cost model's arithmetic on every call of a training loop.
const Choice& Dispatcher::Choose(OpKind kind, size_t bytes) {
  const uint64_t key = (uint64_t{bytes} << 4) | static_cast<uint64_t>(kind);  // kind < 16
  const size_t slot = (key * 0x9E3779B97F4A7C15ull) >> (64 - kChoiceCacheBits);
  CachedChoice& e = choices_[slot];
  if (!e.valid || e.kind != kind || e.bytes != bytes) {
    e.valid = true;
    e.kind = kind;
    e.bytes = bytes;
    e.choice = SelectAlgo(kind, bytes, selection.cost, selection.filter, selection.tune);
  }
  return e.choice;
}

}  // namespace loom
