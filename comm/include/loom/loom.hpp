// loom's C++ API: communicators and collectives.
//
// Contract, in short:
// - A Communicator is created collectively by `size` ranks (threads or
//   processes, on one or many hosts) that share a UniqueId. Create blocks
//   until every rank has joined, the fingerprints matched and every peer
//   connection is up, or fails with a Status naming the rank that was missing
//   or different.
// - Operations on one communicator execute one at a time in the order they
//   were issued: non-blocking ones on the communicator's background thread,
//   blocking ones on the caller's thread when nothing else is pending. Every
//   rank must issue the same collectives in the same order (as NCCL and MPI).
// - Buffers are host memory, or CUDA device memory through the forms that
//   take a GpuStream (see there). The caller owns every buffer and must keep
//   it alive and untouched until the operation completes: the blocking form
//   returns, Work::Wait/Test reports completion, or (device buffers) the
//   stream reaches the end of the operation.
// - Methods may be called from any thread, but issuing order is what the
//   caller's own synchronisation makes it; Abort and AsyncError are safe from
//   any thread at any time.
// - Nothing waits forever: every wait ends at its deadline (CommConfig::timeout,
//   default LOOM_TIMEOUT_MS) or when the communicator is aborted. A peer that
//   dies makes every pending and later operation fail with RemoteError naming
//   it; the first asynchronous error sticks.
// - all-reduce results are bit-identical on every rank.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "loom/status.hpp"
#include "loom/types.hpp"

struct CUstream_st;  // CUDA's opaque stream type, declared without CUDA headers

namespace loom {

// A CUDA stream (cudaStream_t), the same opaque type nccl.h declares; nullptr
// is CUDA's legacy default stream.
using GpuStream = CUstream_st*;

// The rendezvous ticket: address of rank 0's store and a random job secret.
// Plain bytes (128, like ncclUniqueId) so it can travel over MPI, files, env.
struct UniqueId {
  std::array<uint8_t, 128> bytes{};

  // Picks an address of this host (NCCL_SOCKET_IFNAME rules) and a free port,
  // and draws a fresh secret. The caller becomes the store host: pass the id
  // to rank 0 of Communicator::Create in this process.
  static Result<UniqueId> Create();
  // "host:port" plus secret, for a launcher that picked the port itself.
  static Result<UniqueId> FromAddress(const std::string& host_port, uint64_t secret);
  std::string ToString() const;  // "host:port/secret-hex", for logs and env
  static Result<UniqueId> Parse(const std::string& text);
};

struct CommConfig {
  // Limit for every wait inside the communicator; 0 = LOOM_TIMEOUT_MS.
  std::chrono::milliseconds timeout{0};
  // Name shown in logs (NCCL's commName).
  std::string name;
};

inline constexpr int kSplitNoColor = -1;  // NCCL_SPLIT_NOCOLOR

class Communicator;

// Handle of one issued operation. Cheap to copy; all copies see the same
// operation. An invalid call yields a Work that is already complete with the
// error.
class [[nodiscard]] Work {
 public:
  Work() = default;
  // Blocks until the operation completes or the deadline passes (kTimeout;
  // the operation itself goes on). Returns the operation's Status.
  Status Wait(Deadline deadline = Deadline::Never()) const;
  // Non-blocking: true when complete (then Wait returns at once).
  bool Test() const;
  // Calls `callback` with the operation's Status exactly once, when it
  // completes: at once on the calling thread if it already has, else on the
  // thread that completes it (the communicator's worker, or a thread running
  // queued ops inside Wait or a blocking call), after Wait and Test see it
  // complete. Callbacks added before completion run in the order added. The
  // callback runs while that thread holds the communicator's execution, so
  // it must be short and must not wait for operations of the same
  // communicator (a blocking call, Wait, Finalize, or destroying it would
  // wait for itself); issuing non-blocking operations is fine. An op never
  // run (communicator destroyed or finalized) completes with its error.
  // Empty handle: kInvalidUsage, calling nothing.
  Status OnComplete(std::function<void(const Status&)> callback) const;

  struct State;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

class Communicator {
 public:
  // Collective over `size` ranks sharing `id`. Blocks (see the contract).
  static Result<std::unique_ptr<Communicator>> Create(const UniqueId& id, int rank, int size,
                                                      const CommConfig& config = {});
  // Rank, size and rendezvous from the launcher's environment, in order:
  // LOOM_RANK/LOOM_WORLD_SIZE/LOOM_ROOT; torchrun's RANK/WORLD_SIZE/
  // MASTER_ADDR/MASTER_PORT; Open MPI's OMPI_COMM_WORLD_*; Slurm's
  // SLURM_PROCID/SLURM_NTASKS; PMI_RANK/PMI_SIZE. The last three need
  // LOOM_ROOT or MASTER_ADDR/MASTER_PORT for the address.
  static Result<std::unique_ptr<Communicator>> CreateFromEnv(const CommConfig& config = {});

  // Destroys: completes outstanding work (bounded by the timeout) unless
  // aborted, then tears the connections down.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Collective: all ranks call it. Ranks with the same color form a new
  // communicator, ordered by (key, old rank). kSplitNoColor yields nullptr.
  Result<std::unique_ptr<Communicator>> Split(int color, int key, const CommConfig& config = {});

  // Waits for every issued operation, then says goodbye to the peers.
  Status Finalize();
  // Any thread, any time: pending and future operations fail with kRemoteError
  // ("aborted"); waits return at once.
  void Abort();
  // The first asynchronous error (a dead peer, a timeout), or OK.
  Status AsyncError() const;

  int rank() const;
  int size() const;
  const std::string& host() const;
  // The CUDA device that was current when this communicator was created
  // (NCCL's ncclCommCuDevice); kInvalidUsage in a process without a GPU.
  Result<int> cuda_device() const;

  // --- buffer registration, like ncclCommRegister (not collective) ---
  // Promises that [buf, buf + bytes) stays allocated until DeregisterBuffer.
  // With CUDA IPC on, peers then keep their mapping of a registered device
  // buffer across operations instead of opening and closing it in each one
  // (an operation's buffer counts when it lies inside one registration).
  // Host buffers, and device buffers that are staged, are recorded and
  // change nothing. Returns a handle, never 0. kInvalidArgument for a null
  // buf, 0 bytes, or a range that wraps around.
  Result<uint64_t> RegisterBuffer(const void* buf, size_t bytes);
  // Forgets the handle. When peers kept a mapping of it, waits for the
  // operations issued so far, then every peer closes its mapping before
  // this returns (their communicators answer even while idle), so the
  // buffer may be freed afterwards; do not issue operations on it
  // meanwhile. kInvalidArgument for an unknown handle; kTimeout or
  // kRemoteError naming the peers that could not confirm (then do not free
  // the buffer before their communicators are gone).
  Status DeregisterBuffer(uint64_t handle);

  // --- non-blocking forms: issue and return a Work ---
  Work AllReduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType type,
                      const Reduction& op);
  // recvcount elements land on each rank; sendbuf holds size()*recvcount.
  Work ReduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvcount, DataType type,
                          const Reduction& op);
  // recvbuf holds size()*sendcount.
  Work AllGatherAsync(const void* sendbuf, void* recvbuf, size_t sendcount, DataType type);
  Work BroadcastAsync(const void* sendbuf, void* recvbuf, size_t count, DataType type, int root);
  // recvbuf matters on root only.
  Work ReduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType type,
                   const Reduction& op, int root);
  // count elements to and from each peer; buffers hold size()*count.
  Work AllToAllAsync(const void* sendbuf, void* recvbuf, size_t count, DataType type);
  Work SendAsync(const void* buf, size_t count, DataType type, int peer);
  Work RecvAsync(void* buf, size_t count, DataType type, int peer);
  Work BarrierAsync();

  // --- blocking forms: issue and wait (bounded by the timeout) ---
  Status AllReduce(const void* sendbuf, void* recvbuf, size_t count, DataType type,
                   const Reduction& op);
  Status ReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount, DataType type,
                       const Reduction& op);
  Status AllGather(const void* sendbuf, void* recvbuf, size_t sendcount, DataType type);
  Status Broadcast(const void* sendbuf, void* recvbuf, size_t count, DataType type, int root);
  Status Reduce(const void* sendbuf, void* recvbuf, size_t count, DataType type,
                const Reduction& op, int root);
  Status AllToAll(const void* sendbuf, void* recvbuf, size_t count, DataType type);
  Status Send(const void* buf, size_t count, DataType type, int peer);
  Status Recv(void* buf, size_t count, DataType type, int peer);
  Status Barrier();

  // --- stream forms, like NCCL's (device buffers) ---
  // With device buffers (cudaMalloc or managed memory) the call returns once
  // the operation is enqueued on `stream`: it starts after the work queued on
  // `stream` before it, and work queued after it waits for its results. Both
  // buffers must be device memory, else kInvalidUsage. The returned Status
  // covers the arguments and the enqueueing; a later failure (a peer, a
  // timeout, Abort) sets AsyncError and releases the stream, whose results
  // are then undefined. With host buffers the stream is not used and the
  // call is the blocking form above. Inside a group: collected, and
  // GroupEnd issues the batch releasing each stream once.
  Status AllReduce(const void* sendbuf, void* recvbuf, size_t count, DataType type,
                   const Reduction& op, GpuStream stream);
  Status ReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount, DataType type,
                       const Reduction& op, GpuStream stream);
  Status AllGather(const void* sendbuf, void* recvbuf, size_t sendcount, DataType type,
                   GpuStream stream);
  Status Broadcast(const void* sendbuf, void* recvbuf, size_t count, DataType type, int root,
                   GpuStream stream);
  Status Reduce(const void* sendbuf, void* recvbuf, size_t count, DataType type,
                const Reduction& op, int root, GpuStream stream);
  Status AllToAll(const void* sendbuf, void* recvbuf, size_t count, DataType type,
                  GpuStream stream);
  Status Send(const void* buf, size_t count, DataType type, int peer, GpuStream stream);
  Status Recv(void* buf, size_t count, DataType type, int peer, GpuStream stream);

  class Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Groups, like ncclGroupStart/ncclGroupEnd (per thread, nestable). Between
// them, operations on any communicator are collected instead of issued (the
// blocking forms return OK at once); GroupEnd issues each communicator's batch
// as one operation in which all sends and receives progress together, then
// waits for all of them. Needed for exchanges that would deadlock one by one.
Status GroupStart();
Status GroupEnd();

// Host memory that the ranks of one host read from one another without
// copies (what ncclMemAlloc is to NCCL's device buffers): an anonymous
// memory file, zeroed and pre-faulted, that peers map once. Collectives
// that read peers' buffers directly (all-gather, broadcast, the Direct
// algorithms) then use plain loads instead of a cross-memory read that pins
// the peer's pages on every call. Any host buffer still works; this one is
// faster between processes. Thread-safe. bytes must be > 0.
Result<void*> AllocShared(size_t bytes);
// Frees what AllocShared returned (InvalidUsage for anything else). Peers
// that mapped it keep the pages until their next direct read from this
// process, until they have mapped 16 newer allocations of it, or until
// their communicator is destroyed.
Status FreeShared(void* p);

// "0.1.0"
const char* Version();
// LOOM_VERSION_CODE-style integer, NCCL-like: major*10000 + minor*100 + patch.
int VersionCode();

}  // namespace loom
