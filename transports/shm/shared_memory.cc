// Process-wide table of shareable allocations (shared_memory.h).
#include "transports/shm/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>
#include <shared_mutex>

namespace loom {

namespace {

struct Allocation {
  int fd;
  size_t bytes;
  uint64_t serial;
};

struct Table {
  std::shared_mutex mu;
  std::map<uintptr_t, Allocation> by_base;  // base address -> allocation
  uint64_t next_serial = 1;
  std::atomic<uint64_t> frees{0};
};

Table& GetTable() {
  static Table* table = new Table;  // never destroyed: frees may run at exit
  return *table;
}

}  // namespace

Result<void*> AllocShared(size_t bytes) {
  if (bytes == 0) return InvalidUsage("shared allocation of 0 bytes");
  // The descriptor stays open: peers map the memory through
  // /proc/<pid>/fd/<fd>. Close-on-exec keeps it out of child programs.
  int fd = memfd_create("loom-mem", MFD_CLOEXEC);
  if (fd < 0) return SystemError("memfd_create for a shared allocation", errno);
  if (int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); rc != 0) {
    close(fd);
    return SystemError("reserving " + std::to_string(bytes) + " bytes of shared memory", rc);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    return SystemError("mapping " + std::to_string(bytes) + " bytes of shared memory", err);
  }
  Table& t = GetTable();
  std::unique_lock lock(t.mu);
  t.by_base[reinterpret_cast<uintptr_t>(p)] = Allocation{fd, bytes, t.next_serial++};
  return p;
}

Status FreeShared(void* p) {
  Table& t = GetTable();
  Allocation a{};
  {
    std::unique_lock lock(t.mu);
    auto it = t.by_base.find(reinterpret_cast<uintptr_t>(p));
    if (it == t.by_base.end()) {
      return InvalidUsage("freeing an address that is not a shared allocation");
    }
    a = it->second;
    t.by_base.erase(it);
  }
  t.frees.fetch_add(1, std::memory_order_relaxed);
  munmap(p, a.bytes);
  close(a.fd);
  return Status::Ok();
}

uint64_t SharedFrees() { return GetTable().frees.load(std::memory_order_relaxed); }

SharedRef FindShared(const void* p, size_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  Table& t = GetTable();
  SharedRef none;
  none.frees = SharedFrees();
  std::shared_lock lock(t.mu);
  auto it = t.by_base.upper_bound(at);
  if (it == t.by_base.begin()) return none;
  --it;
  const Allocation& a = it->second;
  if (at + bytes < at || at + bytes > it->first + a.bytes) return none;
  return SharedRef{a.fd, 0, it->first, a.bytes, a.serial, none.frees};
}

}  // namespace loom
