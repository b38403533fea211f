// ShmSegment: shm_open + fallocate + mmap, unlinked as early as possible.
#include "transports/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace loom {

namespace {

// Reads one byte of every page. MAP_POPULATE fills the kernel's page
// tables, but a hypervisor that shadows them still takes an exit on each
// page's first access from the process, microseconds a page, which the
// first operations through a FIFO would otherwise pay. Elsewhere this costs
// a few ns a page. Reads leave the
// contents alone, and one makes the page writable as well.
void TouchPages(const void* p, size_t bytes) {
  const auto* c = static_cast<const volatile char*>(p);
  for (size_t i = 0; i < bytes; i += 4096) (void)c[i];
}

}  // namespace

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) munmap(data_, size_);
  if (owner_) Unlink();
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(o.size_),
      name_(std::move(o.name_)),
      owner_(std::exchange(o.owner_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    this->~ShmSegment();
    new (this) ShmSegment(std::move(o));
  }
  return *this;
}

Result<ShmSegment> ShmSegment::Create(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return SystemError("shm_open(" + name + ") for create", errno);
  ShmSegment seg;
  seg.name_ = name;
  seg.owner_ = true;
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    close(fd);
    if (rc == ENOSPC) {
      return SystemError("cannot reserve " + std::to_string(bytes) + " bytes in /dev/shm for " +
                             name +
                             ": /dev/shm is too small (in a container, raise --shm-size; or "
                             "lower NCCL_BUFFSIZE; or set NCCL_SHM_DISABLE=1 to use sockets)",
                         rc);
    }
    return SystemError("posix_fallocate(" + name + ")", rc);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) return SystemError("mmap(" + name + ")", err);
  TouchPages(p, bytes);
  seg.data_ = p;
  seg.size_ = bytes;
  return seg;
}

Result<ShmSegment> ShmSegment::Open(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return SystemError("shm_open(" + name + ")", errno);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    return InternalError("shared-memory segment " + name + " has size " +
                         std::to_string(st.st_size) + ", expected " + std::to_string(bytes) +
                         " (do all ranks use the same NCCL_BUFFSIZE?)");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) return SystemError("mmap(" + name + ")", err);
  TouchPages(p, bytes);
  ShmSegment seg;
  seg.data_ = p;
  seg.size_ = bytes;
  seg.name_ = name;
  return seg;
}

void ShmSegment::Unlink() {
  if (owner_ && !name_.empty()) shm_unlink(name_.c_str());
  owner_ = false;
}

}  // namespace loom
