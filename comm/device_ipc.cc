// DeviceIpc: the setup verdict and the device-side Direct collectives over
// CUDA IPC mappings (see device_ipc.h).
#include "comm/device_ipc.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "collectives/patterns/ring.h"
#include "base/log.h"
#include "base/params.h"
#include "comm/bootstrap/store_client.h"
#include "comm/device_path.h"
#include "topology/discover.h"

namespace loom {

namespace {

constexpr uint32_t kRecordMagic = 0x6c6f6970;               // "loip"
constexpr auto kIdleWait = std::chrono::milliseconds(100);  // CloseMappingsIfIdle
constexpr uint8_t kKeepSend = 1, kKeepRecv = 2;             // OpRecord::keep

// What a rank tells its peers about one operation's buffers.
struct OpRecord {
  cuda::IpcExport send;
  cuda::IpcExport recv;
  uint32_t magic = kRecordMagic;
  uint8_t has_send = 0;
  uint8_t has_recv = 0;
  uint8_t exported = 1;  // 0: a buffer could not be exported (reason in `why`)
  uint8_t keep = 0;      // kKeepSend | kKeepRecv: registered, so peers keep the mapping
  // The operation as this rank issued it, to name a mismatch.
  uint64_t count = 0;
  int32_t kind = 0, type = 0, op = 0, root = 0;
  char why[128] = {};
};

struct ParsedRecord {
  std::string bus_id;
  bool p2p_disable = false;
  uint64_t process = 0;
  std::string level;
};

std::optional<ParsedRecord> ParseRecord(const std::string& s) {
  // "<bus id>|<0 or 1>|<process number>|<level text>"
  const size_t a = s.find('|');
  if (a == std::string::npos) return std::nullopt;
  const size_t b = s.find('|', a + 1);
  if (b == std::string::npos) return std::nullopt;
  const size_t c = s.find('|', b + 1);
  if (c == std::string::npos) return std::nullopt;
  return ParsedRecord{s.substr(0, a), s.substr(a + 1, b - a - 1) == "1",
                      std::strtoull(s.substr(b + 1, c - b - 1).c_str(), nullptr, 16),
                      s.substr(c + 1)};
}

// A random number per process, the same for all its communicators.
uint64_t ProcessNumber() {
  static const uint64_t n = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return n;
}

Transfer MakeTransfer(const CollArgs& a, Transfer::Dir dir, int peer, size_t bytes) {
  Transfer t;
  t.dir = dir;
  t.peer = peer;
  t.kind = a.kind;
  t.bytes = bytes;
  t.type = DataType::kUint8;
  return t;
}

const char* At(const void* base, size_t byte_offset) {
  return static_cast<const char*>(base) + byte_offset;
}
char* At(void* base, size_t byte_offset) { return static_cast<char*>(base) + byte_offset; }

}  // namespace

Result<topology::PathType> ParseP2pLevel(std::string_view text) {
  return topology::ParseLevel(text, "NCCL_P2P_LEVEL");
}

std::string DeviceIpc::LocalRecord(cuda::DeviceOps* ops) {
  if (ops == nullptr) return "";
  Result<std::string> bus = ops->CurrentBusId();
  if (!bus.ok()) {
    LOOM_WARN(log::kInit, "cannot name this rank's GPU (%s): device buffers will be staged",
              bus.status().ToString().c_str());
    return "";
  }
  char process[24];
  std::snprintf(process, sizeof(process), "%llx", static_cast<unsigned long long>(ProcessNumber()));
  return bus.value() + "|" + (params::kP2pDisable.Get() ? "1" : "0") + "|" + process + "|" +
         params::kP2pLevel.Get();
}

Status DeviceIpc::Setup(cuda::DeviceOps* ops, bootstrap::StoreClient& store, int rank,
                        const std::vector<std::string>& records,
                        const std::vector<std::string>& host_ids, Deadline deadline) {
  ops_ = ops;
  rank_ = rank;
  enabled_ = false;
  const int n = static_cast<int>(records.size());
  // 1. From the records alone: the same answer on every rank.
  std::vector<ParsedRecord> parsed(n);
  topology::PathType level = topology::PathType::kSys;
  for (int r = 0; r < n; ++r) {
    std::optional<ParsedRecord> p = ParseRecord(records[r]);
    if (!p) {
      why_not_ = "rank " + std::to_string(r) + " has no usable GPU";
      return Status::Ok();
    }
    if (host_ids[r] != host_ids[0]) {
      why_not_ = "the ranks span several hosts";
      return Status::Ok();
    }
    if (p->p2p_disable) {
      why_not_ = "NCCL_P2P_DISABLE=1 on rank " + std::to_string(r);
      return Status::Ok();
    }
    Result<topology::PathType> l = ParseP2pLevel(p->level);
    if (!l.ok()) {
      why_not_ = "rank " + std::to_string(r) + ": " + l.status().message();
      if (r == rank) LOOM_WARN(log::kInit | log::kP2P, "%s; device buffers are staged", why_not_.c_str());
      return Status::Ok();
    }
    level = std::min(level, l.value());
    parsed[r] = *p;
    process_.push_back(p->process);
  }
  // 2. What only this process can tell: can it map each peer's GPU, and how
  // far is it?
  std::string local_why;
  std::optional<topology::Topology> topo;
  for (int q = 0; q < n && local_why.empty(); ++q) {
    const std::string& mine = parsed[rank].bus_id;
    const std::string& theirs = parsed[q].bus_id;
    topology::PathType path = topology::PathType::kLoc;
    if (theirs != mine) {
      Result<bool> can = ops->CanAccessPeer(theirs);
      if (!can.ok() || !can.value()) {
        local_why = "rank " + std::to_string(rank) + " cannot map GPU " + theirs + " of rank " +
                    std::to_string(q) + (can.ok() ? "" : " (" + can.status().message() + ")");
        break;
      }
      if (parsed[q].process == parsed[rank].process) {
        // One process, another GPU: read through its raw pointers, which
        // needs peer access from this rank's device.
        if (Status s = ops->EnablePeerAccess(theirs); !s.ok()) {
          local_why = "rank " + std::to_string(rank) + " cannot enable peer access to GPU " +
                      theirs + " of rank " + std::to_string(q) + " (" + s.message() + ")";
          break;
        }
      }
      // Classified from the host topology; PHB when it does not show both GPUs.
      path = topology::PathType::kPhb;
      if (!topo) {
        Result<topology::Topology> t = topology::LocalTopology();
        topo = t.ok() ? t.value() : topology::Topology{};
      }
      const int a = topo->FindBusId(mine), b = topo->FindBusId(theirs);
      if (a >= 0 && b >= 0) path = topology::ClassifyPath(*topo, a, b).type;
    }
    if (path > level) {
      local_why = "GPU " + mine + " (rank " + std::to_string(rank) + ") and GPU " + theirs +
                  " (rank " + std::to_string(q) + ") are " + std::string(topology::Name(path)) +
                  " apart, beyond NCCL_P2P_LEVEL " + std::string(topology::Name(level));
    }
  }
  LOOM_ASSIGN_OR_RETURN(auto verdicts, store.AllGather("device-ipc", local_why, deadline));
  for (int r = 0; r < n; ++r) {
    if (!verdicts[r].empty()) {
      why_not_ = verdicts[r];
      LOOM_INFO(log::kInit | log::kP2P, "rank %d: device buffers staged through host memory: %s",
                rank, why_not_.c_str());
      return Status::Ok();
    }
  }
  Result<int> device = ops->CurrentDevice();
  if (!device.ok()) return device.status();
  device_ = device.value();
  cache_ = std::make_unique<cuda::IpcMappingCache>(&ops->ipc());
  copy_limit_ = static_cast<size_t>(std::max<int64_t>(0, params::kCudaIpcCopyBytes.Get()));
  enabled_ = true;
  why_not_.clear();
  LOOM_INFO(log::kInit | log::kP2P,
            "rank %d: device buffers via P2P/IPC with all %d ranks (GPU %s, NCCL_P2P_LEVEL %s)",
            rank, n, parsed[rank].bus_id.c_str(), std::string(topology::Name(level)).c_str());
  return Status::Ok();
}

DeviceIpc::~DeviceIpc() {
  if (!have_stream_) {
    cache_.reset();
    return;
  }
  // Kernels of a failed operation may still read peers' mappings: let them
  // finish before the mappings close (bounded, as DevicePath does).
  (void)ops_->SetDevice(device_);
  if (!DrainStream(*ops_, stream_, done_)) {
    LOOM_WARN(log::kP2P, "device work of the communicator does not finish; leaking its stream "
                         "and peer mappings rather than closing them under it");
    (void)cache_.release();
    return;
  }
  ops_->FreeScratch(scratch_);
  for (void* p : retired_) ops_->FreeScratch(p);
  // Peers map the copy buffer for as long as they live, unless Finalize
  // had them close it; otherwise freeing it would free memory they have open.
  if (copy_free_ok_) {
    ops_->FreeScratch(copy_buffer_);
  } else if (copy_buffer_ != nullptr) {
    LOOM_INFO(log::kP2P,
              "rank %d: the communicator was not finalized; its CUDA IPC copy buffer "
              "stays allocated until the process exits (peers may still map it)",
              rank_);
  }
  ops_->DestroyEvent(done_);
  ops_->DestroyStream(stream_);
  cache_.reset();
}

Status DeviceIpc::EnsureStream() {
  if (have_stream_) return Status::Ok();
  LOOM_ASSIGN_OR_RETURN(const OwnStream own, NewOwnStream(*ops_));
  stream_ = own.stream;
  done_ = own.event;
  have_stream_ = true;
  return Status::Ok();
}

Status DeviceIpc::WaitDevice(Deadline deadline, const std::atomic<bool>& abort) {
  LOOM_TRY(ops_->RecordEvent(done_, stream_));
  LOOM_TRY(PollDeviceEvent(*ops_, done_, deadline, abort, "device copies and reductions"));
  unsettled_.store(false);  // everything queued before has finished too
  return Status::Ok();
}

Result<void*> DeviceIpc::DeviceScratch(size_t bytes) {
  if (scratch_bytes_ < bytes) {
    if (scratch_ != nullptr) retired_.push_back(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    LOOM_ASSIGN_OR_RETURN(scratch_, ops_->AllocScratch(bytes));
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

Result<const void*> DeviceIpc::PeerPointer(int peer, const cuda::IpcExport& e, bool present,
                                           bool keep) {
  if (!present) return static_cast<const void*>(nullptr);
  // One process: CUDA refuses to open its own handles, and needs no mapping.
  if (process_[peer] == process_[rank_] && !ops_->ipc_within_process()) {
    return reinterpret_cast<const void*>(e.base + e.offset);
  }
  // Kept across operations when the owner registered it (see IpcMappingCache).
  LOOM_ASSIGN_OR_RETURN(void* p, cache_->Map(peer, e, keep));
  return static_cast<const void*>(p);
}

void DeviceIpc::CloseMappingsIfIdle() {
  if (cache_ == nullptr) return;
  if (have_stream_) {
    // Work that is still running after a short wait (a timeout, an abort)
    // keeps its mappings: the destructor drains the stream, then closes them.
    unsettled_.store(true);
    if (!ops_->RecordEvent(done_, stream_).ok()) return;
    const auto until = std::chrono::steady_clock::now() + kIdleWait;
    for (;;) {
      Result<bool> idle = ops_->QueryEvent(done_);
      if (!idle.ok()) return;
      if (idle.value()) break;
      if (std::chrono::steady_clock::now() >= until) return;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    unsettled_.store(false);
  }
  cache_->ReleaseTransient();
}

cuda::IpcMappingCache::Stats DeviceIpc::mapping_stats() const {
  return cache_ ? cache_->stats() : cuda::IpcMappingCache::Stats{};
}

Status DeviceIpc::RunSendRecv(Engine& e, int r, std::span<const CollArgs> items,
                              Deadline deadline, const std::atomic<bool>& abort) {
  LOOM_TRY(ops_->SetDevice(device_));
  LOOM_TRY(EnsureStream());
  ++operations_;
  CloseOnError close_on_error{this};
  std::vector<const CollArgs*> self_sends, self_recvs, sends, recvs;
  for (const CollArgs& a : items) {
    const bool self = a.root == r;
    if (a.send != nullptr) {
      (self ? self_sends : sends).push_back(&a);
    } else {
      (self ? self_recvs : recvs).push_back(&a);
    }
  }
  if (self_sends.size() != self_recvs.size()) {
    return InvalidUsage("rank " + std::to_string(r) + " sends " + std::to_string(self_sends.size()) +
                        " message(s) to itself but receives " + std::to_string(self_recvs.size()) +
                        " from itself: put each self Send with its Recv in one group");
  }
  // 1. Where each sent buffer is.
  std::vector<OpRecord> out(sends.size()), in(recvs.size());
  std::vector<Transfer> t;
  t.reserve(sends.size() + recvs.size());
  for (size_t i = 0; i < sends.size(); ++i) {
    const CollArgs& a = *sends[i];
    OpRecord& rec = out[i];
    rec.count = a.count;
    rec.kind = static_cast<int32_t>(a.kind);
    rec.type = static_cast<int32_t>(a.type);
    Result<cuda::IpcExport> x = ops_->ipc().Export(a.send);
    if (x.ok()) {
      rec.send = x.value();
      rec.has_send = 1;
      if (Registered(a.send, a.count * SizeOf(a.type))) rec.keep = kKeepSend;
    } else {
      rec.exported = 0;
      std::snprintf(rec.why, sizeof(rec.why), "%s", x.status().message().c_str());
    }
    Transfer s = MakeTransfer(a, Transfer::Dir::kSend, a.root, sizeof(OpRecord));
    s.src = &rec;
    t.push_back(s);
  }
  for (size_t i = 0; i < recvs.size(); ++i) {
    Transfer v = MakeTransfer(*recvs[i], Transfer::Dir::kRecv, recvs[i]->root, sizeof(OpRecord));
    v.dst = &in[i];
    t.push_back(v);
  }
  LOOM_TRY(e.Run(t, deadline));
  // 2. Copies: from self, and straight from each sender's memory.
  for (size_t i = 0; i < self_sends.size(); ++i) {
    const size_t sb = self_sends[i]->count * SizeOf(self_sends[i]->type);
    const size_t rb = self_recvs[i]->count * SizeOf(self_recvs[i]->type);
    if (sb != rb) {
      return InvalidUsage("self Send of " + std::to_string(sb) + " bytes matched with a Recv of " +
                          std::to_string(rb) + " bytes");
    }
    if (self_recvs[i]->recv != self_sends[i]->send) {
      LOOM_TRY(ops_->CopyAsync(self_recvs[i]->recv, self_sends[i]->send, sb, stream_));
    }
  }
  for (size_t i = 0; i < recvs.size(); ++i) {
    const CollArgs& a = *recvs[i];
    const OpRecord& rec = in[i];
    const size_t want = a.count * SizeOf(a.type);
    if (rec.magic != kRecordMagic || rec.kind != static_cast<int32_t>(OpKind::kSendRecv)) {
      return InvalidUsage("rank " + std::to_string(a.root) +
                          " did not send from device memory where this rank receives into it "
                          "(every rank must pass cudaMalloc'ed device buffers when CUDA IPC is "
                          "on; NCCL_P2P_DISABLE=1 stages through host memory)");
    }
    if (rec.exported == 0) {
      in[i].why[sizeof(rec.why) - 1] = '\0';
      return InvalidUsage("rank " + std::to_string(a.root) +
                          " cannot share its Send buffer through CUDA IPC (" + in[i].why +
                          "): allocate with cudaMalloc, or set NCCL_P2P_DISABLE=1");
    }
    const size_t got = rec.count * SizeOf(static_cast<DataType>(rec.type));
    if (got != want) {
      return InvalidUsage("rank " + std::to_string(a.root) + " sends " + std::to_string(got) +
                          " bytes but this rank receives " + std::to_string(want) +
                          ": Send/Recv counts must match");
    }
    LOOM_ASSIGN_OR_RETURN(const void* src,
                          PeerPointer(a.root, rec.send, true, (rec.keep & kKeepSend) != 0));
    LOOM_TRY(ops_->CopyAsync(a.recv, src, want, stream_));
  }
  LOOM_TRY(WaitDevice(deadline, abort));
  cache_->ReleaseTransient();
  close_on_error.armed = false;
  // 3. Each receiver tells its sender that the buffer may change again.
  t.clear();
  for (const CollArgs* a : recvs) t.push_back(MakeTransfer(*a, Transfer::Dir::kSend, a->root, 0));
  for (const CollArgs* a : sends) t.push_back(MakeTransfer(*a, Transfer::Dir::kRecv, a->root, 0));
  return e.Run(t, deadline);
}

Status DeviceIpc::Run(Engine& e, int r, const CollArgs& a, Deadline deadline,
                      const std::atomic<bool>& abort) {
  const int n = e.size();
  const size_t es = SizeOf(a.type);
  const size_t bytes = a.count * es;
  if (bytes == 0 && a.kind != OpKind::kBarrier) return Status::Ok();
  // The worker (or a helping user thread) may have another current device.
  LOOM_TRY(ops_->SetDevice(device_));
  LOOM_TRY(EnsureStream());
  ++operations_;
  CloseOnError close_on_error{this};
  const bool root = r == a.root;
  // Which buffers peers read from this rank.
  bool share_send = false, share_recv = false;
  switch (a.kind) {
    case OpKind::kAllReduce: share_send = share_recv = true; break;
    case OpKind::kBroadcast: share_send = root; break;
    case OpKind::kReduceScatter:
    case OpKind::kAllGather:
    case OpKind::kReduce:
    case OpKind::kAllToAll: share_send = true; break;
    default: return InternalError(std::string("CUDA IPC path has no ") + OpKindName(a.kind));
  }
  // The bytes of each buffer the operation covers, and this rank's block
  // of an all-reduce.
  const bool send_blocks = a.kind == OpKind::kReduceScatter || a.kind == OpKind::kAllToAll;
  const bool recv_blocks = a.kind == OpKind::kAllGather || a.kind == OpKind::kAllToAll;
  const size_t send_len = send_blocks ? bytes * n : bytes;
  const size_t recv_len = recv_blocks ? bytes * n : bytes;
  const size_t block_align = std::max<size_t>(1, 64 / es);
  const patterns::Range mine_block = patterns::BlockRange(a.count, n, r, block_align);
  // Unregistered buffers whose shared bytes fit are copied into this rank's
  // copy buffer, which peers map once, instead of being mapped by every
  // peer for this operation alone: [input | this rank's reduced block].
  const size_t out_off = (send_len + 255) & ~size_t{255};
  const size_t copy_need =
      a.kind == OpKind::kAllReduce ? out_off + mine_block.count * es : send_len;
  const bool keep_send = share_send && Registered(a.send, send_len);
  const bool keep_recv = share_recv && Registered(a.recv, recv_len);
  const bool registered = (!share_send || keep_send) && (!share_recv || keep_recv);
  const bool copy_in = n > 1 && share_send && !registered && copy_need <= copy_limit_;
  char* shared = nullptr;
  if (copy_in) {
    LOOM_ASSIGN_OR_RETURN(shared, CopyBuffer());
  }
  const void* send = a.send;
  if (copy_in && !a.premul) {
    LOOM_TRY(ops_->CopyAsync(shared, a.send, send_len, stream_));
    LOOM_TRY(WaitDevice(deadline, abort));
    send = shared;
  } else if (a.kind == OpKind::kAllToAll && a.send == a.recv) {
    // In place: peers read a snapshot while this rank overwrites its buffer.
    LOOM_ASSIGN_OR_RETURN(void* snap, DeviceScratch(bytes * n));
    LOOM_TRY(ops_->CopyAsync(snap, a.send, bytes * n, stream_));
    LOOM_TRY(WaitDevice(deadline, abort));
    send = snap;
  }
  if (a.premul) {
    // A pre-multiplied sum: peers read this rank's scaled input, complete
    // before the exchange below lets them start.
    const size_t elems = a.kind == OpKind::kReduceScatter ? a.count * n : a.count;
    PreMulScalar scalar = a.scalar;
    if (scalar.where == PreMulScalar::Where::kPointer) {
      // A scalar in host memory is read now: the stream's earlier work is over.
      LOOM_ASSIGN_OR_RETURN(const cuda::BufferPlace place, ops_->Classify(scalar.pointer));
      if (place.space == cuda::MemSpace::kHost) {
        std::memcpy(scalar.value, scalar.pointer, es);
        scalar.where = PreMulScalar::Where::kValue;
      }
    }
    void* scaled = shared;
    if (!copy_in) {
      LOOM_ASSIGN_OR_RETURN(scaled, DeviceScratch(elems * es));
    }
    LOOM_TRY(ops_->PreMulAsync(scaled, a.send, elems, a.type, scalar, stream_));
    LOOM_TRY(WaitDevice(deadline, abort));
    send = scaled;
  }
  OpRecord mine;
  mine.count = a.count;
  mine.kind = static_cast<int32_t>(a.kind);
  mine.type = static_cast<int32_t>(a.type);
  // A PreMulSum is its own op here, so a rank that sums plainly is named.
  mine.op = a.premul ? kNumRedOps : static_cast<int32_t>(a.op);
  mine.root = a.root;
  // An export failure (memory from a pool or VMM allocator, say) still
  // sends the record, so every rank fails alike instead of waiting.
  // Peers keep their mappings of registered buffers and of the copy
  // buffer; never of scratch (freed with this communicator, whatever the
  // peers' state).
  auto export_into = [&](const void* p, bool keep, uint8_t keep_bit, cuda::IpcExport* out,
                         uint8_t* has) {
    if (!mine.exported) return;
    Result<cuda::IpcExport> x = ExportOf(p);
    if (x.ok()) {
      *out = x.value();
      *has = 1;
      if (keep) mine.keep |= keep_bit;
    } else {
      mine.exported = 0;
      std::snprintf(mine.why, sizeof(mine.why), "%s", x.status().message().c_str());
    }
  };
  // Copied in, an all-reduce's peers read this rank's block from the copy
  // buffer: they add the block's offset to the receive pointer they get.
  const void* recv_shared =
      copy_in && share_recv ? shared + out_off - mine_block.offset * es : a.recv;
  if (share_send && n > 1) {
    export_into(send, copy_in || (send == a.send && keep_send), kKeepSend, &mine.send,
                &mine.has_send);
  }
  if (share_recv && n > 1) {
    export_into(recv_shared, copy_in || keep_recv, kKeepRecv, &mine.recv, &mine.has_recv);
  }
  std::vector<OpRecord> all;
  all.assign(e.size(), OpRecord{});
  all[r] = mine;
  LOOM_TRY(ExchangeWithAll(e, r, a, &mine, all.data(), sizeof(OpRecord), deadline));
  for (int p = 0; p < n; ++p) {
    if (all[p].magic == kRecordMagic && all[p].exported == 0) {
      all[p].why[sizeof(all[p].why) - 1] = '\0';
      return InvalidUsage("rank " + std::to_string(p) + " cannot share its buffer of " +
                          OpKindName(a.kind) + " through CUDA IPC (" + all[p].why +
                          "): allocate with cudaMalloc, or set NCCL_P2P_DISABLE=1 to stage "
                          "through host memory");
    }
  }
  std::vector<const void*> psend(n), precv(n);
  for (int p = 0; p < n; ++p) {
    if (p == r) {
      psend[p] = send;
      precv[p] = a.recv;
      continue;
    }
    if (all[p].magic != kRecordMagic || all[p].count != a.count || all[p].kind != mine.kind ||
        all[p].type != mine.type || all[p].op != mine.op || all[p].root != mine.root) {
      return InvalidUsage("rank " + std::to_string(p) + " did not run the same " +
                          OpKindName(a.kind) + " of " + std::to_string(a.count) +
                          " elements (same type, op and root) on device memory (every rank must "
                          "pass cudaMalloc'ed device buffers "
                          "when CUDA IPC is on; NCCL_P2P_DISABLE=1 stages through host memory)");
    }
    LOOM_ASSIGN_OR_RETURN(psend[p], PeerPointer(p, all[p].send, all[p].has_send != 0,
                                                (all[p].keep & kKeepSend) != 0));
    LOOM_ASSIGN_OR_RETURN(precv[p], PeerPointer(p, all[p].recv, all[p].has_recv != 0,
                                                (all[p].keep & kKeepRecv) != 0));
  }
  const RedOp op = a.op == RedOp::kAvg ? RedOp::kSum : a.op;
  // dst = reduction of `len` bytes at `off` of every rank's send buffer,
  // this rank's first, then the others in rank order.
  auto reduce_all = [&](void* dst, size_t off, size_t count) -> Status {
    if (count == 0) return Status::Ok();
    const void* acc = At(psend[r], off);
    if (n == 1 && dst != acc) return ops_->CopyAsync(dst, acc, count * es, stream_);
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      LOOM_TRY(ops_->ReduceAsync(dst, acc, At(psend[p], off), count, a.type, op, stream_));
      acc = dst;
    }
    if (a.op == RedOp::kAvg) LOOM_TRY(ops_->ScaleForAvgAsync(dst, count, a.type, n, stream_));
    return Status::Ok();
  };
  auto copy = [&](void* dst, const void* src, size_t len) -> Status {
    if (len == 0 || dst == src) return Status::Ok();
    return ops_->CopyAsync(dst, src, len, stream_);
  };
  switch (a.kind) {
    case OpKind::kAllReduce: {
      LOOM_TRY(reduce_all(At(a.recv, mine_block.offset * es), mine_block.offset * es, mine_block.count));
      if (copy_in) {
        LOOM_TRY(copy(shared + out_off, At(a.recv, mine_block.offset * es), mine_block.count * es));
      }
      LOOM_TRY(WaitDevice(deadline, abort));
      LOOM_TRY(SyncWithAll(e, r, a, deadline));  // every block final
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        const patterns::Range b = patterns::BlockRange(a.count, n, p, block_align);
        LOOM_TRY(copy(At(a.recv, b.offset * es), At(precv[p], b.offset * es), b.count * es));
      }
      break;
    }
    case OpKind::kReduceScatter:
      LOOM_TRY(reduce_all(a.recv, static_cast<size_t>(r) * bytes, a.count));
      break;
    case OpKind::kAllGather:
      for (int p = 0; p < n; ++p) LOOM_TRY(copy(At(a.recv, p * bytes), psend[p], bytes));
      break;
    case OpKind::kBroadcast:
      LOOM_TRY(copy(a.recv, psend[a.root], bytes));
      break;
    case OpKind::kReduce:
      if (root) LOOM_TRY(reduce_all(a.recv, 0, a.count));
      break;
    case OpKind::kAllToAll:
      for (int p = 0; p < n; ++p) {
        LOOM_TRY(copy(At(a.recv, p * bytes), At(psend[p], static_cast<size_t>(r) * bytes), bytes));
      }
      break;
    default:
      break;
  }
  LOOM_TRY(WaitDevice(deadline, abort));
  // Peers' buffers are closed before they hear this rank is done, so none
  // is freed while still open here (undefined behaviour in CUDA).
  cache_->ReleaseTransient();
  close_on_error.armed = false;
  // Nobody returns (and lets its stream change its buffers) while a peer reads.
  return SyncWithAll(e, r, a, deadline);
}

}  // namespace loom
