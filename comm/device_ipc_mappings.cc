// DeviceIpc's mappings that outlive an operation: registered buffers, the
// copy buffer, and the close requests peers answer from their store readers
// (see device_ipc.h).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "base/log.h"
#include "comm/bootstrap/store_client.h"
#include "comm/bootstrap/wire.h"
#include "comm/device_ipc.h"

namespace loom {

namespace {

// ClosePeerMappings asks a silent peer again after this, doubling to the max.
constexpr auto kAskAgain = std::chrono::milliseconds(50);
constexpr auto kAskAgainMax = std::chrono::milliseconds(1000);

// The notices of ClosePeerMappings, as store payloads.
constexpr uint32_t kCloseRequest = 0x6c63;  // owner -> peer: id, base, size
constexpr uint32_t kCloseAnswer = 0x6c61;   // peer -> owner: id, busy (0 or 1)

}  // namespace

Result<char*> DeviceIpc::CopyBuffer() {
  if (copy_buffer_ == nullptr) {
    LOOM_ASSIGN_OR_RETURN(void* p, ops_->AllocScratch(copy_limit_));
    Result<cuda::IpcExport> x = ops_->ipc().Export(p);
    if (!x.ok()) {
      ops_->FreeScratch(p);
      return x.status();
    }
    copy_buffer_ = static_cast<char*>(p);
    copy_export_ = x.value();
  }
  return copy_buffer_;
}

Result<cuda::IpcExport> DeviceIpc::ExportOf(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  if (copy_buffer_ != nullptr && at >= copy_export_.base &&
      at - copy_export_.base < copy_export_.size) {
    cuda::IpcExport e = copy_export_;
    e.offset = at - copy_export_.base;
    return e;
  }
  return ops_->ipc().Export(p);
}

Status DeviceIpc::RetireCopyBuffer(bootstrap::StoreClient& store, Deadline deadline) {
  if (copy_buffer_ == nullptr || copy_free_ok_) return Status::Ok();
  const Allocation a{copy_export_.base, copy_export_.size};
  Status s = ClosePeerMappings(store, a, "this rank's copy buffer", deadline);
  if (s.ok()) {
    copy_free_ok_ = true;
  } else {
    LOOM_WARN(log::kP2P,
              "rank %d: keeping the CUDA IPC copy buffer allocated until the process "
              "exits (peers may still map it): %s",
              rank_, s.ToString().c_str());
  }
  return s;
}

uint64_t DeviceIpc::Register(const void* ptr, size_t bytes) {
  Allocation allocation;
  // Only device memory a peer could map matters; host memory fails Export.
  if (ops_ != nullptr) {
    Result<cuda::BufferPlace> place = ops_->Classify(ptr);
    if (place.ok() && place.value().space == cuda::MemSpace::kDevice) {
      Result<cuda::IpcExport> x = ops_->ipc().Export(ptr);
      if (x.ok()) allocation = Allocation{x.value().base, x.value().size};
    }
  }
  std::lock_guard<std::mutex> lock(reg_mu_);
  const uint64_t handle = next_handle_++;
  registrations_.emplace(handle, Registration{reinterpret_cast<uintptr_t>(ptr), bytes, allocation});
  LOOM_INFO(log::kReg, "rank %d: registered %p (%zu bytes) as handle %llu%s", rank_, ptr, bytes,
            static_cast<unsigned long long>(handle),
            allocation.size == 0 ? ""
            : enabled_           ? "; peers keep their CUDA IPC mapping of it"
                                 : "; device buffers are staged, so nothing maps it");
  return handle;
}

Result<DeviceIpc::Allocation> DeviceIpc::Unregister(uint64_t handle) {
  std::lock_guard<std::mutex> lock(reg_mu_);
  auto it = registrations_.find(handle);
  if (it == registrations_.end()) {
    return InvalidArgument("handle " + std::to_string(handle) +
                           " was not registered with this communicator (or was deregistered "
                           "already)");
  }
  const Allocation a = it->second.allocation;
  registrations_.erase(it);
  LOOM_INFO(log::kReg, "rank %d: deregistered handle %llu", rank_,
            static_cast<unsigned long long>(handle));
  if (!enabled_ || a.size == 0) return Allocation{};
  for (const auto& [h, r] : registrations_) {
    if (r.allocation.base == a.base && r.allocation.size == a.size) return Allocation{};
  }
  return a;
}

bool DeviceIpc::Registered(const void* p, size_t bytes) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(reg_mu_);
  for (const auto& [h, r] : registrations_) {
    if (at >= r.ptr && bytes <= r.bytes && at - r.ptr <= r.bytes - bytes) return true;
  }
  return false;
}

Status DeviceIpc::ClosePeerMappings(bootstrap::StoreClient& store, Allocation a, const char* what,
                                    Deadline deadline) {
  if (a.size == 0) return Status::Ok();
  const int n = static_cast<int>(process_.size());
  std::vector<int> peers;
  for (int q = 0; q < n; ++q) {
    // Ranks of this process read it through raw pointers, unmapped.
    if (q != rank_ && (process_[q] != process_[rank_] || ops_->ipc_within_process())) {
      peers.push_back(q);
    }
  }
  if (peers.empty()) return Status::Ok();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(notice_mu_);
    id = next_request_++;
    pending_[id].waiting.insert(peers.begin(), peers.end());
  }
  bootstrap::Writer w;
  w.U32(kCloseRequest);
  w.U64(id);
  w.U64(a.base);
  w.U64(a.size);
  for (int q : peers) {
    Status sent = store.Notify(q, w.payload());
    if (!sent.ok()) {
      std::lock_guard<std::mutex> lock(notice_mu_);
      pending_.erase(id);
      return Status(sent.code(), "cannot ask rank " + std::to_string(q) +
                                     " to close its CUDA IPC mapping of " + what +
                                     " (do not free it): " + sent.message());
    }
  }
  // A peer that is leaving may drop the request (its store reader stops
  // before the store has seen its goodbye): ask again, with backoff, until
  // it answers or the store answers for it.
  std::unique_lock<std::mutex> lock(notice_mu_);
  PendingClose& p = pending_[id];
  auto again = kAskAgain;
  while (!p.waiting.empty() && !deadline.expired()) {
    const auto next = std::min(deadline.at(), std::chrono::steady_clock::now() + again);
    if (notice_cv_.wait_until(lock, next, [&] { return p.waiting.empty(); })) break;
    const std::vector<int> silent(p.waiting.begin(), p.waiting.end());
    lock.unlock();
    for (int q : silent) (void)store.Notify(q, w.payload());  // a failure shows as silence
    lock.lock();
    again = std::min(again * 2, kAskAgainMax);
  }
  const PendingClose done = std::move(p);
  pending_.erase(id);
  lock.unlock();
  auto list = [](const auto& ranks) {
    std::string s;
    for (int q : ranks) s += (s.empty() ? "" : ",") + std::to_string(q);
    return s;
  };
  if (!done.busy.empty()) {
    return RemoteError("rank(s) " + list(done.busy) + " may still read " + what +
                       " (an operation failed there and its device work had not finished): do "
                       "not free it before their communicators are destroyed");
  }
  if (!done.waiting.empty()) {
    return TimeoutError("rank(s) " + list(done.waiting) +
                        " did not confirm closing their CUDA IPC mapping of " + what +
                        " in time (stuck, or its store connection is slow): do not free it");
  }
  LOOM_TRACE(log::kReg | log::kP2P,
             "rank %d: %zu peer(s) closed their mapping of %llu bytes at %#llx", rank_,
             peers.size(), static_cast<unsigned long long>(a.size),
             static_cast<unsigned long long>(a.base));
  return Status::Ok();
}

void DeviceIpc::OnNotice(bootstrap::StoreClient& store, int from, bool gone,
                         const std::string& payload) {
  bootstrap::Reader r(payload);
  const uint32_t kind = r.U32();
  const uint64_t id = r.U64();
  if (r.failed()) return;
  if (kind == kCloseRequest && !gone) {
    const uint64_t base = r.U64(), size = r.U64();
    if (r.failed()) return;
    // The owner's operations on the buffer are over, and each ended after
    // this rank's device work: nothing reads the mapping, unless a failed
    // operation left work running.
    const bool busy = unsettled_.load();
    if (!busy && cache_ != nullptr) {
      (void)ops_->SetDevice(device_);  // the reader thread never chose one
      cache_->ForgetRange(from, base, size);
    }
    bootstrap::Writer w;
    w.U32(kCloseAnswer);
    w.U64(id);
    w.U32(busy ? 1 : 0);
    Status sent = store.Notify(from, w.payload());
    if (!sent.ok()) {
      LOOM_WARN(log::kReg, "rank %d: cannot answer rank %d's deregistration: %s", rank_, from,
                sent.ToString().c_str());
    }
    return;
  }
  // An answer; or the store's word that the peer asked left (its
  // mappings closed with its communicator), which counts as one.
  const bool busy = kind == kCloseAnswer && !gone && r.U32() != 0;
  if (kind != kCloseAnswer && !(kind == kCloseRequest && gone)) return;
  std::lock_guard<std::mutex> lock(notice_mu_);
  auto it = pending_.find(id);
  if (it == pending_.end() || it->second.waiting.erase(from) == 0) return;
  if (busy) it->second.busy.push_back(from);
  if (it->second.waiting.empty()) notice_cv_.notify_all();
}

void DeviceIpc::CloseAllMappings() {
  if (cache_ == nullptr || unsettled_.load()) return;
  if (have_stream_) (void)ops_->SetDevice(device_);
  cache_->Clear();
}

}  // namespace loom
