// Shareable host memory (ncclMemAlloc): allocations other processes of this
// host can map, so collectives read a peer's buffer with plain loads instead
// of a cross-memory-attach syscall that pins its pages on every call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "transports/peer_memory.h"  // SharedRef, FindShared

namespace loom {

// AllocShared and FreeShared are loom's public API; their contract is in
// loom/loom.hpp. Each allocation is an anonymous memory file ("loom-mem")
// whose descriptor stays open until FreeShared, so peers can map it.
Result<void*> AllocShared(size_t bytes);
Status FreeShared(void* p);

// How many FreeShared calls this process has made: peers that see it change
// look again at the allocations of this process they still map.
uint64_t SharedFrees();

// FindShared (declared in transports/peer_memory.h) is defined here: a
// lookup in a small ordered map.

}  // namespace loom
