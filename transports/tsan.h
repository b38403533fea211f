// Telling ThreadSanitizer about synchronisation through shared memory that
// it cannot see: ranks that are threads of one process map the same segment
// at different addresses, so a release store through one mapping and the
// acquire load through another make no happens-before edge for TSan. Both
// sides name the same key in ordinary process memory instead: release on it
// before the store that publishes, acquire on it after the load that
// observes. No-ops without TSan, and across processes (key null).
#pragma once

#if defined(__SANITIZE_THREAD__)
#define LOOM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LOOM_TSAN 1
#endif
#endif

#ifdef LOOM_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace loom {

inline void TsanAcquire([[maybe_unused]] void* key) {
#ifdef LOOM_TSAN
  if (key != nullptr) __tsan_acquire(key);
#endif
}

inline void TsanRelease([[maybe_unused]] void* key) {
#ifdef LOOM_TSAN
  if (key != nullptr) __tsan_release(key);
#endif
}

}  // namespace loom
