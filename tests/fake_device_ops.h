// FakeDeviceOps: DeviceOps without a GPU, for tests. A "device" buffer is
// host memory the fake tags as device; a "stream" is a FIFO of tasks run in
// order by one thread, so stream-order semantics (return once enqueued, start
// after earlier work, later work waits) hold exactly as on a GPU.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "transports/cuda/device_ops.h"

namespace loom::cuda {

// Thread-safe. Owns its streams, events, device and pinned allocations; all
// are released when it is destroyed, which first runs every queued task
// (stream waits that were never satisfied give up then). Destroy it only
// after the communicators that use it.
class FakeDeviceOps final : public DeviceOps {
 public:
  FakeDeviceOps();
  ~FakeDeviceOps() override;
  FakeDeviceOps(const FakeDeviceOps&) = delete;
  FakeDeviceOps& operator=(const FakeDeviceOps&) = delete;

  // --- DeviceOps ---
  const char* name() const override { return "fake"; }
  Result<BufferPlace> Classify(const void* ptr) override;
  Result<void*> AllocPinned(size_t bytes) override;
  void FreePinned(void* p) override;
  Status CopyAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) override;
  Result<EventHandle> CreateEvent() override;
  void DestroyEvent(EventHandle event) override;
  Status RecordEvent(EventHandle event, StreamHandle stream) override;
  Result<bool> QueryEvent(EventHandle event) override;
  Status StreamWaitValue(StreamHandle stream, const uint64_t* word, uint64_t value) override;
  Result<StreamHandle> NewStream() override { return CreateStream(); }
  void DestroyStream(StreamHandle stream) override;
  Status ReduceAsync(void* dst, const void* a, const void* b, size_t count, DataType type,
                     RedOp op, StreamHandle stream) override;
  Status ScaleForAvgAsync(void* buf, size_t count, DataType type, int nranks,
                          StreamHandle stream) override;
  // A kPointer scalar is read when the stream runs the work, as on a GPU.
  Status PreMulAsync(void* dst, const void* src, size_t count, DataType type,
                     const PreMulScalar& scalar, StreamHandle stream) override;
  Result<void*> AllocScratch(size_t bytes) override { return AllocDevice(bytes); }
  void FreeScratch(void* p) override {
    if (p != nullptr) FreeDevice(p);
  }
  // Exports name a live "device" allocation; Open gives back its base (one
  // process), and fails once the allocation was freed.
  IpcBackend& ipc() override { return ipc_; }
  bool ipc_within_process() const override { return ipc_within_process_.load(); }
  // The calling thread's device, as CUDA keeps it per thread; device d's
  // bus id is "0000:0d:00.0" (d in hex). All devices reach each other.
  Result<int> CurrentDevice() override;
  Status SetDevice(int device) override;
  Result<std::string> CurrentBusId() override;
  Result<bool> CanAccessPeer(const std::string& bus_id) override;
  Status EnablePeerAccess(const std::string& bus_id) override;
  Result<bool> DmaBufSupported() override { return dmabuf_.load(); }
  // The "device" allocation holding ptr, page-widened; the dma-buf is an
  // eventfd standing in for one (the caller closes it).
  Result<Allocation> AllocationOf(const void* ptr, bool dmabuf) override;
  Status FlushRdmaWrites() override;

  // --- what a test drives ---
  void set_dmabuf_supported(bool on) { dmabuf_.store(on); }
  // Devices there are (1 unless set; at most 16); peer accesses enabled so far.
  void set_device_count(int n) { devices_.store(n); }
  // false: report, as CUDA does, that this process cannot open its own
  // exports, so ranks of one process read each other through raw pointers
  // (default true: thread ranks then exercise the mapping cache).
  void set_ipc_within_process(bool on) { ipc_within_process_.store(on); }
  size_t peer_accesses_enabled() const { return peer_enables_.load(); }
  size_t rdma_flushes() const { return rdma_flushes_.load(); }
  // Flushes by a thread whose current device was `device`.
  size_t rdma_flushes_on(int device) const;
  // A new stream (never nullptr: the fake has no legacy default stream).
  StreamHandle CreateStream();
  // `bytes` of zeroed "device" memory (at least 1 byte is allocated).
  void* AllocDevice(size_t bytes);
  void FreeDevice(void* p);
  // Queues `task` on `stream`, like cudaLaunchHostFunc.
  void Enqueue(StreamHandle stream, std::function<void()> task);
  // Blocks until every task queued on `stream` so far has run, or the
  // deadline (then kTimeout).
  Status Synchronize(StreamHandle stream, Deadline deadline);
  // Tasks queued on `stream` that have not finished.
  size_t Pending(StreamHandle stream);
  // AllocPinned calls so far, and pinned blocks currently allocated.
  size_t pinned_allocations() const { return pinned_allocs_.load(); }
  size_t pinned_live() const;
  // A failure the next CopyAsync returns, as a CUDA error would.
  void FailNextCopy() { fail_next_copy_.store(true); }
  // IPC opens and closes so far, and reduction kernels launched.
  size_t ipc_opens() const { return ipc_opens_.load(); }
  size_t ipc_closes() const { return ipc_closes_.load(); }
  size_t reduce_launches() const { return reduce_launches_.load(); }
  size_t premul_launches() const { return premul_launches_.load(); }
  // FreeDevice calls on memory some rank still had open through IPC:
  // undefined behaviour with CUDA, so tests expect none.
  size_t frees_while_mapped() const { return frees_while_mapped_.load(); }

 private:
  class FakeStream;
  struct FakeEvent;
  FakeStream* Find(StreamHandle stream);

  class FakeIpc final : public IpcBackend {
   public:
    explicit FakeIpc(FakeDeviceOps& ops) : ops_(ops) {}
    Result<IpcExport> Export(const void* ptr) override;
    Result<void*> Open(const IpcExport& e) override;
    void Close(void* mapped_base) override;

   private:
    FakeDeviceOps& ops_;
  };

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<FakeStream>> streams_;
  std::vector<std::unique_ptr<FakeEvent>> events_;
  struct DeviceAlloc {
    std::unique_ptr<char[]> mem;
    size_t bytes;
    uint64_t serial;  // distinguishes a reallocation at the same address
  };
  std::map<const char*, DeviceAlloc> device_;  // by base address
  std::map<const void*, int> imports_;         // open IPC mappings by base
  std::map<void*, std::unique_ptr<char[]>> pinned_;
  std::atomic<size_t> pinned_allocs_{0};
  std::atomic<bool> fail_next_copy_{false};
  std::atomic<bool> dmabuf_{true};
  std::atomic<int> devices_{1};
  std::atomic<bool> ipc_within_process_{true};
  std::atomic<size_t> peer_enables_{0};
  std::atomic<size_t> rdma_flushes_{0};
  std::map<int, size_t> flushes_by_device_;  // guarded by mu_
  std::atomic<bool> stopping_{false};
  uint64_t next_serial_ = 0;
  std::atomic<size_t> ipc_opens_{0}, ipc_closes_{0}, reduce_launches_{0}, frees_while_mapped_{0},
      premul_launches_{0};
  FakeIpc ipc_{*this};
};

}  // namespace loom::cuda
