// RegistrationCache: memory registrations (ibv_reg_mr) reused by address
// range, bounded by an LRU, behind a Registrar interface so the bookkeeping
// is tested with a fake and no RDMA device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>

#include "base/status.h"

namespace loom::ib {

// What a registration gives the data path.
struct MemoryKey {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

// Registers and deregisters memory (VerbsWire: ibv_reg_mr / ibv_dereg_mr on
// the connection's protection domain). `handle` is the registrar's own
// token for the region. Called from the thread driving the connection.
class Registrar {
 public:
  virtual ~Registrar() = default;
  virtual Result<MemoryKey> Register(uintptr_t addr, size_t bytes, void** handle) = 0;
  // GPU memory (GPUDirect RDMA, transports/ib/gdr.h): registers the whole
  // device allocation holding [addr, addr + bytes), for local and remote
  // writes, and says its range in [*begin, *end). Only a wire set up for
  // GPUDirect RDMA offers it; the default refuses.
  virtual Result<MemoryKey> RegisterDevice(uintptr_t addr, size_t bytes, void** handle,
                                           uintptr_t* begin, uintptr_t* end);
  virtual void Deregister(void* handle) = 0;
};

// Reuses a registration that covers a requested range; otherwise registers
// the page-aligned range around it. At most `capacity` entries are kept:
// the least recently used entry that no transfer has pinned is deregistered
// to make room (pinned entries may push the count above capacity: a posted
// RDMA write must keep its key valid until it completes).
//
// Registrations pin physical pages, so a buffer freed and reallocated at the
// same address would be sent from its old pages: loom has no memory hooks
// (UCX's rcache has), so the owner drops unpinned entries with Clear()
// whenever it goes idle, and Invalidate() drops entries overlapping a range
// it knows changed. Not thread-safe: one thread (the connection's) uses it.
class RegistrationCache {
 public:
  struct Entry {
    uintptr_t begin = 0, end = 0;  // page-aligned [begin, end)
    MemoryKey key;
    void* handle = nullptr;
    int pins = 0;
    bool device = false;  // GPU memory (RegisterDevice): the whole allocation
    bool stale = false;  // invalidated while pinned: never reused, dropped at the last Unpin
  };
  using Ref = Entry*;

  RegistrationCache(Registrar* registrar, size_t capacity, size_t page = 4096)
      : registrar_(registrar), capacity_(capacity < 1 ? 1 : capacity), page_(page) {}
  ~RegistrationCache();  // deregisters everything (pinned or not)
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // A pinned entry covering [addr, addr + bytes) (bytes > 0); Unpin it when
  // the writes using it have completed. `device`: the range is GPU memory,
  // registered through RegisterDevice (host and device entries never serve
  // each other). A registrar failure is returned as is and leaves the cache
  // unchanged.
  Result<Ref> Acquire(const void* addr, size_t bytes, bool device = false);
  void Unpin(Ref ref);

  // Deregisters unpinned entries overlapping [addr, addr + bytes); pinned
  // ones are dropped when their last pin goes.
  void Invalidate(const void* addr, size_t bytes);
  // Deregisters every unpinned entry.
  void Clear();

  size_t size() const { return entries_.size(); }
  size_t hits() const { return hits_; }
  size_t misses() const { return misses_; }

 private:
  std::list<Entry>::iterator Drop(std::list<Entry>::iterator it);  // returns the next
  void Evict();

  Registrar* registrar_;
  size_t capacity_, page_;
  std::list<Entry> entries_;  // most recently used first
  size_t hits_ = 0, misses_ = 0;
};

}  // namespace loom::ib
