// Tests of the CUDA runtime wrapper that hold with or without a GPU: error
// conversion, device count, host pointer classification. Cases that need a
// device skip when there is none.
#include "transports/cuda/cuda_runtime.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

namespace loom::cuda {
namespace {

TEST(CudaStatusTest, SuccessIsOk) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "cudaFoo").ok());
}

TEST(CudaStatusTest, ErrorNamesTheCallAndTheRuntimeMessage) {
  const Status s = CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc(1 GiB)");
  EXPECT_EQ(s.code(), Code::kUnhandledCudaError);
  EXPECT_NE(s.message().find("cudaMalloc(1 GiB) failed"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cudaErrorMemoryAllocation"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(cudaGetErrorString(cudaErrorMemoryAllocation)), std::string::npos)
      << s.message();
}

Status FailingHelper() {
  LOOM_CUDA_TRY(cudaErrorInvalidValue);
  return InternalError("not reached");
}

TEST(CudaStatusTest, TryMacroPropagatesAndQuotesTheExpression) {
  const Status s = FailingHelper();
  EXPECT_EQ(s.code(), Code::kUnhandledCudaError);
  EXPECT_NE(s.message().find("cudaErrorInvalidValue failed"), std::string::npos) << s.message();
}

TEST(DeviceCountTest, IsStableAndNeverNegative) {
  const int n = DeviceCount();
  EXPECT_GE(n, 0);
  EXPECT_EQ(DeviceCount(), n);
  // With a device, asking leaves no error behind. (Without a driver the
  // runtime's initialisation error is permanent: every call returns it.)
  if (n > 0) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

TEST(ClassifyPointerTest, HostMemoryOfEveryKindIsHost) {
  static int global = 0;
  int stack = 0;
  std::vector<char> heap(4096);
  void* big = std::malloc(64 << 20);  // mmap'ed by glibc: another kind of host page
  ASSERT_NE(big, nullptr);
  for (const void* p : {static_cast<const void*>(&global), static_cast<const void*>(&stack),
                        static_cast<const void*>(heap.data()), static_cast<const void*>(big),
                        static_cast<const void*>(heap.data() + 1)}) {
    Result<PointerInfo> info = ClassifyPointer(p);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->kind, MemoryKind::kHost) << MemoryKindName(info->kind);
    EXPECT_EQ(info->device, -1);
  }
  std::free(big);
  if (DeviceCount() > 0) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

TEST(ClassifyPointerTest, NullIsHost) {
  Result<PointerInfo> info = ClassifyPointer(nullptr);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, MemoryKind::kHost);
}

TEST(MemoryKindTest, Names) {
  EXPECT_STREQ(MemoryKindName(MemoryKind::kHost), "host");
  EXPECT_STREQ(MemoryKindName(MemoryKind::kPinnedHost), "pinned host");
  EXPECT_STREQ(MemoryKindName(MemoryKind::kDevice), "device");
  EXPECT_STREQ(MemoryKindName(MemoryKind::kManaged), "managed");
}

TEST(RaiiTest, EmptyOwnersAreHarmless) {
  Stream s;
  Event e;
  PinnedBuffer b;
  EXPECT_EQ(s.get(), nullptr);
  EXPECT_EQ(e.get(), nullptr);
  EXPECT_EQ(b.data(), nullptr);
  Stream s2 = std::move(s);
  EXPECT_EQ(s2.get(), nullptr);
}

TEST(RaiiTest, ZeroBytePinnedBufferNeedsNoDevice) {
  Result<PinnedBuffer> b = PinnedBuffer::Allocate(0);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->size(), 0u);
}

TEST(RaiiTest, WithoutADeviceCreationFailsAsCudaError) {
  if (DeviceCount() > 0) GTEST_SKIP() << "a device is present: covered by the gpu tests";
  Result<Stream> s = Stream::Create();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kUnhandledCudaError);
  EXPECT_NE(s.status().message().find("cudaStreamCreateWithPriority"), std::string::npos)
      << s.status().message();
  (void)cudaGetLastError();
}

// --- with a device -----------------------------------------------------------

class WithDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(WithDevice, ClassifiesDeviceManagedAndPinned) {
  void* dev = nullptr;
  void* managed = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 1 << 20), cudaSuccess);
  ASSERT_EQ(cudaMallocManaged(&managed, 1 << 20), cudaSuccess);
  Result<PinnedBuffer> pinned = PinnedBuffer::Allocate(1 << 20);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();

  Result<PointerInfo> d = ClassifyPointer(static_cast<char*>(dev) + 100);  // interior pointer
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, MemoryKind::kDevice);
  EXPECT_GE(d->device, 0);
  Result<PointerInfo> m = ClassifyPointer(managed);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kind, MemoryKind::kManaged);
  Result<PointerInfo> p = ClassifyPointer(pinned->data());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kind, MemoryKind::kPinnedHost);
  int host = 0;
  Result<PointerInfo> h = ClassifyPointer(&host);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->kind, MemoryKind::kHost);

  EXPECT_EQ(cudaFree(dev), cudaSuccess);
  EXPECT_EQ(cudaFree(managed), cudaSuccess);
}

TEST_F(WithDevice, StreamsAndEventsOrderAndTime) {
  Result<Stream> s = Stream::Create();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Result<Event> start = Event::Create(/*timing=*/true);
  Result<Event> stop = Event::Create(/*timing=*/true);
  ASSERT_TRUE(start.ok() && stop.ok());
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 64 << 20), cudaSuccess);
  ASSERT_TRUE(start->Record(s->get()).ok());
  ASSERT_EQ(cudaMemsetAsync(dev, 1, 64 << 20, s->get()), cudaSuccess);
  ASSERT_TRUE(stop->Record(s->get()).ok());
  ASSERT_TRUE(stop->Synchronize().ok());
  Result<bool> done = stop->Query();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  Result<float> ms = start->ElapsedMsUntil(*stop);
  ASSERT_TRUE(ms.ok()) << ms.status().ToString();
  EXPECT_GE(*ms, 0.0f);
  EXPECT_TRUE(s->Synchronize().ok());
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

TEST_F(WithDevice, RuntimeErrorsBecomeStatus) {
  void* p = nullptr;
  // Far more than any GPU has: the runtime refuses it without side effects.
  const Status s = CudaStatus(cudaMalloc(&p, size_t{1} << 60), "cudaMalloc(1 EiB)");
  EXPECT_EQ(s.code(), Code::kUnhandledCudaError);
  EXPECT_NE(s.message().find("cudaMalloc(1 EiB) failed"), std::string::npos);
  (void)cudaGetLastError();
}

}  // namespace
}  // namespace loom::cuda
