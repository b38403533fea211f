// The data path's memcpy: the same bytes, at the same speed whatever the
// offset of the destination against the source within a cache line.
#pragma once

#include <cstddef>

namespace loom {

// memcpy(dst, src, bytes); dst and src must not overlap. Thread-safe.
//
// From about 2 KiB to 1 MiB glibc's memcpy uses `rep movsb` on CPUs that
// report fast string moves. On some CPUs (Zen 5 class, glibc 2.36) that runs
// ten times slower when destination minus source, mod 4096, is 1-15: the
// CPU seems to take such a pair for an overlap. A
// user's buffer at such a distance from a FIFO record or from a peer's
// block would make a collective several times slower. On x86-64 with AVX2
// this copies kVectorCopyMinBytes up to kVectorCopyMaxBytes with 32-byte
// vector loads and stores (the stores aligned), at the same speed at every
// distance there; other sizes, and other CPUs, use memcpy.
void CopyBytes(void* dst, const void* src, size_t bytes);

inline constexpr size_t kVectorCopyMinBytes = 2048;
inline constexpr size_t kVectorCopyMaxBytes = size_t{4} << 20;

// Whether CopyBytes takes its vector loop on this CPU (peer reads skip
// their bounce buffer without it; tests, benchmarks).
bool VectorCopyAvailable();

}  // namespace loom
