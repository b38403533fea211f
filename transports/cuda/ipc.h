// CUDA IPC between ranks on one host: what a rank publishes about one of its
// device allocations (IpcExport), the CUDA calls behind export/open/close
// (IpcBackend, faked in tests), and the per-communicator cache that maps each
// peer allocation once (IpcMappingCache).
//
// Flow: the owner calls backend.Export(ptr) and sends the IpcExport (plain
// bytes) to its local peers through the bootstrap exchange; each peer calls
// cache.Map(owner_rank, export, registered) and gets a pointer it can pass to kernels.
// Several processes on one GPU are allowed: IPC handles work within a device.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "base/status.h"

namespace loom::cuda {

// One exported device allocation, as plain bytes that travel between
// processes (trivially copyable, fixed layout).
struct IpcExport {
  std::array<char, 64> handle{};  // cudaIpcMemHandle_t (CUDA_IPC_HANDLE_SIZE bytes)
  uint64_t base = 0;              // allocation base in the owner's address space
  uint64_t size = 0;              // allocation size in bytes
  uint64_t offset = 0;            // the exported pointer minus base
};
static_assert(sizeof(IpcExport) == 88);

// The CUDA calls the cache needs. The real one (MakeCudaIpcBackend) uses
// cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle and the
// driver's cuMemGetAddressRange; tests use a fake. Thread-safe.
class IpcBackend {
 public:
  virtual ~IpcBackend() = default;
  // Describes the allocation that contains `ptr` (device memory from
  // cudaMalloc on the current device). Errors: kInvalidArgument for memory
  // that cannot be exported, kUnhandledCudaError from the runtime.
  virtual Result<IpcExport> Export(const void* ptr) = 0;
  // Maps the whole exported allocation into this process; returns its base.
  virtual Result<void*> Open(const IpcExport& e) = 0;
  // Unmaps a base returned by Open. Errors are logged, not returned: close
  // happens in teardown paths that cannot act on them.
  virtual void Close(void* mapped_base) = 0;
};

// The CUDA runtime backend.
std::unique_ptr<IpcBackend> MakeCudaIpcBackend();

// Peer allocations mapped into this process.
//
// CUDA makes it undefined behaviour for an owner to cudaFree memory that a
// peer still has open, and loom cannot know when a user frees a buffer. So a
// mapping is transient unless its owner registered the buffer
// (Communicator::RegisterBuffer, ncclCommRegister: a promise that it stays
// allocated until deregistered): the operation that opened a transient
// mapping closes it (ReleaseTransient) once its device work is done and
// before it tells the owner that it finished, so the owner's stream never
// goes on, and the user never frees, while a peer holds the memory open.
// Kept mappings are reused by every later operation on a buffer inside
// them, until the owner deregisters and asks its peers to close them
// (ForgetRange).
//
// Entries are keyed by (peer, base, size). A peer that frees and allocates
// again may get the same base: the handle then differs (CUDA guarantees a new
// handle for new memory), so a key hit with another handle closes the stale
// mapping and opens the new one. A new allocation overlapping a cached one of
// the same peer also evicts it (the old one must have been freed).
//
// Thread-safe (one mutex; Open runs under it). Does not own the backend,
// which must outlive the cache. Closes every mapping on destruction.
class IpcMappingCache {
 public:
  explicit IpcMappingCache(IpcBackend* backend) : backend_(backend) {}
  ~IpcMappingCache();
  IpcMappingCache(const IpcMappingCache&) = delete;
  IpcMappingCache& operator=(const IpcMappingCache&) = delete;

  // Local address of the peer's exported pointer (mapped base + offset),
  // opening the allocation unless it is open already. `keep` is the owner's
  // current word on the allocation: registered, so the mapping stays for
  // later operations, or not (then it is transient, until ReleaseTransient).
  // Errors: kInvalidArgument for an export whose offset is outside its
  // allocation or whose size is 0, and whatever the backend's Open returns
  // (nothing is cached then).
  Result<void*> Map(int peer, const IpcExport& e, bool keep);

  // Closes every transient mapping. Call only once the device no longer
  // reads any of them.
  void ReleaseTransient();

  // Closes every mapping of `peer` (it left, or the communicator is being
  // aborted); later Maps open afresh.
  void ForgetPeer(int peer);

  // Closes every mapping of `peer` that overlaps [base, base + size) in the
  // peer's address space (the owner deregistered it); returns how many.
  // Call only while the device does not read them.
  size_t ForgetRange(int peer, uint64_t base, uint64_t size);

  // Closes every mapping, kept or not (the communicator is finalized).
  void Clear();

  struct Stats {
    uint64_t hits = 0;
    uint64_t opens = 0;
    uint64_t evictions = 0;  // stale or overlapping mappings closed
    uint64_t releases = 0;   // transient mappings closed by ReleaseTransient
    uint64_t forgotten = 0;  // kept mappings closed by ForgetRange (deregistered)
  };
  Stats stats() const;
  size_t size() const;  // live mappings

 private:
  struct Key {
    int peer;
    uint64_t base;
    uint64_t size;
    auto operator<=>(const Key&) const = default;
  };
  struct Entry {
    std::array<char, 64> handle;
    void* mapped;
    bool keep;
  };
  // Closes peer's mappings overlapping [base, base + size); holds mu_.
  size_t CloseOverlapping(int peer, uint64_t base, uint64_t size);

  IpcBackend* backend_;
  mutable std::mutex mu_;
  std::map<Key, Entry> entries_;
  Stats stats_;
};

}  // namespace loom::cuda
