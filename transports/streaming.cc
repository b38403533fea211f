// Non-temporal copies and reductions for destinations larger than the cache.
#include "transports/streaming.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace loom {

size_t ParseCacheSize(const std::string& text) {
  size_t i = 0, v = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    if (v > (SIZE_MAX >> 31)) return 0;  // absurd: no cache is that large
    v = v * 10 + static_cast<size_t>(text[i++] - '0');
  }
  if (i == 0) return 0;
  size_t unit = 1;
  if (i < text.size() && (text[i] == 'K' || text[i] == 'M' || text[i] == 'G')) {
    unit = text[i] == 'K' ? size_t{1} << 10 : text[i] == 'M' ? size_t{1} << 20 : size_t{1} << 30;
    ++i;
  }
  while (i < text.size() && (text[i] == '\n' || text[i] == ' ')) ++i;
  return i == text.size() ? v * unit : 0;
}

namespace {

std::string ReadSmallFile(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[64];
    const size_t n = std::fread(buf, 1, sizeof buf, f);
    out.assign(buf, n);
    std::fclose(f);
  }
  return out;
}

}  // namespace

size_t LastLevelCacheBytes() {
  int best_level = 0;
  size_t best = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    const std::string level = ReadSmallFile(dir + "level");
    if (level.empty()) break;
    if (ReadSmallFile(dir + "type").rfind("Instruction", 0) == 0) continue;
    const int l = std::atoi(level.c_str());
    const size_t bytes = ParseCacheSize(ReadSmallFile(dir + "size"));
    if (l > best_level && bytes > 0) {
      best_level = l;
      best = bytes;
    }
  }
  if (best > 0) return best;
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return llc > 0 ? static_cast<size_t>(llc) : 0;
}

bool StreamsInto(const Transfer& t) {
  return t.nontemporal && t.bytes >= StreamingMinBytes() && t.dst != t.reduce_with;
}

size_t StreamingMinBytes() {
  static const size_t min_bytes = [] {
    const size_t llc = LastLevelCacheBytes();
    return llc > 0 ? std::max<size_t>(llc / 4, 1 << 20) : size_t{8} << 20;
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
