// An allocator for objects made and dropped at a high rate, one at a time
// (a non-blocking call's completion state): each thread keeps the blocks it
// freed and hands them out again, so a steady stream of calls allocates
// nothing. glibc's own per-thread cache holds 7 blocks of a size; a sweep
// keeps 20-10000 calls in flight, and beyond those 7 every free took
// glibc's slow path (with malloc, about 260 instructions a call).
//
// A thread keeps at most kMaxCached blocks: if one thread makes the objects
// and another drops them, the second frees the surplus. The cap is above any
// number of calls a program keeps in flight (the memory was in use then
// anyway, as NCCL's pools keep theirs): a lower cap sends a long burst of
// calls issued without waiting back to malloc. Blocks cached by a
// thread are freed when it exits. Under AddressSanitizer blocks are not
// reused, so that a use after free is still caught.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace loom {

namespace recycling_detail {

inline constexpr size_t kMaxCached = size_t{1} << 16;

// The blocks this thread freed, of one size. `dead` (a plain thread-local,
// valid for the whole thread) records that the list was destroyed at thread
// exit, after which blocks go straight back to the heap.
template <size_t kBytes>
struct Cache {
  std::vector<void*> blocks;
  ~Cache() {
    for (void* p : blocks) ::operator delete(p);
    dead = true;
  }
  static inline thread_local bool dead = false;
  static std::vector<void*>* Get() {
    if (dead) return nullptr;
    thread_local Cache cache;
    return &cache.blocks;
  }
};

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kRecycle = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kRecycle = false;
#else
inline constexpr bool kRecycle = true;
#endif
#else
inline constexpr bool kRecycle = true;
#endif

}  // namespace recycling_detail

template <class T>
class RecyclingAllocator {
 public:
  using value_type = T;

  RecyclingAllocator() noexcept = default;
  template <class U>
  RecyclingAllocator(const RecyclingAllocator<U>&) noexcept {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    if (n == 1 && recycling_detail::kRecycle) {
      std::vector<void*>* cache = Cache::Get();
      if (cache != nullptr && !cache->empty()) {
        void* p = cache->back();
        cache->pop_back();
        return static_cast<T*>(p);
      }
    }
    if (n == 1) return static_cast<T*>(::operator new(sizeof(T)));
    return std::allocator<T>().allocate(n);
  }

  void deallocate(T* p, size_t n) noexcept {
    if (n == 1) {
      if (recycling_detail::kRecycle) {
        std::vector<void*>* cache = Cache::Get();
        if (cache != nullptr && cache->size() < recycling_detail::kMaxCached) {
          try {
            cache->push_back(p);
            return;
          } catch (const std::bad_alloc&) {
            // No room to remember it: free it.
          }
        }
      }
      ::operator delete(p);
      return;
    }
    std::allocator<T>().deallocate(p, n);
  }

  template <class U>
  bool operator==(const RecyclingAllocator<U>&) const noexcept {
    return true;  // stateless: any instance frees what another allocated
  }

 private:
  // Blocks are shared by every type of the same size and alignment class.
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
  using Cache = recycling_detail::Cache<sizeof(T)>;
};

}  // namespace loom
