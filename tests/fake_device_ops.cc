// FakeDeviceOps: streams as task FIFOs run by one thread each, events as
// generation counters, device memory as tagged host memory.
#include "tests/fake_device_ops.h"

#include <sys/eventfd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iterator>
#include <thread>

#include "collectives/reduce/reduce.h"

namespace loom::cuda {

// One stream: tasks run in FIFO order on the stream's own thread.
class FakeDeviceOps::FakeStream {
 public:
  FakeStream() : thread_([this] { Run(); }) {}
  ~FakeStream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();  // runs what is queued first (Run drains before it stops)
  }

  void Push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
      ++queued_;
    }
    cv_.notify_all();
  }

  bool WaitDrained(Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = queued_;
    return cv_.wait_until(lock, deadline.at(), [&] { return finished_ >= target; });
  }

  size_t Pending() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<size_t>(queued_ - finished_);
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
      ++finished_;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  uint64_t queued_ = 0, finished_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

// Recording bumps `recorded`; the stream stores that generation into
// `completed` when it reaches the record. Never recorded: 0 >= 0, complete.
struct FakeDeviceOps::FakeEvent {
  std::atomic<uint64_t> recorded{0};
  std::atomic<uint64_t> completed{0};
};

FakeDeviceOps::FakeDeviceOps() = default;

FakeDeviceOps::~FakeDeviceOps() {
  stopping_.store(true);  // unsatisfied stream waits give up
  std::vector<std::unique_ptr<FakeStream>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams.swap(streams_);
  }
  streams.clear();  // joins each stream's thread after its queue ran
}

FakeDeviceOps::FakeStream* FakeDeviceOps::Find(StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : streams_) {
    if (reinterpret_cast<StreamHandle>(s.get()) == stream) return s.get();
  }
  return nullptr;
}

Result<BufferPlace> FakeDeviceOps::Classify(const void* ptr) {
  BufferPlace place;
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = device_.upper_bound(p);
  if (it != device_.begin()) {
    --it;
    if (p < it->first + it->second.bytes) {
      place.space = MemSpace::kDevice;
      place.device = 0;
      place.kind = "device";
      return place;
    }
  }
  if (pinned_.count(const_cast<void*>(ptr)) != 0) place.kind = "pinned host";
  return place;
}

Result<void*> FakeDeviceOps::AllocPinned(size_t bytes) {
  auto mem = std::make_unique<char[]>(bytes == 0 ? 1 : bytes);
  void* p = mem.get();
  std::lock_guard<std::mutex> lock(mu_);
  pinned_.emplace(p, std::move(mem));
  ++pinned_allocs_;
  return p;
}

void FakeDeviceOps::FreePinned(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  pinned_.erase(p);
}

size_t FakeDeviceOps::pinned_live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pinned_.size();
}

Status FakeDeviceOps::CopyAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) {
  if (fail_next_copy_.exchange(false)) {
    return Status(Code::kUnhandledCudaError,
                  "cudaMemcpyAsync failed: cudaErrorLaunchFailure (injected by the fake)");
  }
  FakeStream* s = Find(stream);
  if (s == nullptr) return InvalidArgument("fake CopyAsync: unknown stream");
  s->Push([dst, src, bytes] { std::memcpy(dst, src, bytes); });
  return Status::Ok();
}

Result<EventHandle> FakeDeviceOps::CreateEvent() {
  auto e = std::make_unique<FakeEvent>();
  auto handle = reinterpret_cast<EventHandle>(e.get());
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(std::move(e));
  return handle;
}

void FakeDeviceOps::DestroyEvent(EventHandle event) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(events_, [&](const auto& e) {
    return reinterpret_cast<EventHandle>(e.get()) == event;
  });
}

Status FakeDeviceOps::RecordEvent(EventHandle event, StreamHandle stream) {
  FakeStream* s = Find(stream);
  if (s == nullptr) return InvalidArgument("fake RecordEvent: unknown stream");
  auto* e = reinterpret_cast<FakeEvent*>(event);
  const uint64_t gen = e->recorded.fetch_add(1) + 1;
  s->Push([e, gen] { e->completed.store(gen, std::memory_order_release); });
  return Status::Ok();
}

Result<bool> FakeDeviceOps::QueryEvent(EventHandle event) {
  auto* e = reinterpret_cast<FakeEvent*>(event);
  return e->completed.load(std::memory_order_acquire) >= e->recorded.load();
}

Status FakeDeviceOps::StreamWaitValue(StreamHandle stream, const uint64_t* word, uint64_t value) {
  FakeStream* s = Find(stream);
  if (s == nullptr) return InvalidArgument("fake StreamWaitValue: unknown stream");
  s->Push([this, word, value] {
    std::atomic_ref<uint64_t> w(*const_cast<uint64_t*>(word));
    while (w.load(std::memory_order_acquire) < value && !stopping_.load()) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  return Status::Ok();
}

StreamHandle FakeDeviceOps::CreateStream() {
  auto s = std::make_unique<FakeStream>();
  auto handle = reinterpret_cast<StreamHandle>(s.get());
  std::lock_guard<std::mutex> lock(mu_);
  streams_.push_back(std::move(s));
  return handle;
}

void* FakeDeviceOps::AllocDevice(size_t bytes) {
  const size_t n = bytes == 0 ? 1 : bytes;
  auto mem = std::make_unique<char[]>(n);  // value-initialised: zeroed
  char* p = mem.get();
  std::lock_guard<std::mutex> lock(mu_);
  device_.emplace(p, DeviceAlloc{std::move(mem), n, ++next_serial_});
  return p;
}

void FakeDeviceOps::FreeDevice(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto open = imports_.find(p);
  if (open != imports_.end() && open->second > 0) ++frees_while_mapped_;
  device_.erase(static_cast<const char*>(p));
}

void FakeDeviceOps::Enqueue(StreamHandle stream, std::function<void()> task) {
  FakeStream* s = Find(stream);
  if (s != nullptr) s->Push(std::move(task));
}

Status FakeDeviceOps::Synchronize(StreamHandle stream, Deadline deadline) {
  FakeStream* s = Find(stream);
  if (s == nullptr) return InvalidArgument("fake Synchronize: unknown stream");
  if (!s->WaitDrained(deadline)) return TimeoutError("fake stream still busy at the deadline");
  return Status::Ok();
}

size_t FakeDeviceOps::Pending(StreamHandle stream) {
  FakeStream* s = Find(stream);
  return s == nullptr ? 0 : s->Pending();
}

void FakeDeviceOps::DestroyStream(StreamHandle stream) {
  std::unique_ptr<FakeStream> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = streams_.begin(); it != streams_.end(); ++it) {
      if (reinterpret_cast<StreamHandle>(it->get()) == stream) {
        gone = std::move(*it);
        streams_.erase(it);
        break;
      }
    }
  }
  // Destroyed outside the lock: it runs what is queued first.
}

Status FakeDeviceOps::ReduceAsync(void* dst, const void* a, const void* b, size_t count,
                                  DataType type, RedOp op, StreamHandle stream) {
  FakeStream* s = Find(stream);
  if (s == nullptr) return InvalidArgument("fake ReduceAsync: unknown stream");
  ++reduce_launches_;
  s->Push([=] { ReduceInto(dst, a, b, count, type, op == RedOp::kAvg ? RedOp::kSum : op); });
  return Status::Ok();
}

Status FakeDeviceOps::ScaleForAvgAsync(void* buf, size_t count, DataType type, int nranks,
                                       StreamHandle stream) {
  FakeStream* s = Find(stream);
  if (s == nullptr) return InvalidArgument("fake ScaleForAvgAsync: unknown stream");
  s->Push([=] { ScaleForAvg(buf, count, type, nranks); });
  return Status::Ok();
}

Status FakeDeviceOps::PreMulAsync(void* dst, const void* src, size_t count, DataType type,
                                  const PreMulScalar& scalar, StreamHandle stream) {
  FakeStream* s = Find(stream);
  if (s == nullptr) return InvalidArgument("fake PreMulAsync: unknown stream");
  if (scalar.type != type) return InvalidArgument("fake PreMulAsync: scalar of another type");
  ++premul_launches_;
  s->Push([=] {
    PreMulInto(dst, src, count, type,
               scalar.where == PreMulScalar::Where::kValue ? scalar.value : scalar.pointer);
  });
  return Status::Ok();
}

namespace {
thread_local int t_device = 0;  // the fake's current device, per thread as in CUDA

std::string FakeBusId(int device) {
  char id[32];
  std::snprintf(id, sizeof id, "0000:%02x:00.0", device);
  return id;
}
}  // namespace

Result<int> FakeDeviceOps::CurrentDevice() {
  return t_device;
}

Status FakeDeviceOps::FlushRdmaWrites() {
  ++rdma_flushes_;
  std::lock_guard<std::mutex> lock(mu_);
  ++flushes_by_device_[t_device];
  return Status::Ok();
}

size_t FakeDeviceOps::rdma_flushes_on(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = flushes_by_device_.find(device);
  return it == flushes_by_device_.end() ? 0 : it->second;
}

Status FakeDeviceOps::SetDevice(int device) {
  if (device < 0 || device >= devices_.load()) {
    return InvalidArgument("fake: no device " + std::to_string(device));
  }
  t_device = device;
  return Status::Ok();
}

Result<std::string> FakeDeviceOps::CurrentBusId() {
  return FakeBusId(t_device);
}

Result<bool> FakeDeviceOps::CanAccessPeer(const std::string& bus_id) {
  for (int d = 0; d < devices_.load(); ++d) {
    if (bus_id == FakeBusId(d)) return true;
  }
  return false;
}

Status FakeDeviceOps::EnablePeerAccess(const std::string& bus_id) {
  LOOM_ASSIGN_OR_RETURN(const bool known, CanAccessPeer(bus_id));
  if (!known) return Status(Code::kUnhandledCudaError, "fake: no GPU " + bus_id);
  ++peer_enables_;
  return Status::Ok();
}

Result<DeviceOps::Allocation> FakeDeviceOps::AllocationOf(const void* ptr, bool dmabuf) {
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = device_.upper_bound(p);
  if (it == device_.begin() || p >= std::prev(it)->first + std::prev(it)->second.bytes) {
    return Status(Code::kUnhandledCudaError, "fake: cuMemGetAddressRange: not device memory");
  }
  --it;
  constexpr uintptr_t kPage = 4096;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(it->first);
  const uintptr_t end = begin + it->second.bytes;
  Allocation a;
  a.base = begin / kPage * kPage;
  a.bytes = (end + kPage - 1) / kPage * kPage - a.base;
  if (dmabuf) {
    if (!dmabuf_.load())
      return Status(Code::kUnhandledCudaError,
                    "fake: cuMemGetHandleForAddressRange: not supported");
    a.dmabuf_fd = eventfd(0, EFD_CLOEXEC);
    if (a.dmabuf_fd < 0) return SystemError("eventfd", errno);
  }
  return a;
}

// The handle carries the allocation's base and serial.
Result<IpcExport> FakeDeviceOps::FakeIpc::Export(const void* ptr) {
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(ops_.mu_);
  auto it = ops_.device_.upper_bound(p);
  if (it == ops_.device_.begin() || p >= std::prev(it)->first + std::prev(it)->second.bytes) {
    return InvalidArgument("fake IPC export: not device memory");
  }
  --it;
  IpcExport e;
  const uint64_t base = reinterpret_cast<uint64_t>(it->first);
  std::memcpy(e.handle.data(), &base, sizeof(base));
  std::memcpy(e.handle.data() + 8, &it->second.serial, sizeof(uint64_t));
  e.base = base;
  e.size = it->second.bytes;
  e.offset = static_cast<uint64_t>(p - it->first);
  return e;
}

Result<void*> FakeDeviceOps::FakeIpc::Open(const IpcExport& e) {
  uint64_t base = 0, serial = 0;
  std::memcpy(&base, e.handle.data(), sizeof(base));
  std::memcpy(&serial, e.handle.data() + 8, sizeof(serial));
  std::lock_guard<std::mutex> lock(ops_.mu_);
  auto it = ops_.device_.find(reinterpret_cast<const char*>(base));
  if (it == ops_.device_.end() || it->second.serial != serial) {
    return Status(Code::kUnhandledCudaError,
                  "cudaIpcOpenMemHandle failed: cudaErrorInvalidValue (fake: allocation freed)");
  }
  ++ops_.ipc_opens_;
  ++ops_.imports_[reinterpret_cast<const void*>(base)];
  return reinterpret_cast<void*>(base);
}

void FakeDeviceOps::FakeIpc::Close(void* mapped_base) {
  std::lock_guard<std::mutex> lock(ops_.mu_);
  ++ops_.ipc_closes_;
  auto it = ops_.imports_.find(mapped_base);
  if (it != ops_.imports_.end() && --it->second == 0) ops_.imports_.erase(it);
}

}  // namespace loom::cuda
