// Registration cache: range lookup, LRU eviction of unpinned entries (reg_cache.h).
#include "transports/ib/reg_cache.h"

namespace loom::ib {

Result<MemoryKey> Registrar::RegisterDevice(uintptr_t, size_t, void**, uintptr_t*, uintptr_t*) {
  return InternalError("GPU memory reached an IB connection without GPUDirect RDMA");
}

RegistrationCache::~RegistrationCache() {
  for (Entry& e : entries_) registrar_->Deregister(e.handle);
}

Result<RegistrationCache::Ref> RegistrationCache::Acquire(const void* addr, size_t bytes,
                                                          bool device) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (bytes == 0) return InvalidArgument("registering an empty range");
  if (a + bytes < a) return InvalidArgument("registration range wraps the address space");
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (!it->stale && it->device == device && it->begin <= a && a + bytes <= it->end) {
      entries_.splice(entries_.begin(), entries_, it);  // most recently used
      ++hits_;
      ++entries_.front().pins;
      return &entries_.front();
    }
  }
  Entry e;
  e.device = device;
  if (device) {
    LOOM_ASSIGN_OR_RETURN(e.key, registrar_->RegisterDevice(a, bytes, &e.handle, &e.begin, &e.end));
    if (!(e.begin <= a && a + bytes <= e.end)) {
      registrar_->Deregister(e.handle);
      return InternalError("a device registration does not cover the range asked for");
    }
  } else {
    e.begin = a / page_ * page_;
    e.end = (a + bytes + page_ - 1) / page_ * page_;
    LOOM_ASSIGN_OR_RETURN(e.key, registrar_->Register(e.begin, e.end - e.begin, &e.handle));
  }
  ++misses_;
  e.pins = 1;
  entries_.push_front(e);
  Evict();
  return &entries_.front();
}

void RegistrationCache::Unpin(Ref ref) {
  if (ref == nullptr || ref->pins == 0) return;
  if (--ref->pins == 0 && ref->stale) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (&*it == ref) {
        Drop(it);
        break;
      }
    }
  }
  Evict();
}

std::list<RegistrationCache::Entry>::iterator RegistrationCache::Drop(
    std::list<Entry>::iterator it) {
  registrar_->Deregister(it->handle);
  return entries_.erase(it);
}

void RegistrationCache::Evict() {
  // Oldest unpinned first, until within capacity.
  auto it = entries_.end();
  while (entries_.size() > capacity_ && it != entries_.begin()) {
    --it;
    if (it->pins == 0) it = Drop(it);
  }
}

void RegistrationCache::Invalidate(const void* addr, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  for (auto it = entries_.begin(); it != entries_.end();) {
    const bool overlaps = it->begin < a + bytes && a < it->end;
    if (!overlaps) {
      ++it;
    } else if (it->pins == 0) {
      it = Drop(it);
    } else {
      it->stale = true;  // keep the key valid for the writes still using it
      ++it;
    }
  }
}

void RegistrationCache::Clear() {
  for (auto it = entries_.begin(); it != entries_.end();) it = it->pins == 0 ? Drop(it) : std::next(it);
}

}  // namespace loom::ib
