// DeviceIpc: collectives on device buffers of ranks that share a host, with
// the device reading peers' buffers directly through CUDA IPC mappings
// instead of staging them through host memory.
//
// Setup (once per communicator, in Communicator::Create): every rank
// publishes its GPU's PCI bus id and its NCCL_P2P_DISABLE / NCCL_P2P_LEVEL in
// the setup record. The IPC path is on only if all ranks share one host, all
// have a device, none disabled P2P, and every rank can map every other
// rank's GPU over a path no farther than the most restrictive rank's level
// (one GPU shared by several processes is LOC, always allowed). Each rank
// checks the last part itself and the verdicts are all-gathered, so every
// rank takes the same path for every operation.
//
// Per operation (the worker thread, after the user stream's earlier work
// finished, see device_path.h): ranks swap IpcExports of the buffers the
// operation touches over the communicator's transports, map them for this
// operation (IpcMappingCache; closed again before the final sync, because a
// user may free a buffer as soon as its stream passed the operation, and
// CUDA forbids freeing memory a peer still has open), and enqueue copies and
// reduction kernels on the communicator's own stream that read the peers'
// buffers:
//   all-reduce      reduce my block from every send buffer; sync; copy the
//                   other blocks from their owners' receive buffers; sync
//   reduce-scatter  reduce my block from every send buffer; sync
//   all-gather      copy every rank's send buffer into my receive buffer; sync
//   broadcast       copy the root's send buffer; sync
//   reduce          the root reduces from every send buffer; sync
//   all-to-all      copy block r of every send buffer (in place: of a
//                   snapshot in scratch device memory); sync
// "sync" is an empty message to and from every peer once this rank's device
// work completed, so no buffer changes while a peer still reads it. Each
// block is reduced by one rank in one order (own first, then peers by rank),
// so all ranks end bit-identical. Send/Recv: the receiver copies from the
// sender's buffer, then acknowledges (RunSendRecv).
//
// Unregistered buffers: mapping a peer's buffer costs a
// cudaIpcOpenMemHandle and a close per operation. So when the bytes peers
// read from a rank fit LOOM_CUDA_IPC_COPY_BYTES (4 MiB by default), the rank
// first copies its input into its copy buffer, device memory allocated once
// that peers map once and keep; an all-reduce also copies its reduced block
// there. Larger operations map the user's buffers as above. Finalize has
// every peer close its mapping of the copy buffer (as for a deregistered
// buffer, below) before the destructor frees it.
//
// Registered buffers (Register, what ncclCommRegister promises: the memory
// stays allocated until deregistered) are marked in the records, and peers
// keep their mappings of them across operations. Deregister must then make
// every peer close its mapping before the user may free the memory, and a
// peer's worker may be idle: so the owner sends each peer a notice through
// the rendezvous store, whose reader thread closes the mapping and answers
// (OnNotice), and the owner waits for every answer. No read of the buffer
// can be under way then: each operation that used it ended with a sync
// after the peers' device work, and Deregister runs after they completed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/algos/algorithms.h"
#include "base/status.h"
#include "topology/paths.h"
#include "transports/cuda/device_ops.h"
#include "transports/engine.h"

namespace loom {

namespace bootstrap {
class StoreClient;
}

// NCCL_P2P_LEVEL: a path name (LOC, NVL, PIX, PXB, PHB, SYS; NVB and NODE
// too) or NCCL's legacy integers 0-5 (LOC, PIX, PXB, PHB, SYS, SYS). Empty
// means NCCL's default, PXB. InvalidArgument naming the value otherwise.
Result<topology::PathType> ParseP2pLevel(std::string_view text);

class DeviceIpc {
 public:
  DeviceIpc() = default;
  // Waits (bounded) for the communicator's stream, then releases it and
  // every mapping.
  ~DeviceIpc();
  DeviceIpc(const DeviceIpc&) = delete;
  DeviceIpc& operator=(const DeviceIpc&) = delete;

  // This rank's part of the setup record: "" without device ops, else the
  // bus id, the P2P settings and a random number naming this process (pids
  // repeat across containers). Never fails; a bad NCCL_P2P_LEVEL is
  // reported by Setup.
  static std::string LocalRecord(cuda::DeviceOps* ops);

  // Decides whether the IPC path is on (see the file comment). `records`
  // are every rank's LocalRecord; the verdict round over `store` runs only
  // when the records allow IPC, which every rank computes alike.
  Status Setup(cuda::DeviceOps* ops, bootstrap::StoreClient& store, int rank,
               const std::vector<std::string>& records, const std::vector<std::string>& host_ids,
               Deadline deadline);

  bool enabled() const { return enabled_; }
  // Why the IPC path is off ("" when on), for logs and tests.
  const std::string& why_not() const { return why_not_; }
  // Whether a device-buffer operation of `kind` runs here (else it is staged).
  bool Handles(OpKind kind) const { return enabled_ && kind != OpKind::kBarrier; }

  // Runs one collective whose buffers are device memory. Blocks until this
  // rank's device work for it completed and every peer is done reading this
  // rank's buffers; kTimeout at `deadline`, RemoteError once `abort` is set.
  Status Run(Engine& engine, int rank, const CollArgs& a, Deadline deadline,
             const std::atomic<bool>& abort);

  // Runs one batch's Send/Recv items on device buffers: each sender tells
  // its receiver where the data is, the receiver copies it straight from the
  // sender's memory and then acknowledges, so the sender's stream goes on
  // only once its buffer was read. Messages between a pair match in issue
  // order (NCCL's rule); the i-th send to self matches the i-th receive
  // from self.
  Status RunSendRecv(Engine& engine, int rank, std::span<const CollArgs> items, Deadline deadline,
                     const std::atomic<bool>& abort);

  // Peer allocations mapped so far and collectives run (for tests).
  cuda::IpcMappingCache::Stats mapping_stats() const;
  uint64_t operations() const { return operations_; }

  // --- Registered buffers (any thread) ---
  // The allocation a registration lets peers keep mapped (size 0: none).
  struct Allocation {
    uint64_t base = 0;
    uint64_t size = 0;
  };
  // Records [ptr, ptr + bytes) as registered; returns its handle (never 0).
  // Host memory, and any memory while the IPC path is off, is recorded too
  // (so its handle can be deregistered) but no peer maps it.
  uint64_t Register(const void* ptr, size_t bytes);
  // Forgets `handle`; returns the allocation peers may still keep mapped,
  // size 0 when none does (or another registration still covers it).
  // InvalidArgument for a handle not registered (or deregistered already).
  Result<Allocation> Unregister(uint64_t handle);
  // Asks every peer that may map `a` to close its mapping and waits for
  // each answer (a peer that left answers through the store) until
  // `deadline`, asking a silent peer again (one that is leaving may drop a
  // request). Errors name the ranks: kTimeout for silence, kRemoteError
  // when a peer's device may still read the buffer (a failed operation's
  // work had not finished there), or when the store is gone. The memory must
  // not be freed after an error.
  // `what` names the buffer in errors ("the deregistered buffer").
  Status ClosePeerMappings(bootstrap::StoreClient& store, Allocation a, const char* what,
                           Deadline deadline);
  // A notice from rank `from`, on the store's reader thread (see
  // StoreClient::NoticeCallback).
  void OnNotice(bootstrap::StoreClient& store, int from, bool gone, const std::string& payload);
  // Has every peer close its mapping of this rank's copy buffer, so the
  // destructor may free it (else it stays allocated until the process
  // exits). Finalize calls it after the last operation.
  Status RetireCopyBuffer(bootstrap::StoreClient& store, Deadline deadline);
  // Closes every peer mapping, kept ones too, unless device work may still
  // read one. Finalize calls it before its goodbye, after which peers no
  // longer ask this rank to close anything.
  void CloseAllMappings();

 private:
  struct Buffers;  // device_ipc.cc
  Status EnsureStream();
  Status WaitDevice(Deadline deadline, const std::atomic<bool>& abort);
  Result<void*> DeviceScratch(size_t bytes);  // grows scratch_ (never frees in use)
  Result<char*> CopyBuffer();                 // copy_buffer_, allocated at first use
  // The export of `p`: derived from the copy buffer's (taken once, at its
  // allocation) when p lies inside it, so no CUDA call per operation; else
  // from the backend.
  Result<cuda::IpcExport> ExportOf(const void* p);
  Result<const void*> PeerPointer(int peer, const cuda::IpcExport& e, bool present, bool keep);
  // Whether [p, p + bytes) lies inside one registration.
  bool Registered(const void* p, size_t bytes) const;
  // An operation that failed closes the peer mappings it opened if its
  // device work is over (none was enqueued, or it finished); otherwise they
  // stay open until the destructor has drained the stream.
  void CloseMappingsIfIdle();
  struct CloseOnError {
    DeviceIpc* self;
    bool armed = true;
    ~CloseOnError() {
      if (armed) self->CloseMappingsIfIdle();
    }
  };

  cuda::DeviceOps* ops_ = nullptr;
  bool enabled_ = false;
  std::string why_not_ = "no device";
  std::vector<uint64_t> process_;  // per rank: LocalRecord's process number
  int device_ = 0;                  // current at creation; the worker sets it
  int rank_ = 0;
  std::unique_ptr<cuda::IpcMappingCache> cache_;
  cuda::StreamHandle stream_ = nullptr;
  cuda::EventHandle done_ = nullptr;
  bool have_stream_ = false;
  void* scratch_ = nullptr;  // device memory for in-place all-to-all
  size_t scratch_bytes_ = 0;
  // Outgrown scratch, freed only at destruction: cudaFree waits for the
  // whole device, including the user stream that waits for this operation.
  std::vector<void*> retired_;
  uint64_t operations_ = 0;
  // LOOM_CUDA_IPC_COPY_BYTES of device memory, allocated at the first
  // operation that copies in; peers keep it mapped (see Run).
  size_t copy_limit_ = 0;
  char* copy_buffer_ = nullptr;
  cuda::IpcExport copy_export_;  // of copy_buffer_
  bool copy_free_ok_ = false;  // RetireCopyBuffer: no peer maps it any more
  // Device work of a failed operation may still run (CloseMappingsIfIdle
  // gave up): mappings must not close under it. Cleared once the stream
  // drained.
  std::atomic<bool> unsettled_{false};

  struct Registration {
    uintptr_t ptr;
    size_t bytes;
    Allocation allocation;
  };
  mutable std::mutex reg_mu_;
  std::map<uint64_t, Registration> registrations_;
  uint64_t next_handle_ = 1;

  // ClosePeerMappings' requests awaiting answers (notice_mu_).
  struct PendingClose {
    std::set<int> waiting;  // ranks that have not answered
    std::vector<int> busy;  // ranks whose device may still read the buffer
  };
  std::mutex notice_mu_;
  std::condition_variable notice_cv_;
  std::map<uint64_t, PendingClose> pending_;
  uint64_t next_request_ = 1;
};

}  // namespace loom
