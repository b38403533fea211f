// ShmSegment: an RAII POSIX shared-memory mapping (/dev/shm/loom-*).
#pragma once

#include <cstddef>
#include <string>

#include "base/status.h"

namespace loom {

class ShmSegment {
 public:
  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;

  // Creates `name` (exclusive), reserves its pages (a full /dev/shm is an
  // error naming the size, not a SIGBUS later) and maps it pre-faulted.
  static Result<ShmSegment> Create(const std::string& name, size_t bytes);
  // Maps an existing segment of exactly `bytes`.
  static Result<ShmSegment> Open(const std::string& name, size_t bytes);

  // Removes the name; the mapping stays valid. Idempotent.
  void Unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool owner_ = false;  // created here: unlinks on destruction if not yet done
};

}  // namespace loom
