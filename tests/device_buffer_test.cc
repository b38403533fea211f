// Stream-ordered collectives on device buffers, without a GPU: ranks as
// threads, FakeDeviceOps as the device (tagged host memory, streams as task
// FIFOs). Covers staging correctness for every collective, stream order,
// mixed-space errors, abort while a stream waits, enqueue failures, groups
// over two streams, and reuse of the pinned staging cache.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <thread>
#include <vector>

#include "comm/device_ipc.h"
#include "comm/device_path.h"
#include "tests/device_conformance.h"
#include "tests/fake_device_hooks.h"
#include "tests/harness.h"
#include "tests/fake_device_ops.h"

namespace loom::testing {
namespace {

using std::chrono::milliseconds;

Deadline Soon() { return Deadline::After(milliseconds(20000)); }

// Parameter: whether CUDA IPC is on (the default with one "GPU") or device
// buffers are staged through pinned host memory (NCCL_P2P_DISABLE=1).
class DeviceBuffers : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    SetDeviceOpsForTesting(&fake_);
    if (!GetParam()) setenv("NCCL_P2P_DISABLE", "1", 1);
  }
  void TearDown() override {
    unsetenv("NCCL_P2P_DISABLE");
    unsetenv("NCCL_P2P_LEVEL");
    unsetenv("LOOM_CUDA_STAGING_CHUNK");
    unsetenv("LOOM_CUDA_IPC_COPY_BYTES");
    SetDeviceOpsForTesting(nullptr);
  }
  bool ipc() const { return GetParam(); }
  cuda::FakeDeviceOps fake_;
};

// Tests of the staging itself.
class StagedDeviceBuffers : public DeviceBuffers {};
// Tests of the IPC path itself.
class IpcDeviceBuffers : public DeviceBuffers {};

std::string ModeName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "Ipc" : "Staged";
}
INSTANTIATE_TEST_SUITE_P(Modes, DeviceBuffers, ::testing::Bool(), ModeName);
INSTANTIATE_TEST_SUITE_P(Staged, StagedDeviceBuffers, ::testing::Values(false), ModeName);
INSTANTIATE_TEST_SUITE_P(Ipc, IpcDeviceBuffers, ::testing::Values(true), ModeName);

// Every collective x type x op on 2, 3 and 4 ranks against the reference.
void EveryCollective(cuda::FakeDeviceOps& fake, bool ipc) {
  const bool quick = std::getenv("LOOM_TEST_QUICK") != nullptr;
  std::vector<DataType> types = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                                 DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                                 DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                                 DataType::kBfloat16};
  if (quick) types = {DataType::kInt8, DataType::kFloat16, DataType::kFloat32, DataType::kBfloat16};
  const std::vector<size_t> counts = {0, 1, 7, 1031};
  for (int n : {2, 3, 4}) {
    RunRanks(n, [&](Communicator& c) {
      FakeHooks h(fake);
      CheckDeviceCollectives(c, h, types, counts);
    });
  }
  // The reductions ran as device kernels exactly when IPC is on.
  if (ipc) {
    EXPECT_GT(fake.reduce_launches(), 0u);
    EXPECT_GT(fake.ipc_opens(), 0u);
    EXPECT_EQ(fake.ipc_closes(), fake.ipc_opens()) << "every peer mapping closed again";
    EXPECT_EQ(fake.frees_while_mapped(), 0u);
  } else {
    EXPECT_EQ(fake.reduce_launches(), 0u);
    EXPECT_EQ(fake.ipc_opens(), 0u);
  }
}

// Through IPC these sizes are copied into the peers' mapped copy buffers.
TEST_P(DeviceBuffers, EveryCollectiveOnTwoThreeAndFourRanks) {
  EveryCollective(fake_, ipc());
}

// And with LOOM_CUDA_IPC_COPY_BYTES=0 peers map the user's buffers.
TEST_P(IpcDeviceBuffers, EveryCollectiveMappingTheUsersBuffers) {
  setenv("LOOM_CUDA_IPC_COPY_BYTES", "0", 1);
  EveryCollective(fake_, true);
}

TEST_P(DeviceBuffers, CollectiveStartsAfterEarlierStreamWorkAndReturnsAtOnce) {
  RunRanks(2, [&](Communicator& c) {
    const size_t count = 4096;
    GpuStream s = fake_.CreateStream();
    auto* send = static_cast<int32_t*>(fake_.AllocDevice(count * 4));
    auto* recv = static_cast<int32_t*>(fake_.AllocDevice(count * 4));
    // Earlier work on the stream writes the input late: a collective that
    // read the buffer before it ran would sum zeros.
    fake_.Enqueue(s, [&] {
      std::this_thread::sleep_for(milliseconds(200));
      for (size_t i = 0; i < count; ++i) send[i] = static_cast<int32_t>(i) + c.rank();
    });
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(c.AllReduce(send, recv, count, DataType::kInt32, RedOp::kSum, s).ok());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(150)) << "did not return once enqueued";
    EXPECT_EQ(recv[count - 1], 0) << "results before the stream got there";
    // Later work on the stream sees the results.
    std::atomic<int32_t> seen{-1};
    fake_.Enqueue(s, [&] { seen = recv[count - 1]; });
    ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
    EXPECT_EQ(seen.load(), static_cast<int32_t>(2 * (count - 1) + 1));
    EXPECT_TRUE(c.AsyncError().ok());
  });
}

// A pre-multiplied sum on device buffers, with the scalar by value or in
// device memory that the stream's earlier work writes (so it must be read
// in stream order), out of place and in place; staged ones also in chunks.
// Products and sums of these values are exact.
TEST_P(DeviceBuffers, PreMulSumReadsADeviceScalarInStreamOrder) {
  if (!ipc()) setenv("LOOM_CUDA_STAGING_CHUNK", "4096", 1);
  constexpr int kRanks = 3;
  constexpr size_t kCount = 2000;
  auto value = [](int q, size_t i) { return static_cast<float>((i * 5 + q) % 512); };
  auto factor = [](int q) { return 0.5f * static_cast<float>(q + 1); };
  auto want = [&](size_t i) {
    float sum = 0;
    for (int q = 0; q < kRanks; ++q) sum += factor(q) * value(q, i);
    return sum;
  };
  RunRanks(kRanks, [&](Communicator& c) {
    const int r = c.rank();
    GpuStream s = fake_.CreateStream();
    auto* send = static_cast<float*>(fake_.AllocDevice(kCount * kRanks * 4));
    auto* recv = static_cast<float*>(fake_.AllocDevice(kCount * kRanks * 4));
    auto* scalar = static_cast<float*>(fake_.AllocDevice(4));
    *scalar = 100.0f;  // what a read before the stream got there would see
    fake_.Enqueue(s, [=] {
      std::this_thread::sleep_for(milliseconds(50));
      *scalar = factor(r);
      for (size_t i = 0; i < kCount * kRanks; ++i) send[i] = value(r, i);
    });
    const float f = factor(r);
    for (bool by_value : {false, true}) {
      const Reduction red = by_value ? Reduction::PreMulSum(&f, DataType::kFloat32)
                                     : Reduction::PreMulSumAt(scalar, DataType::kFloat32);
      const char* how = by_value ? "by value" : "device scalar";
      ASSERT_TRUE(c.AllReduce(send, recv, kCount, DataType::kFloat32, red, s).ok());
      ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
      for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(recv[i], want(i)) << how << " i=" << i;
      ASSERT_TRUE(c.ReduceScatter(send, recv, kCount, DataType::kFloat32, red, s).ok());
      ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
      for (size_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(recv[i], want(r * kCount + i)) << how << " reduce-scatter i=" << i;
      }
      ASSERT_TRUE(c.Reduce(send, recv, kCount, DataType::kFloat32, red, 2, s).ok());
      ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
      if (r == 2) {
        for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(recv[i], want(i)) << how << " reduce i=" << i;
      }
      for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(send[i], value(r, i)) << "input changed";
    }
    // In place, last: it overwrites the input.
    ASSERT_TRUE(c.AllReduce(send, send, kCount, DataType::kFloat32,
                            Reduction::PreMulSumAt(scalar, DataType::kFloat32), s)
                    .ok());
    ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(send[i], want(i)) << "in place i=" << i;
    // A scalar of another type than the buffers' is refused by name.
    const int32_t wrong = 2;
    const Status st = c.AllReduce(send, recv, kCount, DataType::kFloat32,
                                  Reduction::PreMulSum(&wrong, DataType::kInt32), s);
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find("PreMulSum scalar is int32"), std::string::npos) << st.ToString();
    EXPECT_TRUE(c.AsyncError().ok());
    fake_.FreeDevice(send);
    fake_.FreeDevice(recv);
    fake_.FreeDevice(scalar);
  });
  unsetenv("LOOM_CUDA_STAGING_CHUNK");
  // Through IPC the scaling is a device kernel; staged, the host scales the
  // pinned copy.
  if (ipc()) {
    EXPECT_GT(fake_.premul_launches(), 0u);
  } else {
    EXPECT_EQ(fake_.premul_launches(), 0u);
  }
}

TEST_P(DeviceBuffers, MixedDeviceAndHostBuffersAreInvalidUsageNamingEach) {
  RunRanks(1, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    void* dev = fake_.AllocDevice(64);
    float host[16] = {};
    Status st = c.AllReduce(dev, host, 16, DataType::kFloat32, RedOp::kSum, s);
    EXPECT_EQ(st.code(), Code::kInvalidUsage);
    EXPECT_NE(st.message().find("sendbuf is device memory on GPU 0"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("recvbuf is host memory"), std::string::npos) << st.message();
    st = c.AllGather(host, dev, 4, DataType::kFloat32, s);
    EXPECT_EQ(st.code(), Code::kInvalidUsage);
    EXPECT_NE(st.message().find("sendbuf is host memory"), std::string::npos) << st.message();
    // Argument errors still come first, and the communicator still works.
    EXPECT_EQ(c.AllReduce(nullptr, dev, 4, DataType::kFloat32, RedOp::kSum, s).code(),
              Code::kInvalidArgument);
    EXPECT_TRUE(c.AsyncError().ok());
  });
}

TEST_P(DeviceBuffers, HostBuffersWithAStreamBehaveAsTheBlockingForm) {
  RunRanks(2, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    int32_t x[3] = {1, 2, 3}, y[3] = {};
    ASSERT_TRUE(c.AllReduce(x, y, 3, DataType::kInt32, RedOp::kSum, s).ok());
    EXPECT_EQ(y[2], 6);  // done when the call returned
    EXPECT_EQ(fake_.Pending(s), 0u);
  });
  EXPECT_EQ(fake_.pinned_allocations(), 0u);  // no staging for host memory
}

TEST_P(DeviceBuffers, AbortReleasesAStreamWaitingForAPeer) {
  std::atomic<bool> done{false};
  RunRanks(2, [&](Communicator& c) {
    if (c.rank() == 1) {  // never joins the all-reduce: rank 0's stream would wait forever
      while (!done.load()) std::this_thread::sleep_for(milliseconds(1));
      return;
    }
    GpuStream s = fake_.CreateStream();
    void* buf = fake_.AllocDevice(1024);
    ASSERT_TRUE(c.AllReduce(buf, buf, 256, DataType::kFloat32, RedOp::kSum, s).ok());
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_GT(fake_.Pending(s), 0u);
    c.Abort();
    EXPECT_TRUE(fake_.Synchronize(s, Soon()).ok()) << "stream still waits after Abort";
    EXPECT_FALSE(c.AsyncError().ok());
    // A failed communicator enqueues nothing more.
    EXPECT_FALSE(c.AllReduce(buf, buf, 256, DataType::kFloat32, RedOp::kSum, s).ok());
    EXPECT_EQ(fake_.Pending(s), 0u);
    done = true;
  });
}

TEST_P(DeviceBuffers, AbortReleasesAStreamWhoseEarlierWorkNeverFinishes) {
  RunRanks(1, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    void* buf = fake_.AllocDevice(64);
    std::atomic<bool> gate{false};
    fake_.Enqueue(s, [&] {
      while (!gate.load()) std::this_thread::sleep_for(milliseconds(1));
    });
    ASSERT_TRUE(c.AllReduce(buf, buf, 16, DataType::kFloat32, RedOp::kSum, s).ok());
    std::this_thread::sleep_for(milliseconds(30));  // the worker polls `ready`
    c.Abort();
    gate = true;
    EXPECT_TRUE(fake_.Synchronize(s, Soon()).ok());
    EXPECT_FALSE(c.AsyncError().ok());
  });
}

TEST_P(StagedDeviceBuffers, EnqueueFailureIsACudaErrorAndFailsTheCommunicator) {
  RunRanks(1, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    void* buf = fake_.AllocDevice(64);
    fake_.FailNextCopy();
    Status st = c.AllReduce(buf, buf, 16, DataType::kFloat32, RedOp::kSum, s);
    EXPECT_EQ(st.code(), Code::kUnhandledCudaError) << st.ToString();
    EXPECT_NE(st.message().find("AllReduce"), std::string::npos) << st.message();
    EXPECT_EQ(c.AsyncError().code(), Code::kUnhandledCudaError);
    EXPECT_TRUE(fake_.Synchronize(s, Soon()).ok());
  });
}

TEST_P(DeviceBuffers, GroupOverTwoStreamsReleasesEachAndReturnsOnceEnqueued) {
  RunRanks(2, [&](Communicator& c) {
    GpuStream a = fake_.CreateStream(), b = fake_.CreateStream();
    auto* x = static_cast<int32_t*>(fake_.AllocDevice(16));
    auto* g = static_cast<int32_t*>(fake_.AllocDevice(32));
    x[0] = c.rank() + 1;
    g[c.rank()] = 10 * (c.rank() + 1);
    std::atomic<bool> gate{false};
    fake_.Enqueue(b, [&] {
      while (!gate.load()) std::this_thread::sleep_for(milliseconds(1));
    });
    ASSERT_TRUE(GroupStart().ok());
    EXPECT_TRUE(c.AllReduce(x, x, 1, DataType::kInt32, RedOp::kSum, a).ok());
    EXPECT_TRUE(c.AllGather(g + c.rank(), g, 1, DataType::kInt32, b).ok());
    ASSERT_TRUE(GroupEnd().ok());  // returns though stream b is held
    gate = true;
    ASSERT_TRUE(fake_.Synchronize(a, Soon()).ok());
    ASSERT_TRUE(fake_.Synchronize(b, Soon()).ok());
    EXPECT_EQ(x[0], 3);
    EXPECT_EQ(g[0], 10);
    EXPECT_EQ(g[1], 20);
  });
}

TEST_P(StagedDeviceBuffers, PinnedStagingIsReusedAtSteadyState) {
  RunRanks(2, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    const size_t count = 100000;
    void* buf = fake_.AllocDevice(count * 4);
    // Four in flight per round (the stream is held until all are issued):
    // the cache grows to four blocks in round 0, then serves every later
    // round from them.
    size_t after_first = 0;
    for (int round = 0; round < 5; ++round) {
      std::atomic<bool> gate{false};
      fake_.Enqueue(s, [&] {
        while (!gate.load()) std::this_thread::sleep_for(milliseconds(1));
      });
      for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(c.AllReduce(buf, buf, count, DataType::kFloat32, RedOp::kMax, s).ok());
      }
      gate = true;
      ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
      ASSERT_TRUE(c.Barrier().ok());  // both ranks finished this round
      if (round == 0) after_first = fake_.pinned_allocations();
    }
    ASSERT_TRUE(c.Barrier().ok());
    EXPECT_EQ(fake_.pinned_allocations(), after_first) << "staging grew at steady state";
    // Smaller operations fit the existing blocks.
    ASSERT_TRUE(c.AllReduce(buf, buf, 10, DataType::kFloat32, RedOp::kMax, s).ok());
    ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
    ASSERT_TRUE(c.Barrier().ok());
    EXPECT_EQ(fake_.pinned_allocations(), after_first);
  });
  EXPECT_EQ(fake_.pinned_live(), 0u) << "a destroyed communicator leaks pinned memory";
}

TEST_P(StagedDeviceBuffers, LargeOperationsArePipelinedInChunks) {
  // 4 KiB chunks: every collective below is split, with a remainder chunk
  // (reduce-scatter, all-gather and all-to-all into strided pieces of every
  // block), and must still be exact in and out of place.
  setenv("LOOM_CUDA_STAGING_CHUNK", "4096", 1);
  const std::vector<DataType> types = {DataType::kInt8, DataType::kFloat16, DataType::kFloat32,
                                       DataType::kFloat64};
  for (int n : {2, 3}) {
    RunRanks(n, [&](Communicator& c) {
      FakeHooks h(fake_);
      CheckDeviceCollectives(c, h, types, {4099, 9000});
    });
  }
  unsetenv("LOOM_CUDA_STAGING_CHUNK");
  // One block per chunk in flight, not one for the whole buffer.
  EXPECT_GE(fake_.pinned_allocations(), 3u + 3u);
}

TEST_P(StagedDeviceBuffers, ChunksCompleteInStreamOrder) {
  setenv("LOOM_CUDA_STAGING_CHUNK", "4096", 1);
  RunRanks(2, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    const size_t count = 10000;  // 40 KB of int32: 10 chunks
    auto* buf = static_cast<int32_t*>(fake_.AllocDevice(count * 4));
    std::atomic<bool> gate{false};
    fake_.Enqueue(s, [&] {
      while (!gate.load()) std::this_thread::sleep_for(milliseconds(1));
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int32_t>(i) * (c.rank() + 1);
    });
    ASSERT_TRUE(c.AllReduce(buf, buf, count, DataType::kInt32, RedOp::kSum, s).ok());
    std::this_thread::sleep_for(milliseconds(20));
    EXPECT_EQ(buf[count - 1], 0) << "a chunk ran before the stream's earlier work";
    gate = true;
    ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
    for (size_t i = 0; i < count; i += 997) EXPECT_EQ(buf[i], static_cast<int32_t>(3 * i)) << i;
    EXPECT_EQ(buf[count - 1], static_cast<int32_t>(3 * (count - 1)));
    EXPECT_TRUE(c.AsyncError().ok());
  });
  unsetenv("LOOM_CUDA_STAGING_CHUNK");
}

TEST_P(StagedDeviceBuffers, ChunkSizeZeroStagesWholeBuffers) {
  setenv("LOOM_CUDA_STAGING_CHUNK", "0", 1);
  RunRanks(2, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    const size_t count = size_t{1} << 19;  // 2 MiB of floats: two default chunks
    auto* buf = static_cast<float*>(fake_.AllocDevice(count * 4));
    for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(c.rank() + 1);
    ASSERT_TRUE(c.AllReduce(buf, buf, count, DataType::kFloat32, RedOp::kSum, s).ok());
    ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
    EXPECT_EQ(buf[0], 3.0f);
    EXPECT_EQ(buf[count - 1], 3.0f);
  });
  // Per rank: the signal word and one block for the whole buffer.
  EXPECT_EQ(fake_.pinned_allocations(), 4u);
}

TEST_P(IpcDeviceBuffers, PeersAreMappedPerOperationAndEachBlockIsReducedOnce) {
  setenv("LOOM_CUDA_IPC_COPY_BYTES", "0", 1);  // map the user's buffers
  constexpr int kOps = 20;
  RunRanks(2, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    const size_t count = 10000;
    auto* send = static_cast<float*>(fake_.AllocDevice(count * 4));
    auto* recv = static_cast<float*>(fake_.AllocDevice(count * 4));
    for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>(i % 7) + c.rank();
    for (int i = 0; i < kOps; ++i) {
      ASSERT_TRUE(c.AllReduce(send, recv, count, DataType::kFloat32, RedOp::kSum, s).ok());
    }
    ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(recv[i], 2 * static_cast<float>(i % 7) + 1) << "element " << i;
    }
    ASSERT_TRUE(c.Barrier().ok());
  });
  // Each rank maps the peer's send and receive buffers for each operation
  // and closes them at its end (the user may free them once the stream
  // passes the operation), and reduces its own block once per operation
  // (one peer to add).
  EXPECT_EQ(fake_.ipc_opens(), 4u * kOps);
  EXPECT_EQ(fake_.ipc_closes(), 4u * kOps);
  EXPECT_EQ(fake_.reduce_launches(), 2u * kOps);
  EXPECT_EQ(fake_.pinned_allocations(), 2u) << "only each communicator's signal word";
}

// Unregistered buffers that fit LOOM_CUDA_IPC_COPY_BYTES are copied into
// each rank's copy buffer, which peers map once for the communicator's life;
// the user's buffers are never mapped, so they may be freed at any time.
TEST_P(IpcDeviceBuffers, SmallOperationsGoThroughCopyBuffersMappedOnce) {
  constexpr int kOps = 10;
  std::latch ran(3), checked(3), first_gone(3);
  RunRanks(3, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    const int n = c.size();
    const size_t count = 1000;
    for (int i = 0; i < kOps; ++i) {
      // Fresh buffers each time, freed at once: nothing maps them.
      auto* send = static_cast<float*>(fake_.AllocDevice(count * n * 4));
      auto* recv = static_cast<float*>(fake_.AllocDevice(count * n * 4));
      for (size_t j = 0; j < count * n; ++j) send[j] = static_cast<float>(j % 9) + c.rank() + i;
      ASSERT_TRUE(c.AllReduce(send, recv, count, DataType::kFloat32, RedOp::kSum, s).ok());
      ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
      for (size_t j = 0; j < count; ++j) {
        ASSERT_EQ(recv[j], 3 * (static_cast<float>(j % 9) + i) + 3) << "all-reduce " << j;
      }
      ASSERT_TRUE(c.AllGather(send, recv, count, DataType::kFloat32, s).ok());
      ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
      for (int p = 0; p < n; ++p) {
        ASSERT_EQ(recv[p * count + 5], static_cast<float>(5 % 9) + p + i) << "all-gather " << p;
      }
      ASSERT_TRUE(c.ReduceScatter(send, recv, count, DataType::kFloat32, RedOp::kMax, s).ok());
      ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
      const size_t k = c.rank() * count + 4;  // the max is rank 2's input
      ASSERT_EQ(recv[4], static_cast<float>(k % 9) + 2 + i) << "reduce-scatter";
      fake_.FreeDevice(send);
      fake_.FreeDevice(recv);
    }
    ran.arrive_and_wait();
    EXPECT_EQ(fake_.ipc_opens(), 6u) << "each rank maps each peer's copy buffer once";
    EXPECT_EQ(fake_.ipc_closes(), 0u);
    EXPECT_TRUE(c.AsyncError().ok()) << c.AsyncError().ToString();
    checked.arrive_and_wait();
    // Rank 0's communicator goes first: its peers must have closed their
    // mappings of its copy buffer before it is freed.
    if (c.rank() == 0) {
      ASSERT_TRUE(c.Finalize().ok());
    }
    first_gone.arrive_and_wait();
    if (c.rank() != 0) std::this_thread::sleep_for(milliseconds(100));
  });
  EXPECT_EQ(fake_.ipc_closes(), 6u);
  EXPECT_EQ(fake_.frees_while_mapped(), 0u);
}

TEST_P(IpcDeviceBuffers, ABufferMayBeFreedOnceTheStreamPassedTheOperation) {
  // NCCL's contract: when the stream has passed the collective, the buffer
  // is the user's again. Freeing it while a peer still had it open through
  // IPC would be undefined behaviour, so no peer may hold it by then.
  setenv("LOOM_CUDA_IPC_COPY_BYTES", "0", 1);  // map the user's buffers
  RunRanks(2, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    for (int round = 0; round < 3; ++round) {
      auto* buf = static_cast<int64_t*>(fake_.AllocDevice(64 * 8));
      for (int i = 0; i < 64; ++i) buf[i] = (round + 1) * (c.rank() + 1);
      ASSERT_TRUE(c.AllReduce(buf, buf, 64, DataType::kInt64, RedOp::kSum, s).ok());
      ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
      EXPECT_EQ(buf[63], 3 * (round + 1));
      fake_.FreeDevice(buf);
    }
    EXPECT_TRUE(c.AsyncError().ok()) << c.AsyncError().ToString();
  });
  EXPECT_EQ(fake_.ipc_opens(), 6u);  // in place: one buffer per rank per round
  EXPECT_EQ(fake_.frees_while_mapped(), 0u);
}

TEST_P(IpcDeviceBuffers, RanksIssuingDifferentOperationsFailNamingIt) {
  RunRanks(2, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    auto* buf = static_cast<float*>(fake_.AllocDevice(64 * 4));
    const RedOp op = c.rank() == 0 ? RedOp::kSum : RedOp::kMax;
    ASSERT_TRUE(c.AllReduce(buf, buf, 64, DataType::kFloat32, op, s).ok());
    ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok()) << "the stream must be released";
    const Status st = c.AsyncError();
    // Its own verdict, or the peer's relayed first: both name the mismatch.
    EXPECT_TRUE(st.code() == Code::kInvalidUsage || st.code() == Code::kRemoteError) << st.ToString();
    EXPECT_NE(st.message().find("did not run the same"), std::string::npos) << st.message();
  });
}

// A PreMulSum on one rank and a plain sum on the other would mix scaled and
// unscaled inputs: the records differ, so both fail naming it.
TEST_P(IpcDeviceBuffers, APreMulSumAgainstAPlainSumFailsNamingIt) {
  RunRanks(2, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    auto* buf = static_cast<float*>(fake_.AllocDevice(64 * 4));
    const float two = 2.0f;
    const Reduction red = c.rank() == 0 ? Reduction::PreMulSum(&two, DataType::kFloat32)
                                        : Reduction(RedOp::kSum);
    ASSERT_TRUE(c.AllReduce(buf, buf, 64, DataType::kFloat32, red, s).ok());
    ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok()) << "the stream must be released";
    const Status st = c.AsyncError();
    EXPECT_TRUE(st.code() == Code::kInvalidUsage || st.code() == Code::kRemoteError) << st.ToString();
    EXPECT_NE(st.message().find("did not run the same"), std::string::npos) << st.message();
  });
}

TEST_P(IpcDeviceBuffers, AFailedOperationClosesTheMappingsItOpened) {
  // Rank 2 issues another op: ranks 0 and 1 map each other's buffers, then
  // find the mismatch and fail. Nothing was enqueued, so each closes what it
  // opened before its stream is released, not only when the communicator
  // is destroyed.
  setenv("LOOM_CUDA_IPC_COPY_BYTES", "0", 1);  // map the user's buffers
  std::latch released(3);
  RunRanks(3, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    auto* buf = static_cast<float*>(fake_.AllocDevice(64 * 4));
    const RedOp op = c.rank() == 2 ? RedOp::kMax : RedOp::kSum;
    ASSERT_TRUE(c.AllReduce(buf, buf, 64, DataType::kFloat32, op, s).ok());
    ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok()) << "the stream must be released";
    EXPECT_FALSE(c.AsyncError().ok());
    released.arrive_and_wait();
    EXPECT_GT(fake_.ipc_opens(), 0u);
    EXPECT_EQ(fake_.ipc_closes(), fake_.ipc_opens());
    fake_.FreeDevice(buf);
  });
  EXPECT_EQ(fake_.frees_while_mapped(), 0u);
}

TEST_P(IpcDeviceBuffers, SendRecvReadsTheSendersBufferInPlace) {
  RunRanks(3, [&](Communicator& c) {
    const int n = c.size(), r = c.rank();
    GpuStream s = fake_.CreateStream();
    const size_t count = 5000;
    auto* out = static_cast<int32_t*>(fake_.AllocDevice(count * 4));
    auto* in = static_cast<int32_t*>(fake_.AllocDevice(count * 4));
    auto* self = static_cast<int32_t*>(fake_.AllocDevice(count * 4));
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(1000 * r + i);
    for (int round = 0; round < 3; ++round) {
      ASSERT_TRUE(GroupStart().ok());
      EXPECT_TRUE(c.Send(out, count, DataType::kInt32, (r + 1) % n, s).ok());
      EXPECT_TRUE(c.Recv(in, count, DataType::kInt32, (r + n - 1) % n, s).ok());
      EXPECT_TRUE(c.Send(out, count, DataType::kInt32, r, s).ok());
      EXPECT_TRUE(c.Recv(self, count, DataType::kInt32, r, s).ok());
      ASSERT_TRUE(GroupEnd().ok());
      ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
      const int from = (r + n - 1) % n;
      EXPECT_EQ(in[0], 1000 * from);
      EXPECT_EQ(in[count - 1], static_cast<int32_t>(1000 * from + count - 1));
      EXPECT_EQ(self[count - 1], static_cast<int32_t>(1000 * r + count - 1));
    }
    EXPECT_TRUE(c.AsyncError().ok()) << c.AsyncError().ToString();
    ASSERT_TRUE(c.Barrier().ok());
  });
  EXPECT_EQ(fake_.pinned_allocations(), 3u) << "no staging: only the signal words";
  EXPECT_EQ(fake_.ipc_opens(), 9u) << "each receiver maps its sender's buffer once per round";
  EXPECT_EQ(fake_.ipc_closes(), 9u);
}

TEST_P(IpcDeviceBuffers, SendRecvOfDifferentSizesFailsNamingBoth) {
  RunRanks(2, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    auto* buf = static_cast<int32_t*>(fake_.AllocDevice(64 * 4));
    if (c.rank() == 0) {
      ASSERT_TRUE(c.Send(buf, 64, DataType::kInt32, 1, s).ok());
    } else {
      ASSERT_TRUE(c.Recv(buf, 32, DataType::kInt32, 0, s).ok());
    }
    ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok()) << "the stream must be released";
    const Status st = c.AsyncError();
    EXPECT_FALSE(st.ok());
    if (c.rank() == 1) {
      EXPECT_NE(st.message().find("sends 256 bytes but this rank receives 128"), std::string::npos)
          << st.message();
    }
  });
}

// ncclCommRegister's promise: a registered buffer stays allocated, so peers
// keep their mappings of it instead of opening and closing them per
// operation; DeregisterBuffer closes them on every peer before it returns.
TEST_P(IpcDeviceBuffers, RegisteredBuffersStayMappedUntilDeregistered) {
  constexpr int kOps = 20;
  std::latch ran(2), checked(2), deregistered(2);
  RunRanks(2, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    const size_t count = 4096;
    auto* send = static_cast<float*>(fake_.AllocDevice(count * 4));
    auto* recv = static_cast<float*>(fake_.AllocDevice(count * 4));
    for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>(i % 5) + c.rank();
    Result<uint64_t> hs = c.RegisterBuffer(send, count * 4);
    Result<uint64_t> hr = c.RegisterBuffer(recv, count * 4);
    ASSERT_TRUE(hs.ok() && hr.ok()) << hs.status().ToString() << hr.status().ToString();
    EXPECT_NE(hs.value(), hr.value());
    for (int i = 0; i < kOps; ++i) {
      ASSERT_TRUE(c.AllReduce(send, recv, count, DataType::kFloat32, RedOp::kSum, s).ok());
    }
    ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(recv[i], 2 * static_cast<float>(i % 5) + 1) << i;
    ran.arrive_and_wait();
    // Each rank opened the peer's two buffers once, and holds them still.
    EXPECT_EQ(fake_.ipc_opens(), 4u);
    EXPECT_EQ(fake_.ipc_closes(), 0u);
    checked.arrive_and_wait();
    EXPECT_TRUE(c.DeregisterBuffer(hs.value()).ok());
    EXPECT_TRUE(c.DeregisterBuffer(hr.value()).ok());
    fake_.FreeDevice(send);
    fake_.FreeDevice(recv);
    deregistered.arrive_and_wait();
    EXPECT_TRUE(c.AsyncError().ok()) << c.AsyncError().ToString();
  });
  EXPECT_EQ(fake_.ipc_closes(), 4u);
  EXPECT_EQ(fake_.frees_while_mapped(), 0u);
}

// The peers need not call anything: their communicators close the mapping
// from the store's reader thread while their workers are idle.
TEST_P(IpcDeviceBuffers, DeregisterClosesTheMappingsOfIdlePeers) {
  std::latch ran(3), freed(3);
  RunRanks(3, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    auto* buf = static_cast<int64_t*>(fake_.AllocDevice(300 * 8));
    Result<uint64_t> h = c.RegisterBuffer(buf, 300 * 8);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 300; ++i) buf[i] = c.rank() + i;
      ASSERT_TRUE(c.AllReduce(buf, buf, 300, DataType::kInt64, RedOp::kSum, s).ok());
      ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
      ASSERT_EQ(buf[299], 3 + 3 * 299);
    }
    ran.arrive_and_wait();
    if (c.rank() == 0) {
      ASSERT_TRUE(c.DeregisterBuffer(h.value()).ok());
      fake_.FreeDevice(buf);
      EXPECT_EQ(fake_.frees_while_mapped(), 0u) << "a peer still had rank 0's buffer open";
    }
    freed.arrive_and_wait();
    if (c.rank() != 0) {
      ASSERT_TRUE(c.DeregisterBuffer(h.value()).ok());
      fake_.FreeDevice(buf);
    }
    // The communicators work on as before, on unregistered buffers.
    auto* again = static_cast<int32_t*>(fake_.AllocDevice(64 * 4));
    again[0] = 1;
    ASSERT_TRUE(c.AllReduce(again, again, 64, DataType::kInt32, RedOp::kSum, s).ok());
    ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
    EXPECT_EQ(again[0], 3);
    EXPECT_TRUE(c.AsyncError().ok()) << c.AsyncError().ToString();
  });
  EXPECT_EQ(fake_.frees_while_mapped(), 0u);
  EXPECT_EQ(fake_.ipc_closes(), fake_.ipc_opens());
}

// A peer that finalized closed its mappings first; the store answers for it.
// With a short timeout, a DeregisterBuffer left waiting for rank 1 would fail
// with kTimeout instead of returning OK.
TEST_P(IpcDeviceBuffers, DeregisterAfterAPeerFinalizedNeedsNoAnswerFromIt) {
  std::latch ran(2), finalized(2);
  CommConfig quick;
  quick.timeout = std::chrono::seconds(10);
  RunRanks(
      2,
      [&](Communicator& c) {
        GpuStream s = fake_.CreateStream();
        auto* buf = static_cast<float*>(fake_.AllocDevice(256 * 4));
        Result<uint64_t> h = c.RegisterBuffer(buf, 256 * 4);
        ASSERT_TRUE(h.ok());
        ASSERT_TRUE(c.AllReduce(buf, buf, 256, DataType::kFloat32, RedOp::kSum, s).ok());
        ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
        ran.arrive_and_wait();
        if (c.rank() == 1) {
          ASSERT_TRUE(c.Finalize().ok());
        }
        finalized.arrive_and_wait();
        if (c.rank() == 0) {
          const Status st = c.DeregisterBuffer(h.value());
          EXPECT_TRUE(st.ok()) << st.ToString();
          fake_.FreeDevice(buf);
        }
      },
      quick);
  EXPECT_EQ(fake_.frees_while_mapped(), 0u);
}

TEST_P(DeviceBuffers, RegistrationChecksItsArgumentsAndHandles) {
  RunRanks(2, [&](Communicator& c) {
    GpuStream s = fake_.CreateStream();
    auto* dev = static_cast<int32_t*>(fake_.AllocDevice(16 * 4));
    std::vector<int32_t> host(16);
    EXPECT_EQ(c.RegisterBuffer(nullptr, 8).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(c.RegisterBuffer(dev, 0).status().code(), Code::kInvalidArgument);
    const Status wraps = c.RegisterBuffer(reinterpret_cast<void*>(UINTPTR_MAX - 3), 8).status();
    EXPECT_EQ(wraps.code(), Code::kInvalidArgument);
    EXPECT_NE(wraps.message().find("wrap"), std::string::npos) << wraps.message();
    Result<uint64_t> hd = c.RegisterBuffer(dev, 16 * 4);
    Result<uint64_t> hh = c.RegisterBuffer(host.data(), 16 * 4);  // host memory: recorded only
    ASSERT_TRUE(hd.ok() && hh.ok());
    dev[0] = c.rank() + 1;
    ASSERT_TRUE(c.AllReduce(dev, dev, 16, DataType::kInt32, RedOp::kSum, s).ok());
    ASSERT_TRUE(fake_.Synchronize(s, Soon()).ok());
    EXPECT_EQ(dev[0], 3);
    const Status unknown = c.DeregisterBuffer(hd.value() + 1000);
    EXPECT_EQ(unknown.code(), Code::kInvalidArgument);
    EXPECT_NE(unknown.message().find("not registered"), std::string::npos) << unknown.message();
    EXPECT_TRUE(c.DeregisterBuffer(hh.value()).ok());
    EXPECT_EQ(c.DeregisterBuffer(hh.value()).code(), Code::kInvalidArgument) << "twice";
    EXPECT_TRUE(c.DeregisterBuffer(hd.value()).ok());
    ASSERT_TRUE(c.Barrier().ok());
    fake_.FreeDevice(dev);
  });
  EXPECT_EQ(fake_.frees_while_mapped(), 0u);
}

// A 2-rank max all-reduce on device buffers with NCCL_P2P_LEVEL=`level`.
void MaxAllReduceWithP2pLevel(cuda::FakeDeviceOps& fake, const char* level) {
  setenv("NCCL_P2P_LEVEL", level, 1);
  RunRanks(2, [&](Communicator& c) {
    GpuStream s = fake.CreateStream();
    auto* buf = static_cast<int32_t*>(fake.AllocDevice(4 * 4));
    buf[0] = c.rank() + 5;
    ASSERT_TRUE(c.AllReduce(buf, buf, 4, DataType::kInt32, RedOp::kMax, s).ok());
    ASSERT_TRUE(fake.Synchronize(s, Soon()).ok());
    EXPECT_EQ(buf[0], 6);
  });
}

TEST_P(IpcDeviceBuffers, P2pLevelLocStillAllowsOneSharedGpu) {
  MaxAllReduceWithP2pLevel(fake_, "LOC");
  EXPECT_GT(fake_.reduce_launches(), 0u);
}

TEST_P(IpcDeviceBuffers, AnUnknownP2pLevelStagesInstead) {
  MaxAllReduceWithP2pLevel(fake_, "NEARBY");
  EXPECT_EQ(fake_.reduce_launches(), 0u);
  EXPECT_GT(fake_.pinned_allocations(), 1u);
}

TEST(P2pLevel, NamesLegacyIntegersAndErrors) {
  using topology::PathType;
  EXPECT_EQ(ParseP2pLevel("").value(), PathType::kPxb);
  EXPECT_EQ(ParseP2pLevel("0").value(), PathType::kLoc);
  EXPECT_EQ(ParseP2pLevel("1").value(), PathType::kPix);
  EXPECT_EQ(ParseP2pLevel("3").value(), PathType::kPhb);
  EXPECT_EQ(ParseP2pLevel("5").value(), PathType::kSys);
  EXPECT_EQ(ParseP2pLevel("nvl").value(), PathType::kNvl);
  EXPECT_EQ(ParseP2pLevel("SYS").value(), PathType::kSys);
  for (const char* bad : {"6", "NET", "far", "-1"}) {
    Result<PathType> r = ParseP2pLevel(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace loom::testing
