// IpcMappingCache: peer allocations mapped into this process. Plain C++
// (the CUDA calls are behind IpcBackend), so it is built and tested with or
// without the CUDA toolkit.
#include <string>

#include "base/log.h"
#include "transports/cuda/ipc.h"

namespace loom::cuda {

IpcMappingCache::~IpcMappingCache() {
  for (auto& [key, entry] : entries_) backend_->Close(entry.mapped);
}

Result<void*> IpcMappingCache::Map(int peer, const IpcExport& e, bool keep) {
  if (e.size == 0 || e.offset >= e.size) {
    return InvalidArgument("CUDA IPC export from rank " + std::to_string(peer) + " has offset " +
                           std::to_string(e.offset) + " outside its " + std::to_string(e.size) +
                           "-byte allocation");
  }
  std::lock_guard<std::mutex> lock(mu_);
  const Key key{peer, e.base, e.size};
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    if (it->second.handle == e.handle) {
      ++stats_.hits;
      it->second.keep = keep;
      return static_cast<char*>(it->second.mapped) + e.offset;
    }
    // Same range, new handle: the peer freed and reallocated it.
    backend_->Close(it->second.mapped);
    entries_.erase(it);
    ++stats_.evictions;
  }
  stats_.evictions += CloseOverlapping(peer, e.base, e.size);
  LOOM_ASSIGN_OR_RETURN(void* mapped, backend_->Open(e));
  ++stats_.opens;
  entries_.emplace(key, Entry{e.handle, mapped, keep});
  LOOM_TRACE(log::kP2P, "CUDA IPC: mapped %llu bytes of rank %d at %p (%s)",
             static_cast<unsigned long long>(e.size), peer, mapped, keep ? "registered" : "this operation");
  return static_cast<char*>(mapped) + e.offset;
}

size_t IpcMappingCache::CloseOverlapping(int peer, uint64_t base, uint64_t size) {
  // Entries of one peer are ordered by base; any overlapping one starts
  // before base + size and ends after base.
  size_t closed = 0;
  auto it = entries_.lower_bound(Key{peer, 0, 0});
  while (it != entries_.end() && it->first.peer == peer && it->first.base < base + size) {
    if (it->first.base + it->first.size > base) {
      backend_->Close(it->second.mapped);
      it = entries_.erase(it);
      ++closed;
    } else {
      ++it;
    }
  }
  return closed;
}

void IpcMappingCache::ReleaseTransient() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.keep) {
      ++it;
      continue;
    }
    backend_->Close(it->second.mapped);
    it = entries_.erase(it);
    ++stats_.releases;
  }
}

void IpcMappingCache::ForgetPeer(int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.lower_bound(Key{peer, 0, 0});
  while (it != entries_.end() && it->first.peer == peer) {
    backend_->Close(it->second.mapped);
    it = entries_.erase(it);
  }
}

size_t IpcMappingCache::ForgetRange(int peer, uint64_t base, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t closed = CloseOverlapping(peer, base, size);
  stats_.forgotten += closed;
  return closed;
}

void IpcMappingCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, entry] : entries_) backend_->Close(entry.mapped);
  entries_.clear();
}

IpcMappingCache::Stats IpcMappingCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

size_t IpcMappingCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace loom::cuda
