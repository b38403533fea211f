// FakeDeviceOps keeps CUDA's stream-order semantics, since the communicator's
// device-path tests rely on it: enqueue returns at once, work runs in order,
// events and stream waits behave like cudaEvent*/cuStreamWaitValue64.
#include "tests/fake_device_ops.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace loom::cuda {
namespace {

using std::chrono::milliseconds;

Deadline Soon() { return Deadline::After(milliseconds(10000)); }

TEST(FakeDeviceOps, ClassifiesDeviceInteriorPinnedAndHost) {
  FakeDeviceOps ops;
  char* dev = static_cast<char*>(ops.AllocDevice(100));
  int host = 0;
  auto pinned = ops.AllocPinned(64);
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(ops.Classify(dev)->space, MemSpace::kDevice);
  EXPECT_EQ(ops.Classify(dev + 99)->space, MemSpace::kDevice);  // interior
  EXPECT_EQ(ops.Classify(dev + 100)->space, MemSpace::kHost);    // one past the end
  EXPECT_EQ(ops.Classify(&host)->space, MemSpace::kHost);
  EXPECT_STREQ(ops.Classify(pinned.value())->kind, "pinned host");
  EXPECT_EQ(ops.Classify(nullptr)->space, MemSpace::kHost);
  ops.FreeDevice(dev);
  EXPECT_EQ(ops.Classify(dev)->space, MemSpace::kHost);
  ops.FreePinned(pinned.value());
  EXPECT_EQ(ops.pinned_live(), 0u);
  EXPECT_EQ(ops.pinned_allocations(), 1u);
}

TEST(FakeDeviceOps, EnqueueReturnsAtOnceAndWorkRunsInOrder) {
  FakeDeviceOps ops;
  StreamHandle s = ops.CreateStream();
  std::atomic<bool> gate{false};
  ops.Enqueue(s, [&] {
    while (!gate.load()) std::this_thread::sleep_for(milliseconds(1));
  });
  int src = 7, dst = 0;
  ASSERT_TRUE(ops.CopyAsync(&dst, &src, sizeof src, s).ok());  // returns although blocked
  auto ev = ops.CreateEvent();
  ASSERT_TRUE(ev.ok());
  EXPECT_TRUE(ops.QueryEvent(ev.value()).value());  // never recorded: complete, as in CUDA
  ASSERT_TRUE(ops.RecordEvent(ev.value(), s).ok());
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(dst, 0);  // the copy waits for the earlier work
  EXPECT_FALSE(ops.QueryEvent(ev.value()).value());
  EXPECT_EQ(ops.Pending(s), 3u);
  gate = true;
  ASSERT_TRUE(ops.Synchronize(s, Soon()).ok());
  EXPECT_EQ(dst, 7);
  EXPECT_TRUE(ops.QueryEvent(ev.value()).value());
  ops.DestroyEvent(ev.value());
}

TEST(FakeDeviceOps, StreamWaitValueHoldsLaterWorkUntilTheWordReachesIt) {
  FakeDeviceOps ops;
  StreamHandle s = ops.CreateStream();
  auto word_mem = ops.AllocPinned(sizeof(uint64_t));
  ASSERT_TRUE(word_mem.ok());
  auto* word = static_cast<uint64_t*>(word_mem.value());
  *word = 0;
  ASSERT_TRUE(ops.StreamWaitValue(s, word, 2).ok());
  std::atomic<int> ran{0};
  ops.Enqueue(s, [&] { ran = 1; });
  std::atomic_ref<uint64_t>(*word).store(1);
  EXPECT_FALSE(ops.Synchronize(s, Deadline::After(milliseconds(50))).ok());
  EXPECT_EQ(ran.load(), 0);
  std::atomic_ref<uint64_t>(*word).store(3);  // >= is enough
  ASSERT_TRUE(ops.Synchronize(s, Soon()).ok());
  EXPECT_EQ(ran.load(), 1);
}

TEST(FakeDeviceOps, StreamsAreIndependent) {
  FakeDeviceOps ops;
  StreamHandle a = ops.CreateStream(), b = ops.CreateStream();
  uint64_t word = 0;
  ASSERT_TRUE(ops.StreamWaitValue(a, &word, 1).ok());
  int x = 0;
  ops.Enqueue(b, [&] { x = 1; });
  ASSERT_TRUE(ops.Synchronize(b, Soon()).ok());  // b does not wait for a
  EXPECT_EQ(x, 1);
  std::atomic_ref<uint64_t>(word).store(1);
  ASSERT_TRUE(ops.Synchronize(a, Soon()).ok());
}

TEST(FakeDeviceOps, InjectedCopyFailureAndUnknownStream) {
  FakeDeviceOps ops;
  StreamHandle s = ops.CreateStream();
  int a = 1, b = 0;
  ops.FailNextCopy();
  Status st = ops.CopyAsync(&b, &a, sizeof a, s);
  EXPECT_EQ(st.code(), Code::kUnhandledCudaError);
  EXPECT_TRUE(ops.CopyAsync(&b, &a, sizeof a, s).ok());  // only the next one
  int bogus = 0;
  EXPECT_EQ(ops.CopyAsync(&b, &a, sizeof a, reinterpret_cast<StreamHandle>(&bogus)).code(),
            Code::kInvalidArgument);
}

TEST(FakeDeviceOps, AllocationOfWidensToPagesAndHandsOutADescriptor) {
  FakeDeviceOps ops;
  char* dev = static_cast<char*>(ops.AllocDevice(5000));
  auto a = ops.AllocationOf(dev + 4000, /*dmabuf=*/true);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(dev);
  EXPECT_EQ(a->base % 4096, 0u);
  EXPECT_LE(a->base, begin);
  EXPECT_GE(a->base + a->bytes, begin + 5000);
  EXPECT_EQ(a->bytes % 4096, 0u);
  ASSERT_GE(a->dmabuf_fd, 0);
  close(a->dmabuf_fd);
  EXPECT_EQ(ops.AllocationOf(dev, false)->dmabuf_fd, -1);
  int host = 0;
  EXPECT_EQ(ops.AllocationOf(&host, false).status().code(), Code::kUnhandledCudaError);
  ops.set_dmabuf_supported(false);
  EXPECT_FALSE(ops.DmaBufSupported().value());
  EXPECT_FALSE(ops.AllocationOf(dev, true).ok());
  EXPECT_TRUE(ops.FlushRdmaWrites().ok());
  EXPECT_EQ(ops.rdma_flushes(), 1u);
  ops.FreeDevice(dev);
}

TEST(FakeDeviceOps, DestructionEndsWaitsThatWereNeverSatisfied) {
  auto ops = std::make_unique<FakeDeviceOps>();
  StreamHandle s = ops->CreateStream();
  uint64_t word = 0;
  ASSERT_TRUE(ops->StreamWaitValue(s, &word, 5).ok());
  ops.reset();  // must not hang
  SUCCEED();
}

}  // namespace
}  // namespace loom::cuda
