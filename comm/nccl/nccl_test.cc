// Unit tests of the C ABI shim, with every rank a thread of this process:
// argument checks, config parsing, groups (deferred creation, one thread
// driving several communicators), ncclCommInitAll, split, the launcher id.
// The 2.28 additions are tested in nccl228_test.cc; the multi-process C99
// program is tests/c_api/nccl_allreduce_test.c.
#include "loom/nccl.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/device_path.h"
#include "comm/launch_env.h"
#include "comm/nccl/nccl_test_ranks.h"
#include "comm/unique_id.h"
#include "loom/loom.hpp"

namespace {

using loom::nccl_test::FreshId;
using loom::nccl_test::LastError;
using loom::nccl_test::NcclShim;
using loom::nccl_test::OnEachRank;

// One thread issues an in-place int32 all-reduce of every rank's buffer in
// one group (only a group makes that possible); ops[r] is rank r's operator.
void GroupAllReduceInPlace(ncclComm_t* comms, std::vector<std::vector<int32_t>>& bufs,
                           const std::vector<ncclRedOp_t>& ops) {
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (size_t r = 0; r < bufs.size(); ++r) {
    ASSERT_EQ(ncclAllReduce(bufs[r].data(), bufs[r].data(), bufs[r].size(), ncclInt32, ops[r],
                            comms[r], nullptr),
              ncclSuccess)
        << LastError();
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << LastError();
}

TEST_F(NcclShim, ErrorStringsAreDistinctAndNeverNull) {
  for (int a = 0; a < ncclNumResults; ++a) {
    const char* s = ncclGetErrorString(static_cast<ncclResult_t>(a));
    ASSERT_NE(s, nullptr);
    EXPECT_NE(s[0], '\0');
    for (int b = 0; b < a; ++b) EXPECT_STRNE(s, ncclGetErrorString(static_cast<ncclResult_t>(b)));
  }
  EXPECT_NE(ncclGetErrorString(static_cast<ncclResult_t>(-1)), nullptr);
  EXPECT_NE(ncclGetErrorString(ncclNumResults), nullptr);
}

TEST_F(NcclShim, VersionIsTheNcclApiLevel) {
  int v = 0;
  ASSERT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  EXPECT_EQ(v, 22809);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
}

TEST_F(NcclShim, NullArgumentsAreRejectedWithAReason) {
  float x = 0;
  int n = 0;
  ncclResult_t e;
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_NE(LastError().find("ncclAllReduce"), std::string::npos) << LastError();
  EXPECT_NE(LastError().find("comm is NULL"), std::string::npos) << LastError();
  EXPECT_EQ(ncclCommCount(nullptr, &n), ncclInvalidArgument);
  EXPECT_EQ(ncclCommUserRank(nullptr, &n), ncclInvalidArgument);
  EXPECT_EQ(ncclCommGetAsyncError(nullptr, &e), ncclInvalidArgument);
  EXPECT_EQ(ncclCommFinalize(nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGetUniqueId(nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitAll(nullptr, 2, nullptr), ncclInvalidArgument);
  ncclComm_t comms[1];
  EXPECT_EQ(ncclCommInitAll(comms, 0, nullptr), ncclInvalidArgument);
  // Freeing nothing is fine, as in NCCL.
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommAbort(nullptr), ncclSuccess);
}

TEST_F(NcclShim, LastErrorIsPerThread) {
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_NE(LastError().find("ncclGroupStart"), std::string::npos) << LastError();
  std::string other = "unset";
  std::thread([&] { other = LastError(); }).join();
  EXPECT_EQ(other, "");
}

TEST_F(NcclShim, InitRankRejectsBadRanksBeforeAnyRendezvous) {
  ncclUniqueId id{};
  ncclComm_t comm = reinterpret_cast<ncclComm_t>(&id);  // must be overwritten with NULL
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, -1), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(nullptr, 1, id, 0), ncclInvalidArgument);
}

TEST_F(NcclShim, ConfigMustComeFromTheInitializer) {
  ncclUniqueId id{};
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0x12345678;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);
  EXPECT_NE(LastError().find("NCCL_CONFIG_INITIALIZER"), std::string::npos) << LastError();
  config = NCCL_CONFIG_INITIALIZER;
  config.size = 4;  // not even the magic fits
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);
  config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 2;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);
  EXPECT_NE(LastError().find("blocking"), std::string::npos) << LastError();
  EXPECT_EQ(comm, nullptr);
}

TEST_F(NcclShim, InitAllAndOneThreadDrivingAGroup) {
  constexpr int kRanks = 3;
  ncclComm_t comms[kRanks];
  ASSERT_EQ(ncclCommInitAll(comms, kRanks, nullptr), ncclSuccess) << LastError();
  for (int r = 0; r < kRanks; ++r) {
    int n = 0, me = -1;
    ASSERT_EQ(ncclCommCount(comms[r], &n), ncclSuccess);
    ASSERT_EQ(ncclCommUserRank(comms[r], &me), ncclSuccess);
    EXPECT_EQ(n, kRanks);
    EXPECT_EQ(me, r);
  }
  // One thread issues every rank's part; only a group makes that possible.
  std::vector<std::vector<int32_t>> bufs(kRanks, std::vector<int32_t>(1031));
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < bufs[r].size(); ++i) bufs[r][i] = r * 100 + static_cast<int32_t>(i);
  }
  GroupAllReduceInPlace(comms, bufs, std::vector<ncclRedOp_t>(kRanks, ncclMax));
  ASSERT_FALSE(HasFatalFailure());
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < bufs[r].size(); ++i) {
      ASSERT_EQ(bufs[r][i], (kRanks - 1) * 100 + static_cast<int32_t>(i)) << "rank " << r;
    }
  }
  // One thread destroys every rank, as NCCL programs do.
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST_F(NcclShim, BcastOnRegisteredBuffersAndTheRegistrationHandles) {
  constexpr int kRanks = 3;
  ncclComm_t comms[kRanks];
  ASSERT_EQ(ncclCommInitAll(comms, kRanks, nullptr), ncclSuccess) << LastError();
  std::vector<std::vector<int32_t>> bufs(kRanks, std::vector<int32_t>(1031));
  std::vector<void*> handles(kRanks, nullptr);
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < bufs[r].size(); ++i) bufs[r][i] = r * 100000 + static_cast<int32_t>(i);
    ASSERT_EQ(ncclCommRegister(comms[r], bufs[r].data(), bufs[r].size() * 4, &handles[r]),
              ncclSuccess)
        << LastError();
    ASSERT_NE(handles[r], nullptr);
  }
  // The legacy in-place broadcast, from rank 1, one thread driving all ranks.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(ncclBcast(bufs[r].data(), bufs[r].size(), ncclInt32, 1, comms[r], nullptr),
              ncclSuccess)
        << LastError();
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << LastError();
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < bufs[r].size(); ++i) {
      ASSERT_EQ(bufs[r][i], 100000 + static_cast<int32_t>(i)) << "rank " << r << " at " << i;
    }
  }
  EXPECT_EQ(ncclBcast(bufs[0].data(), 1, ncclInt32, kRanks, comms[0], nullptr),
            ncclInvalidArgument);
  EXPECT_NE(LastError().find("ncclBcast: InvalidArgument: root 3"), std::string::npos)
      << LastError();

  // Registration arguments, and handles that belong to another communicator
  // or were taken back already.
  void* h = nullptr;
  EXPECT_EQ(ncclCommRegister(comms[0], nullptr, 8, &h), ncclInvalidArgument);
  EXPECT_NE(LastError().find("buff is NULL"), std::string::npos) << LastError();
  EXPECT_EQ(ncclCommRegister(comms[0], bufs[0].data(), 0, &h), ncclInvalidArgument);
  EXPECT_EQ(ncclCommRegister(comms[0], bufs[0].data(), 8, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommRegister(nullptr, bufs[0].data(), 8, &h), ncclInvalidArgument);
  EXPECT_EQ(ncclCommRegister(comms[0], reinterpret_cast<void*>(UINTPTR_MAX - 3), 8, &h),
            ncclInvalidArgument);
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(ncclCommDeregister(comms[0], handles[1]), ncclInvalidArgument);
  EXPECT_NE(LastError().find("was not registered with this communicator"), std::string::npos)
      << LastError();
  EXPECT_EQ(ncclCommDeregister(comms[0], handles[0]), ncclSuccess) << LastError();
  EXPECT_EQ(ncclCommDeregister(comms[0], handles[0]), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDeregister(comms[1], handles[1]), ncclSuccess) << LastError();
  // Rank 2 keeps its registration: destroying the communicator frees it.
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// Without a GPU (this machine) these fail, naming why; on a GPU machine they
// give the device and device memory.
// Each rank scales its input by its own scalar before the sum. Values are
// small multiples of 1/4, so every product and sum is exact and the
// expected results need no tolerance.
TEST_F(NcclShim, PreMulSumScalesEachRanksInputByItsOwnScalar) {
  constexpr int kRanks = 3;
  ncclComm_t comms[kRanks];
  ASSERT_EQ(ncclCommInitAll(comms, kRanks, nullptr), ncclSuccess) << LastError();
  auto scalar_of = [](int r) { return 0.25f * static_cast<float>(r + 1); };
  auto input = [](int r, size_t i) { return static_cast<float>((i * 7 + r) % 1024); };
  // Small (shared-memory slots), medium and large enough for the pipelined ring.
  for (size_t count : {size_t{3}, size_t{1031}, size_t{300001}}) {
    OnEachRank(kRanks, [&](int r) {
      float s = scalar_of(r);
      ncclRedOp_t op;
      ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, ncclScalarHostImmediate, comms[r]),
                ncclSuccess)
          << LastError();
      EXPECT_GE(static_cast<int>(op), static_cast<int>(ncclNumOps));
      s = 100.0f;  // an immediate scalar was copied at creation
      std::vector<float> send(count * kRanks), out(count * kRanks, -1.0f);
      for (size_t i = 0; i < send.size(); ++i) send[i] = input(r, i);
      auto want = [&](size_t i) {
        float sum = 0;
        for (int q = 0; q < kRanks; ++q) sum += scalar_of(q) * input(q, i);
        return sum;
      };
      // Out of place, then in place; the input must be left as it was.
      ASSERT_EQ(ncclAllReduce(send.data(), out.data(), count, ncclFloat, op, comms[r], nullptr),
                ncclSuccess)
          << LastError();
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], want(i)) << "rank " << r << " i " << i;
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(send[i], input(r, i)) << "input changed";
      std::vector<float> in_place(send.begin(), send.begin() + static_cast<long>(count));
      ASSERT_EQ(
          ncclAllReduce(in_place.data(), in_place.data(), count, ncclFloat, op, comms[r], nullptr),
          ncclSuccess)
          << LastError();
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(in_place[i], want(i)) << "in place, i " << i;
      // Reduce-scatter: block r of the whole input.
      ASSERT_EQ(ncclReduceScatter(send.data(), out.data(), count, ncclFloat, op, comms[r], nullptr),
                ncclSuccess)
          << LastError();
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], want(r * count + i)) << "i " << i;
      // Reduce to rank 1.
      std::fill(out.begin(), out.end(), -1.0f);
      ASSERT_EQ(ncclReduce(send.data(), out.data(), count, ncclFloat, op, 1, comms[r], nullptr),
                ncclSuccess)
          << LastError();
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], r == 1 ? want(i) : -1.0f) << "rank " << r << " i " << i;
      }
      // In place: the root's buffer holds the result, the others' keep their input.
      std::vector<float> buf(send.begin(), send.begin() + static_cast<long>(count));
      ASSERT_EQ(ncclReduce(buf.data(), buf.data(), count, ncclFloat, op, 1, comms[r], nullptr),
                ncclSuccess)
          << LastError();
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(buf[i], r == 1 ? want(i) : input(r, i)) << "in place, rank " << r << " i " << i;
      }
      EXPECT_EQ(ncclRedOpDestroy(op, comms[r]), ncclSuccess) << LastError();
    });
  }
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST_F(NcclShim, PreMulSumThroughAPointerReadsTheScalarWhenTheCollectiveRuns) {
  constexpr int kRanks = 2;
  ncclComm_t comms[kRanks];
  ASSERT_EQ(ncclCommInitAll(comms, kRanks, nullptr), ncclSuccess) << LastError();
  int32_t scalars[kRanks] = {0, 0};
  ncclRedOp_t ops[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&ops[r], &scalars[r], ncclInt32, ncclScalarDevice, comms[r]),
              ncclSuccess)
        << LastError();
  }
  // The scalars are set after creation and changed between the two rounds:
  // each collective reads the value it finds when it runs. Integers wrap.
  auto round = [&](int32_t s0, int32_t s1) {
    scalars[0] = s0;
    scalars[1] = s1;
    std::vector<std::vector<int32_t>> bufs(kRanks, std::vector<int32_t>(1000));
    for (int r = 0; r < kRanks; ++r) {
      for (size_t i = 0; i < bufs[r].size(); ++i) bufs[r][i] = static_cast<int32_t>(i) + r;
    }
    // One thread drives both ranks through a group: the calls run at GroupEnd.
    GroupAllReduceInPlace(comms, bufs, {ops[0], ops[1]});
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    for (int r = 0; r < kRanks; ++r) {
      for (size_t i = 0; i < bufs[r].size(); ++i) {
        const uint32_t want = static_cast<uint32_t>(s0) * static_cast<uint32_t>(i) +
                              static_cast<uint32_t>(s1) * static_cast<uint32_t>(i + 1);
        ASSERT_EQ(bufs[r][i], static_cast<int32_t>(want)) << "rank " << r << " i " << i;
      }
    }
  };
  round(3, -1000000000);
  round(-7, 11);
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(ncclRedOpDestroy(ops[r], comms[r]), ncclSuccess);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST_F(NcclShim, PreMulSumOperatorsAreCheckedAndBelongToTheirCommunicator) {
  ncclComm_t comms[2];
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess) << LastError();
  float s = 2.0f;
  ncclRedOp_t op;
  EXPECT_EQ(ncclRedOpCreatePreMulSum(nullptr, &s, ncclFloat, ncclScalarHostImmediate, comms[0]),
            ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, nullptr, ncclFloat, ncclScalarHostImmediate, comms[0]),
            ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &s, static_cast<ncclDataType_t>(42),
                                     ncclScalarHostImmediate, comms[0]),
            ncclInvalidArgument);
  EXPECT_EQ(
      ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, static_cast<ncclScalarResidence_t>(2), comms[0]),
      ncclInvalidArgument);
  EXPECT_NE(LastError().find("residence 2"), std::string::npos) << LastError();
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, ncclScalarHostImmediate, nullptr),
            ncclInvalidArgument);
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, ncclScalarHostImmediate, comms[0]),
            ncclSuccess)
      << LastError();
  EXPECT_EQ(static_cast<int>(op), static_cast<int>(ncclNumOps));
  float x[2] = {1, 2};
  // Another datatype than the operator's, and another communicator.
  EXPECT_EQ(ncclAllReduce(x, x, 1, ncclInt32, op, comms[0], nullptr), ncclInvalidArgument);
  EXPECT_NE(LastError().find("PreMulSum scalar is float"), std::string::npos) << LastError();
  EXPECT_EQ(ncclAllReduce(x, x, 1, ncclFloat, op, comms[1], nullptr), ncclInvalidArgument);
  EXPECT_NE(LastError().find("ncclRedOpCreatePreMulSum"), std::string::npos) << LastError();
  // Destroying: built-ins and unknown ops are refused, a slot is reused.
  EXPECT_EQ(ncclRedOpDestroy(ncclSum, comms[0]), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpDestroy(static_cast<ncclRedOp_t>(ncclNumOps + 1), comms[0]),
            ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpDestroy(static_cast<ncclRedOp_t>(-1), comms[0]), ncclInvalidArgument);
  ASSERT_EQ(ncclRedOpDestroy(op, comms[0]), ncclSuccess) << LastError();
  EXPECT_EQ(ncclRedOpDestroy(op, comms[0]), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(x, x, 1, ncclFloat, op, comms[0], nullptr), ncclInvalidArgument);
  ncclRedOp_t again;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&again, &s, ncclFloat, ncclScalarDevice, comms[0]),
            ncclSuccess);
  EXPECT_EQ(again, op);
  // No PreMulSum for collectives without a reduction is possible through
  // the C API; the C++ API refuses it by name.
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST_F(NcclShim, CudaDeviceAndDeviceMemory) {
  const bool gpu = loom::DefaultDeviceOps() != nullptr;
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess) << LastError();
  int device = -7;
  EXPECT_EQ(ncclCommCuDevice(comm, nullptr), ncclInvalidArgument);
  if (gpu) {
    EXPECT_EQ(ncclCommCuDevice(comm, &device), ncclSuccess) << LastError();
    EXPECT_GE(device, 0);
  } else {
    EXPECT_EQ(ncclCommCuDevice(comm, &device), ncclInvalidUsage);
    EXPECT_NE(LastError().find("has no CUDA device"), std::string::npos) << LastError();
    EXPECT_EQ(device, -7);
  }
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);

  void* p = reinterpret_cast<void*>(1);
  EXPECT_EQ(ncclMemAlloc(nullptr, 64), ncclInvalidArgument);
  if (gpu) {
    ASSERT_EQ(ncclMemAlloc(&p, 1 << 20), ncclSuccess) << LastError();
    EXPECT_NE(p, nullptr);
    EXPECT_EQ(ncclMemFree(p), ncclSuccess) << LastError();
  } else {
    EXPECT_EQ(ncclMemAlloc(&p, 1 << 20), ncclUnhandledCudaError);
    EXPECT_NE(LastError().find("no CUDA device"), std::string::npos) << LastError();
    EXPECT_EQ(p, reinterpret_cast<void*>(1));
  }
  int on_host = 0;
  EXPECT_EQ(ncclMemFree(&on_host), ncclInvalidArgument);
  EXPECT_EQ(ncclMemFree(nullptr), ncclSuccess);
}

TEST_F(NcclShim, AbortFreesEveryRankAtOnce) {
  ncclComm_t comms[2];
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess) << LastError();
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommAbort(c), ncclSuccess);
}

TEST_F(NcclShim, InitRankInAGroupIsDeferredToGroupEnd) {
  constexpr int kRanks = 3;
  ncclUniqueId id = FreshId();
  ncclComm_t comms[kRanks] = {};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(ncclCommInitRank(&comms[r], kRanks, id, r), ncclSuccess) << LastError();
    ASSERT_NE(comms[r], nullptr);
  }
  int n = 0, me = -1;
  EXPECT_EQ(ncclCommCount(comms[1], &n), ncclSuccess);
  EXPECT_EQ(ncclCommUserRank(comms[1], &me), ncclSuccess);
  EXPECT_EQ(n, kRanks);
  EXPECT_EQ(me, 1);
  ncclResult_t async_error = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(comms[0], &async_error), ncclSuccess);
  EXPECT_EQ(async_error, ncclInProgress);
  float x = 1;
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comms[0], nullptr), ncclInvalidUsage);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << LastError();

  std::vector<float> vals(kRanks);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(ncclCommGetAsyncError(comms[r], &async_error), ncclSuccess);
    EXPECT_EQ(async_error, ncclSuccess);
    vals[r] = static_cast<float>(r + 1);
    ASSERT_EQ(ncclAllReduce(&vals[r], &vals[r], 1, ncclFloat, ncclSum, comms[r], nullptr),
              ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << LastError();
  for (float v : vals) EXPECT_EQ(v, 6.0f);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST_F(NcclShim, DestroyBeforeGroupEndCancelsTheDeferredCreation) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclCommInitRank(&comm, 1, FreshId(), 0), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess) << LastError();
}

TEST_F(NcclShim, SplitEvenOddAndNoColor) {
  constexpr int kRanks = 4;
  ncclComm_t comms[kRanks];
  ASSERT_EQ(ncclCommInitAll(comms, kRanks, nullptr), ncclSuccess) << LastError();
  std::vector<int> sizes(kRanks), ranks(kRanks), nulls(kRanks);
  std::vector<ncclComm_t> halves(kRanks);
  OnEachRank(kRanks, [&](int r) {
    // key = -r reverses the order within each half.
    ASSERT_EQ(ncclCommSplit(comms[r], r % 2, -r, &halves[r], nullptr), ncclSuccess) << LastError();
    ASSERT_EQ(ncclCommCount(halves[r], &sizes[r]), ncclSuccess);
    ASSERT_EQ(ncclCommUserRank(halves[r], &ranks[r]), ncclSuccess);
    ncclComm_t none = comms[r];  // must be overwritten
    ASSERT_EQ(ncclCommSplit(comms[r], NCCL_SPLIT_NOCOLOR, 0, &none, nullptr), ncclSuccess);
    nulls[r] = none == nullptr;
  });
  EXPECT_EQ(sizes, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(ranks, (std::vector<int>{1, 1, 0, 0}));
  EXPECT_EQ(nulls, (std::vector<int>{1, 1, 1, 1}));
  // Made on four threads, destroyed by one: teardown is collective, so this
  // only returns if the shim knows the halves' ranks live together here.
  for (ncclComm_t h : halves) EXPECT_EQ(ncclCommDestroy(h), ncclSuccess);

  ncclComm_t sub = nullptr;
  EXPECT_EQ(ncclCommSplit(comms[0], -3, 0, &sub, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommSplit(comms[0], 0, 0, nullptr, nullptr), ncclInvalidArgument);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclCommSplit(comms[0], 0, 0, &sub, nullptr), ncclInvalidUsage);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(sub, nullptr);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST_F(NcclShim, OperationArgumentsAreCheckedAgainstTheCommunicator) {
  ncclComm_t comms[2];
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess) << LastError();
  float x[2] = {0, 0};
  auto bad_type = static_cast<ncclDataType_t>(ncclNumTypes);
  auto bad_op = static_cast<ncclRedOp_t>(ncclNumOps);
  EXPECT_EQ(ncclAllReduce(x, x, 1, bad_type, ncclSum, comms[0], nullptr), ncclInvalidArgument);
  EXPECT_NE(LastError().find("datatype 12"), std::string::npos) << LastError();
  EXPECT_EQ(ncclReduce(x, x, 1, ncclFloat, bad_op, 0, comms[0], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllGather(nullptr, x, 1, ncclFloat, comms[0], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclReduceScatter(x, nullptr, 1, ncclFloat, ncclSum, comms[0], nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(ncclSend(x, 1, ncclFloat, 2, comms[0], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclRecv(x, 1, ncclFloat, -1, comms[0], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(x, x, 1, ncclFloat, 5, comms[0], nullptr), ncclInvalidArgument);
  // Root's buffer is required on root only.
  EXPECT_EQ(ncclBroadcast(nullptr, x, 1, ncclFloat, 0, comms[0], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclReduce(x, nullptr, 1, ncclFloat, ncclSum, 1, comms[1], nullptr),
            ncclInvalidArgument);
  // Zero elements need no buffers: a valid call, so both ranks take part.
  OnEachRank(2, [&](int r) {
    EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, comms[r], nullptr),
              ncclSuccess)
        << LastError();
  });
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST_F(NcclShim, MissingPeerIsARemoteErrorAfterTheTimeout) {
  setenv("LOOM_TIMEOUT_MS", "300", 1);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 2, FreshId(), 0), ncclRemoteError);
  EXPECT_EQ(comm, nullptr);
  EXPECT_FALSE(LastError().empty());
  unsetenv("LOOM_TIMEOUT_MS");
}

// --- ncclGetUniqueId under `loom run`; each case runs in a fresh process
// because only the first call in a process returns the launcher's id. ---

bool SameId(const ncclUniqueId& a, const loom::UniqueId& b) {
  return std::memcmp(a.internal, b.bytes.data(), sizeof a.internal) == 0;
}

// A port nobody listens on right now, for rank 0's store.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

void SetLauncherEnv(int rank, int size, int port) {
  setenv("LOOM_RANK", std::to_string(rank).c_str(), 1);
  setenv("LOOM_WORLD_SIZE", std::to_string(size).c_str(), 1);
  setenv("LOOM_ROOT", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
  setenv("LOOM_JOB_ID", "nccl-test-job", 1);
}

// Rank 1 of 2: the id is the one CreateFromEnv would use (same address, same
// secret), and only the first call returns it. Exit code 0 on success.
int CheckNonRootLauncherId(int port) {
  SetLauncherEnv(1, 2, port);
  auto env = loom::ReadLaunchEnv([](const char* name) { return std::getenv(name); });
  if (!env.ok() || !env.value()) return 2;
  loom::UniqueId expected =
      loom::internal::MakeUniqueId({(*env)->root_host, (*env)->root_port, (*env)->secret});
  ncclUniqueId first, second;
  if (ncclGetUniqueId(&first) != ncclSuccess) return 3;
  if (!SameId(first, expected)) return 4;
  if (ncclGetUniqueId(&second) != ncclSuccess) return 5;
  return SameId(second, expected) ? 6 : 0;
}

// Rank 0 of 1: its process must serve the store, or creation would time out.
int CheckRootHostsTheStore(int port) {
  SetLauncherEnv(0, 1, port);
  setenv("LOOM_TIMEOUT_MS", "5000", 1);
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
  if (ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) return 3;
  return ncclCommDestroy(comm) == ncclSuccess ? 0 : 4;
}

TEST_F(NcclShim, LauncherIdMatchesCreateFromEnv) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int port = FreePort();
  ASSERT_NE(port, 0);
  EXPECT_EXIT(std::exit(CheckNonRootLauncherId(port)), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(std::exit(CheckRootHostsTheStore(port)), ::testing::ExitedWithCode(0), "");
}

}  // namespace
