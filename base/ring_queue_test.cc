// RingQueue keeps FIFO order across growth and wrap-around, and releases
// what it pops.
#include "base/ring_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace loom {
namespace {

TEST(RingQueue, KeepsOrderAcrossWrapAndGrowth) {
  RingQueue<int> q;
  int next_in = 0, next_out = 0;
  // Uneven pushes and pops: the head wraps many times, and the buffer grows
  // while the queue straddles its end.
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < round % 7 + 3; ++i) q.push_back(int{next_in++});
    for (int i = 0; i < round % 5 + 1 && !q.empty(); ++i) {
      ASSERT_EQ(q.front(), next_out++);
      q.pop_front();
    }
  }
  EXPECT_EQ(q.size(), static_cast<size_t>(next_in - next_out));
  std::vector<int> rest;
  q.ForEach([&](int& v) { rest.push_back(v); });
  ASSERT_EQ(rest.size(), q.size());
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], next_out + static_cast<int>(i));
}

TEST(RingQueue, PopReleasesTheElement) {
  RingQueue<std::shared_ptr<int>> q;
  auto p = std::make_shared<int>(7);
  q.push_back(std::shared_ptr<int>(p));
  EXPECT_EQ(p.use_count(), 2);
  std::shared_ptr<int> taken = std::move(q.front());
  q.pop_front();
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(p.use_count(), 2);  // p and taken (the slot was moved from; see below for a pop alone)
  taken.reset();
  EXPECT_EQ(p.use_count(), 1);
  // Popped without being moved from: the slot lets go of it too.
  q.push_back(std::shared_ptr<int>(p));
  q.pop_front();
  EXPECT_EQ(p.use_count(), 1);
}

TEST(RingQueue, ReserveMakesRoomOnceAndKeepsOrder) {
  RingQueue<int> q;
  q.Reserve(100);
  EXPECT_EQ(q.capacity(), 128u);  // the next power of two
  for (int i = 0; i < 128; ++i) q.push_back(int{i});
  EXPECT_EQ(q.capacity(), 128u);  // filled without growing
  // Wrapped around its end, then given more room: still in order.
  for (int i = 0; i < 60; ++i) q.pop_front();
  for (int i = 128; i < 170; ++i) q.push_back(int{i});
  q.Reserve(50);  // less than it has: nothing changes
  EXPECT_EQ(q.capacity(), 128u);
  q.Reserve(300);
  EXPECT_EQ(q.capacity(), 512u);
  for (int want = 60; want < 170; ++want) {
    ASSERT_EQ(q.front(), want);
    q.pop_front();
  }
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace loom
