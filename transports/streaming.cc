// Non-temporal copies and reductions for destinations larger than the cache.
#include "transports/streaming.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace loom {

size_t StreamingMinBytes() {
  static const size_t min_bytes = [] {
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return llc > 0 ? std::max<size_t>(static_cast<size_t>(llc) / 4, 1 << 20) : size_t{8} << 20;
  }();
  return min_bytes;
}

namespace {

// StreamingCopy without the closing fence.
void StreamUnfenced(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  size_t i = head;
  // Four stores per iteration fill a 64-byte line, the unit in which the
  // write-combining buffers flush.
  for (; i + 64 <= bytes; i += 64) {
    const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), x0);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), x1);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), x2);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), x3);
  }
  for (; i + 16 <= bytes; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  }
  std::memcpy(d + i, s + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

// Streaming stores are weakly ordered: without the fence a later release
// store (a FIFO tail, a flag) could become visible before them.
void StoreFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

}  // namespace

void StreamingCopy(void* dst, const void* src, size_t bytes) {
  StreamUnfenced(dst, src, bytes);
  StoreFence();
}

void StreamingReduce(Transfer::ReduceFn reduce, void* dst, const void* a, const void* b,
                     size_t count, DataType type, RedOp op) {
  // Half of L1: the block is written and read back at once, so both stay hot.
  constexpr size_t kBlockBytes = 16 << 10;
  alignas(64) thread_local unsigned char bounce[kBlockBytes];
  const size_t es = SizeOf(type);
  const size_t per_block = kBlockBytes / es;
  char* d = static_cast<char*>(dst);
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  for (size_t i = 0; i < count; i += per_block) {
    const size_t n = std::min(per_block, count - i);
    reduce(bounce, x + i * es, y + i * es, n, type, op);
    StreamUnfenced(d + i * es, bounce, n * es);
  }
  StoreFence();
}

}  // namespace loom
