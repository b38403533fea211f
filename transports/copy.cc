// CopyBytes: a vector copy loop where memcpy would take rep movsb.
#include "transports/copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace loom {

#if defined(__x86_64__)
namespace {

// bytes >= 64. The first and last 32 bytes are unaligned stores; between
// them every store is 32-byte aligned, four per iteration (two cache lines).
__attribute__((target("avx2"))) void CopyAvx2(char* d, const char* s, size_t bytes) {
  const __m256i first = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
  const __m256i last = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + bytes - 32));
  size_t i = 32 - reinterpret_cast<uintptr_t>(d) % 32;
  for (; i + 128 <= bytes; i += 128) {
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    const __m256i x2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    const __m256i x3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + i), x0);
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + i + 32), x1);
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + i + 64), x2);
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + i + 96), x3);
  }
  for (; i + 32 <= bytes; i += 32) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + i),
                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
  }
  // Loaded before any store: stores above cannot have changed them (no
  // overlap), and storing them last covers the unaligned head and tail.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), first);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + bytes - 32), last);
}

// A call during another file's static initialisation, before this runs,
// sees false and copies with memcpy: still correct.
const bool kHaveAvx2 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}();

}  // namespace

bool VectorCopyAvailable() {
  return kHaveAvx2;
}

void CopyBytes(void* dst, const void* src, size_t bytes) {
  if (kHaveAvx2 && bytes >= kVectorCopyMinBytes && bytes < kVectorCopyMaxBytes) {
    CopyAvx2(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
    return;
  }
  std::memcpy(dst, src, bytes);
}

#else

bool VectorCopyAvailable() {
  return false;
}

void CopyBytes(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

#endif

}  // namespace loom
