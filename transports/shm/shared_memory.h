// Shareable host memory (ncclMemAlloc): allocations other processes of this
// host can map, so collectives read a peer's buffer with plain loads instead
// of a cross-memory-attach syscall that pins its pages on every call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/base/status.h"

namespace loom {

// Where a buffer lives inside a shareable allocation, as its owner process
// describes it to peers: the allocation's descriptor number there, its base
// address and length there, and a serial no other allocation of that
// process ever reuses (descriptor numbers and addresses are reused after a
// free). fd < 0: the buffer is not in shareable memory.
struct SharedRef {
  int32_t fd = -1;
  uint32_t reserved = 0;
  uint64_t base = 0;
  uint64_t bytes = 0;
  uint64_t serial = 0;
  bool valid() const { return fd >= 0; }
};

// AllocShared and FreeShared are loom's public API too (loom/loom.hpp).
// Allocates `bytes` (> 0) of zeroed, pre-faulted memory backed by an
// anonymous memory file. Thread-safe. Fails with a named cause (size 0, no
// memory) instead of returning null.
Result<void*> AllocShared(size_t bytes);

// Frees what AllocShared returned. Peers that mapped it keep their mapping
// (and so the pages) until they drop it. An address AllocShared did not
// return is an InvalidUsage error, not a crash. Thread-safe.
Status FreeShared(void* p);

// The allocation holding [p, p + bytes), if any (fd < 0 otherwise).
// Thread-safe; a lookup in a small ordered map.
SharedRef FindShared(const void* p, size_t bytes);

}  // namespace loom
