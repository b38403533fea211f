// Copies and reductions into large destinations with non-temporal
// ("streaming") stores, which bypass the caches: for a destination larger
// than the last-level cache they avoid reading each line before writing it
// and evicting data that is still hot (the FIFO, the other rank's block).
#pragma once

#include <cstddef>
#include <string>

#include "transports/transport.h"

namespace loom {

// Transfers of at least this many bytes land with streaming stores: a
// quarter of the last-level cache (so a collective's buffers of both ranks
// no longer fit in it), 8 MiB when the size cannot be read. Computed once.
size_t StreamingMinBytes();

// Whether receive `t` lands with streaming stores: its destination is final
// (Transfer::nontemporal), at least StreamingMinBytes(), and not also the
// reduction's other input. A destination just read as that input is in the
// cache already, so streaming saves no read and only evicts it.
bool StreamsInto(const Transfer& t);

// The last-level cache in bytes as the kernel describes it
// (/sys/devices/system/cpu/cpu0/cache/index*/: the highest level's size,
// what lscpu prints), or sysconf's figure when sysfs has none, or 0.
// sysconf reads the CPU's own report, which a VM may fill with the
// physical host's figures, ten times its own.
size_t LastLevelCacheBytes();

// A sysfs cache size ("32768K", "2M", "512"), in bytes; 0 when malformed.
size_t ParseCacheSize(const std::string& text);

// memcpy(dst, src, bytes) with streaming stores for the 16-byte-aligned body
// of dst (plain stores elsewhere), then a store fence, so the bytes are
// globally visible before any later store (a FIFO tail, a flag) that
// publishes them. dst and src must not overlap. Thread-safe, non-blocking.
void StreamingCopy(void* dst, const void* src, size_t bytes);

// reduce(dst, a, b, count, type, op) computed in L1-sized blocks into a
// thread-local bounce buffer and streamed into dst (StreamingCopy), so the
// result bits are exactly those of `reduce`. dst may equal a or b, as for
// `reduce` itself; other overlaps are undefined.
void StreamingReduce(Transfer::ReduceFn reduce, void* dst, const void* a, const void* b,
                     size_t count, DataType type, RedOp op);

}  // namespace loom
