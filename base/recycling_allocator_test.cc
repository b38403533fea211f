#include "base/recycling_allocator.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace loom {
namespace {

struct Counted {
  static inline int alive = 0;
  explicit Counted(int v) : value(v) { ++alive; }
  ~Counted() { --alive; }
  int value;
  char pad[40] = {};
};

using Cache = recycling_detail::Cache<sizeof(Counted)>;

TEST(RecyclingAllocator, ABlockFreedOnAThreadIsHandedOutAgainThere) {
  if (!recycling_detail::kRecycle) GTEST_SKIP() << "no reuse under AddressSanitizer";
  RecyclingAllocator<Counted> alloc;
  Counted* a = alloc.allocate(1);
  alloc.deallocate(a, 1);
  Counted* b = alloc.allocate(1);
  EXPECT_EQ(a, b);
  alloc.deallocate(b, 1);
}

TEST(RecyclingAllocator, SharedObjectsAreBuiltAndDestroyed) {
  {
    std::vector<std::shared_ptr<Counted>> objects;
    for (int i = 0; i < 100; ++i) {
      objects.push_back(std::allocate_shared<Counted>(RecyclingAllocator<Counted>(), i));
    }
    EXPECT_EQ(Counted::alive, 100);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(objects[i]->value, i);
  }
  EXPECT_EQ(Counted::alive, 0);
  // Again, now from recycled blocks.
  auto again = std::allocate_shared<Counted>(RecyclingAllocator<Counted>(), 7);
  EXPECT_EQ(again->value, 7);
  EXPECT_EQ(Counted::alive, 1);
}

TEST(RecyclingAllocator, AThreadKeepsAtMostItsCapAndFreesTheRest) {
  RecyclingAllocator<Counted> alloc;
  std::vector<Counted*> blocks;
  for (size_t i = 0; i < recycling_detail::kMaxCached + 100; ++i) blocks.push_back(alloc.allocate(1));
  for (Counted* p : blocks) alloc.deallocate(p, 1);
  if (recycling_detail::kRecycle) {
    EXPECT_EQ(Cache::Get()->size(), recycling_detail::kMaxCached);
  }
  // Arrays bypass the cache.
  Counted* many = alloc.allocate(3);
  alloc.deallocate(many, 3);
}

TEST(RecyclingAllocator, BlocksMadeOnOneThreadMayBeFreedOnAnother) {
  RecyclingAllocator<Counted> alloc;
  std::vector<Counted*> made;
  std::thread maker([&] {
    for (int i = 0; i < 50; ++i) made.push_back(alloc.allocate(1));
  });
  maker.join();
  std::thread dropper([&] {
    for (Counted* p : made) alloc.deallocate(p, 1);  // into this thread's cache ...
    if (recycling_detail::kRecycle) {
      EXPECT_EQ(Cache::Get()->size(), 50u);
    }
  });
  dropper.join();  // ... freed when it exits
  // And shared objects made on one thread, dropped on another.
  std::vector<std::shared_ptr<Counted>> objects;
  std::thread([&] {
    for (int i = 0; i < 50; ++i) {
      objects.push_back(std::allocate_shared<Counted>(RecyclingAllocator<Counted>(), i));
    }
  }).join();
  std::thread([&] { objects.clear(); }).join();
  EXPECT_EQ(Counted::alive, 0);
}

// A thread-local made before the thread's cache is destroyed after it: what
// it frees then goes straight back to the heap.
struct LateHolder {
  std::shared_ptr<Counted> object;
};

TEST(RecyclingAllocator, AnObjectDroppedAfterTheThreadsCacheIsGoneIsFreed) {
  std::thread t([] {
    thread_local LateHolder holder;  // constructed first, destroyed last
    holder.object = std::allocate_shared<Counted>(RecyclingAllocator<Counted>(), 1);
    auto churn = std::allocate_shared<Counted>(RecyclingAllocator<Counted>(), 2);
    churn.reset();  // the cache now exists and holds a block
  });
  t.join();
  EXPECT_EQ(Counted::alive, 0);
}

}  // namespace
}  // namespace loom
