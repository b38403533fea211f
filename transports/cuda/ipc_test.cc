// IPC mapping cache against a fake backend (runs without a GPU), plus the
// real backend's refusal of host memory.
#include "transports/cuda/ipc.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "transports/cuda/cuda_runtime.h"

namespace loom::cuda {
namespace {

// Pretends to map allocations: each Open returns a fresh fake address and
// remembers it as open; Close checks it was.
class FakeBackend : public IpcBackend {
 public:
  Result<IpcExport> Export(const void*) override { return InternalError("unused"); }
  Result<void*> Open(const IpcExport& e) override {
    std::lock_guard<std::mutex> lock(mu);
    ++opens;
    if (fail_next_open) {
      fail_next_open = false;
      return Status(Code::kUnhandledCudaError, "cudaIpcOpenMemHandle failed: fake");
    }
    void* p = reinterpret_cast<void*>(next);
    next += (e.size + 0xFFFF) & ~uint64_t{0xFFFF};
    open.insert(p);
    return p;
  }
  void Close(void* mapped) override {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(open.erase(mapped), 1u) << "closing what is not open";
    ++closes;
  }

  std::mutex mu;
  uint64_t next = 0x7f0000000000;
  std::set<void*> open;
  int opens = 0;
  int closes = 0;
  bool fail_next_open = false;
};

IpcExport Export(char tag, uint64_t base, uint64_t size, uint64_t offset = 0) {
  IpcExport e;
  e.handle.fill(tag);
  e.base = base;
  e.size = size;
  e.offset = offset;
  return e;
}

uintptr_t Addr(const Result<void*>& r) {
  return reinterpret_cast<uintptr_t>(r.value());
}

TEST(IpcMappingCacheTest, TransientMappingsCloseOnReleaseAndKeptOnesStay) {
  FakeBackend fake;
  IpcMappingCache cache(&fake);
  // One operation maps a peer's unregistered buffer twice (send and recv in
  // one allocation) and a registered one.
  ASSERT_TRUE(cache.Map(1, Export('a', 0x1000000, 1 << 20, 0), false).ok());
  ASSERT_TRUE(cache.Map(1, Export('a', 0x1000000, 1 << 20, 64), false).ok());
  ASSERT_TRUE(cache.Map(1, Export('r', 0x3000000, 1 << 20), true).ok());
  EXPECT_EQ(fake.opens, 2);
  cache.ReleaseTransient();
  EXPECT_EQ(fake.closes, 1) << "the unregistered buffer is closed when the operation ends";
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.stats().releases, 1u);
  // The registered one is reused; the unregistered one opens again.
  ASSERT_TRUE(cache.Map(1, Export('r', 0x3000000, 1 << 20), true).ok());
  ASSERT_TRUE(cache.Map(1, Export('a', 0x1000000, 1 << 20), false).ok());
  EXPECT_EQ(fake.opens, 3);
  // The owner's word changes with each operation: registered now, kept;
  // deregistered later, closed at the end of that operation.
  ASSERT_TRUE(cache.Map(1, Export('a', 0x1000000, 1 << 20), true).ok());
  cache.ReleaseTransient();
  EXPECT_EQ(fake.closes, 1);
  EXPECT_EQ(cache.size(), 2u);
  ASSERT_TRUE(cache.Map(1, Export('r', 0x3000000, 1 << 20), false).ok());
  cache.ReleaseTransient();
  EXPECT_EQ(fake.closes, 2);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(IpcMappingCacheTest, OpensOnceAndAddsTheOffset) {
  FakeBackend fake;
  IpcMappingCache cache(&fake);
  Result<void*> a = cache.Map(1, Export('a', 0x1000000, 1 << 20, 0), true);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Result<void*> b = cache.Map(1, Export('a', 0x1000000, 1 << 20, 4096), true);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(Addr(b), Addr(a) + 4096);
  EXPECT_EQ(fake.opens, 1);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().opens, 1u);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(IpcMappingCacheTest, SameAddressOnAnotherPeerIsAnotherMapping) {
  FakeBackend fake;
  IpcMappingCache cache(&fake);
  Result<void*> a = cache.Map(1, Export('a', 0x1000000, 1 << 20), true);
  Result<void*> b = cache.Map(2, Export('b', 0x1000000, 1 << 20), true);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(Addr(a), Addr(b));
  EXPECT_EQ(fake.opens, 2);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(IpcMappingCacheTest, ReallocationAtTheSameAddressReopens) {
  FakeBackend fake;
  IpcMappingCache cache(&fake);
  ASSERT_TRUE(cache.Map(1, Export('a', 0x1000000, 1 << 20), true).ok());
  // Peer freed it and cudaMalloc returned the same range: new handle.
  ASSERT_TRUE(cache.Map(1, Export('z', 0x1000000, 1 << 20), true).ok());
  EXPECT_EQ(fake.opens, 2);
  EXPECT_EQ(fake.closes, 1);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(IpcMappingCacheTest, OverlappingNewAllocationEvictsOnlyTheOverlapped) {
  FakeBackend fake;
  IpcMappingCache cache(&fake);
  ASSERT_TRUE(cache.Map(1, Export('a', 0x1000000, 0x100000), true).ok());  // [16M, 17M)
  ASSERT_TRUE(cache.Map(1, Export('b', 0x1100000, 0x100000), true).ok());  // [17M, 18M)
  ASSERT_TRUE(cache.Map(1, Export('c', 0x1200000, 0x100000), true).ok());  // [18M, 19M)
  ASSERT_TRUE(cache.Map(2, Export('d', 0x1080000, 0x100000), true).ok());  // other peer: untouched
  // A bigger allocation of peer 1 over [16.5M, 18M) covers a and b, not c.
  ASSERT_TRUE(cache.Map(1, Export('e', 0x1080000, 0x180000), true).ok());
  EXPECT_EQ(cache.stats().evictions, 2u);
  EXPECT_EQ(cache.size(), 3u);  // c, d, e
  // c and d are still hits.
  ASSERT_TRUE(cache.Map(1, Export('c', 0x1200000, 0x100000), true).ok());
  ASSERT_TRUE(cache.Map(2, Export('d', 0x1080000, 0x100000), true).ok());
  EXPECT_EQ(cache.stats().hits, 2u);
}

TEST(IpcMappingCacheTest, AdjacentAllocationsDoNotOverlap) {
  FakeBackend fake;
  IpcMappingCache cache(&fake);
  ASSERT_TRUE(cache.Map(1, Export('a', 0x1000, 0x1000), true).ok());
  ASSERT_TRUE(cache.Map(1, Export('b', 0x2000, 0x1000), true).ok());
  ASSERT_TRUE(cache.Map(1, Export('c', 0x0, 0x1000), true).ok());
  EXPECT_EQ(cache.stats().evictions, 0u);
  EXPECT_EQ(cache.size(), 3u);
}

TEST(IpcMappingCacheTest, BadExportsAreRejectedWithoutOpening) {
  FakeBackend fake;
  IpcMappingCache cache(&fake);
  Result<void*> past = cache.Map(3, Export('a', 0x1000, 0x1000, 0x1000), true);
  EXPECT_EQ(past.status().code(), Code::kInvalidArgument);
  EXPECT_NE(past.status().message().find("rank 3"), std::string::npos);
  EXPECT_EQ(cache.Map(3, Export('a', 0x1000, 0), true).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(fake.opens, 0);
}

TEST(IpcMappingCacheTest, AFailedOpenCachesNothing) {
  FakeBackend fake;
  IpcMappingCache cache(&fake);
  fake.fail_next_open = true;
  Result<void*> r = cache.Map(1, Export('a', 0x1000, 0x1000), true);
  EXPECT_EQ(r.status().code(), Code::kUnhandledCudaError);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_TRUE(cache.Map(1, Export('a', 0x1000, 0x1000), true).ok());  // retried, works
  EXPECT_EQ(fake.opens, 2);
}

TEST(IpcMappingCacheTest, ForgetPeerAndDestructionCloseEverything) {
  FakeBackend fake;
  {
    IpcMappingCache cache(&fake);
    ASSERT_TRUE(cache.Map(1, Export('a', 0x1000, 0x1000), true).ok());
    ASSERT_TRUE(cache.Map(1, Export('b', 0x4000, 0x1000), true).ok());
    ASSERT_TRUE(cache.Map(2, Export('c', 0x1000, 0x1000), true).ok());
    cache.ForgetPeer(1);
    EXPECT_EQ(fake.closes, 2);
    EXPECT_EQ(cache.size(), 1u);
    cache.ForgetPeer(7);                                          // nothing mapped: no-op
    ASSERT_TRUE(cache.Map(1, Export('a', 0x1000, 0x1000), true).ok());  // opens afresh
    EXPECT_EQ(fake.opens, 4);
  }
  EXPECT_TRUE(fake.open.empty());
  EXPECT_EQ(fake.closes, 4);
}

TEST(IpcMappingCacheTest, ForgetRangeClosesOnlyThatPeersOverlappingMappings) {
  FakeBackend fake;
  IpcMappingCache cache(&fake);
  ASSERT_TRUE(cache.Map(1, Export('a', 0x1000, 0x1000), true).ok());  // [4K, 8K)
  ASSERT_TRUE(cache.Map(1, Export('b', 0x2000, 0x1000), true).ok());  // [8K, 12K)
  ASSERT_TRUE(cache.Map(2, Export('c', 0x1000, 0x1000), true).ok());  // other peer
  // Peer 1 deregistered a range inside a: only a closes.
  EXPECT_EQ(cache.ForgetRange(1, 0x1800, 0x100), 1u);
  EXPECT_EQ(fake.closes, 1);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.stats().forgotten, 1u);
  // Nothing of peer 1 at [0, 4K) or [12K, 16K): adjacent is not overlapping.
  EXPECT_EQ(cache.ForgetRange(1, 0x0, 0x1000), 0u);
  EXPECT_EQ(cache.ForgetRange(1, 0x3000, 0x1000), 0u);
  // b is still a hit; a opens afresh.
  ASSERT_TRUE(cache.Map(1, Export('b', 0x2000, 0x1000), true).ok());
  ASSERT_TRUE(cache.Map(1, Export('a', 0x1000, 0x1000), true).ok());
  EXPECT_EQ(fake.opens, 4);
  cache.Clear();
  EXPECT_TRUE(fake.open.empty());
  EXPECT_EQ(cache.size(), 0u);
}

TEST(IpcMappingCacheTest, ConcurrentMapsOfOneAllocationOpenItOnce) {
  FakeBackend fake;
  IpcMappingCache cache(&fake);
  std::vector<std::thread> threads;
  std::vector<uintptr_t> got(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        Result<void*> r = cache.Map(1, Export('a', 0x1000, 0x10000, 64), true);
        ASSERT_TRUE(r.ok());
        got[t] = Addr(r);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(fake.opens, 1);
  for (uintptr_t g : got) EXPECT_EQ(g, got[0]);
  EXPECT_EQ(cache.stats().hits, 799u);
}

TEST(CudaIpcBackendTest, HostMemoryCannotBeExported) {
  auto backend = MakeCudaIpcBackend();
  std::vector<char> host(4096);
  Result<IpcExport> e = backend->Export(host.data());
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
  EXPECT_NE(e.status().message().find("host memory"), std::string::npos) << e.status().message();
}

TEST(CudaIpcBackendTest, DeviceAllocationExportsItsRange) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 3 << 20), cudaSuccess);
  auto backend = MakeCudaIpcBackend();
  Result<IpcExport> e = backend->Export(static_cast<char*>(dev) + 12345);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->base, reinterpret_cast<uintptr_t>(dev));
  EXPECT_GE(e->size, uint64_t{3} << 20);
  EXPECT_EQ(e->offset, 12345u);
  // Opening one's own handle in the same process is refused by CUDA; the
  // cross-process path is covered by the multi-process GPU tests.
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

}  // namespace
}  // namespace loom::cuda
