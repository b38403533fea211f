// Unit tests of what NCCL 2.28 added to the C ABI, every rank a thread of
// this process: the exported names (pnccl* included), ncclConfig_t from old
// and new headers, all-to-all/gather/scatter in and out of groups, the
// scalable init, shrink, revoke, windows, the group simulation and the
// debug reset. Each refusal is checked for its code and its message.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/nccl/nccl_test_ranks.h"
#include "loom/nccl.h"

namespace {

using loom::nccl_test::FreshId;
using loom::nccl_test::LastError;
using loom::nccl_test::NcclShim;
using loom::nccl_test::OnEachRank;

// --- the ABI: NVIDIA's v22800 layout, and pnccl* of the same type ---

static_assert(NCCL_VERSION_CODE == 22809);
static_assert(offsetof(ncclConfig_t, splitShare) == 40);
static_assert(offsetof(ncclConfig_t, trafficClass) == 44);
static_assert(offsetof(ncclConfig_t, commName) == 48);
static_assert(offsetof(ncclConfig_t, collnetEnable) == 56);
static_assert(offsetof(ncclConfig_t, nvlsCTAs) == 68);
static_assert(offsetof(ncclConfig_t, nvlinkCentricSched) == 76);
static_assert(sizeof(ncclConfig_t) == 80);
static_assert(offsetof(ncclSimInfo_t, estimatedTime) == 16 && sizeof(ncclSimInfo_t) == 24);
static_assert(ncclFloat8e4m3 == 10 && ncclFloat8e5m2 == 11 && ncclNumTypes == 12);
static_assert(NCCL_WIN_COLL_SYMMETRIC == 1 && NCCL_SHRINK_ABORT == 1 && NCCL_REVOKE_DEFAULT == 0);

// Every host entry point of NVIDIA's 2.28.9 library, by name.
#define LOOM_NCCL_HOST_API(X)                                                                      \
  X(ncclGetVersion)                                                                                \
  X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommInitRankConfig) X(ncclCommInitRankScalable)     \
      X(ncclCommInitAll) X(ncclCommSplit) X(ncclCommShrink) X(ncclCommFinalize) X(ncclCommDestroy) \
          X(ncclCommAbort) X(ncclCommRevoke) X(ncclCommGetAsyncError) X(ncclGetErrorString)        \
              X(ncclGetLastError) X(ncclResetDebugInit) X(ncclCommCount) X(ncclCommUserRank)       \
                  X(ncclCommCuDevice) X(ncclCommRegister) X(ncclCommDeregister)                    \
                      X(ncclCommWindowRegister) X(ncclCommWindowDeregister) X(ncclMemAlloc)        \
                          X(ncclMemFree) X(ncclRedOpCreatePreMulSum) X(ncclRedOpDestroy)           \
                              X(ncclAllReduce) X(ncclReduceScatter) X(ncclAllGather)               \
                                  X(ncclBroadcast) X(ncclBcast) X(ncclReduce) X(ncclAlltoAll)      \
                                      X(ncclGather) X(ncclScatter) X(ncclSend) X(ncclRecv)         \
                                          X(ncclGroupStart) X(ncclGroupEnd)                        \
                                              X(ncclGroupSimulateEnd)

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ncclResetDebugInit
#define SAME_TYPE(name) static_assert(std::is_same_v<decltype(name), decltype(p##name)>);
LOOM_NCCL_HOST_API(SAME_TYPE)
#undef SAME_TYPE
#pragma GCC diagnostic pop

TEST_F(NcclShim, ExportsNvidiasHostApiAndItsProfilingNamesOnly) {
  std::vector<std::string> names;
#define NAME(name) names.push_back(#name);
  LOOM_NCCL_HOST_API(NAME)
#undef NAME
  ASSERT_EQ(names.size(), 41u);
  for (const std::string& n : names) {
    EXPECT_NE(dlsym(RTLD_DEFAULT, n.c_str()), nullptr) << n;
    EXPECT_NE(dlsym(RTLD_DEFAULT, ("p" + n).c_str()), nullptr) << "p" << n;
  }
  // The device API is not offered.
  for (const char* n : {"ncclDevCommCreate", "ncclTeamWorld", "ncclGinBarrierCreateRequirement",
                        "ncclLsaBarrierCreateRequirement", "ncclResetDebugInitInternal"}) {
    EXPECT_EQ(dlsym(RTLD_DEFAULT, n), nullptr) << n;
  }
  int v = 0;
  ASSERT_EQ(pncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, 22809);
  EXPECT_STREQ(pncclGetErrorString(ncclInvalidUsage), ncclGetErrorString(ncclInvalidUsage));
}

// --- ncclConfig_t ---

// ncclConfig_v21700 as NCCL 2.18's header lays it out.
struct Config218 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking, cgaClusterSize, minCTAs, maxCTAs;
  const char* netName;
  int splitShare;
};

TEST_F(NcclShim, ConfigFromA218HeaderIsReadOnlyAsFarAsItsSize) {
  // What lies past the caller's struct would be refused (7 is no valid
  // flag) or crash (commName) if it were read.
  struct {
    Config218 config;
    int after[16];
  } old_layout{};
  old_layout.config = {sizeof(Config218),
                       NCCL_API_MAGIC,
                       NCCL_VERSION(2, 18, 0),
                       1,
                       4,
                       NCCL_CONFIG_UNDEF_INT,
                       NCCL_CONFIG_UNDEF_INT,
                       nullptr,
                       0};
  for (int& x : old_layout.after) x = 7;
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 1, FreshId(), 0,
                                   reinterpret_cast<ncclConfig_t*>(&old_layout.config)),
            ncclSuccess)
      << LastError();
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);

  // The full struct, but the caller's header said 2.18: the newer fields are not its.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.version = NCCL_VERSION(2, 18, 0);
  config.nvlinkCentricSched = 7;
  config.collnetEnable = 7;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 1, FreshId(), 0, &config), ncclSuccess) << LastError();
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);

  // A header before 2.14 had no blocking field.
  Config218 pre214 = old_layout.config;
  pre214.version = NCCL_VERSION(2, 13, 0);
  pre214.blocking = 42;
  ASSERT_EQ(
      ncclCommInitRankConfig(&comm, 1, FreshId(), 0, reinterpret_cast<ncclConfig_t*>(&pre214)),
      ncclSuccess)
      << LastError();
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST_F(NcclShim, ConfigFrom228AndNewerHeadersIsAccepted) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  EXPECT_EQ(config.size, sizeof(ncclConfig_t));
  EXPECT_EQ(config.version, 22809u);
  config.blocking = 0;
  config.commName = "trainer-dp";
  config.netName = "IB";
  config.trafficClass = 3;
  config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  config.shrinkShare = 1;
  config.nvlsCTAs = 16;
  config.nChannelsPerNetPeer = 64;
  config.nvlinkCentricSched = 1;
  config.minCTAs = 2;
  config.maxCTAs = 8;
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 1, FreshId(), 0, &config), ncclSuccess) << LastError();
  ncclResult_t async_error = ncclInternalError;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &async_error), ncclSuccess);
  EXPECT_EQ(async_error, ncclSuccess);  // non-blocking still completes at once
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);

  // A newer header appends fields (2.29: graphUsageMode, numRmaCtx): not read.
  struct {
    ncclConfig_t known;
    int graphUsageMode, numRmaCtx;
  } newer{NCCL_CONFIG_INITIALIZER, 5, 5};
  newer.known.size = sizeof newer;
  newer.known.version = NCCL_VERSION(2, 29, 7);
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 1, FreshId(), 0, &newer.known), ncclSuccess)
      << LastError();
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST_F(NcclShim, ConfigValuesNcclRefusesAreRefusedNamingTheField) {
  struct Bad {
    const char* field;
    std::function<void(ncclConfig_t&)> set;
  };
  const std::vector<Bad> cases = {
      {"cgaClusterSize", [](ncclConfig_t& c) { c.cgaClusterSize = -1; }},
      {"minCTAs", [](ncclConfig_t& c) { c.minCTAs = 0; }},
      {"maxCTAs", [](ncclConfig_t& c) { c.maxCTAs = -2; }},
      {"minCTAs 9 is above maxCTAs 4", [](ncclConfig_t& c) { c.minCTAs = 9, c.maxCTAs = 4; }},
      {"splitShare", [](ncclConfig_t& c) { c.splitShare = 2; }},
      {"collnetEnable", [](ncclConfig_t& c) { c.collnetEnable = 2; }},
      {"CTAPolicy", [](ncclConfig_t& c) { c.CTAPolicy = 3; }},
      {"shrinkShare", [](ncclConfig_t& c) { c.shrinkShare = -1; }},
      {"nvlsCTAs", [](ncclConfig_t& c) { c.nvlsCTAs = 0; }},
      {"nChannelsPerNetPeer", [](ncclConfig_t& c) { c.nChannelsPerNetPeer = 65; }},
      {"nvlinkCentricSched", [](ncclConfig_t& c) { c.nvlinkCentricSched = 2; }},
  };
  ncclUniqueId id{};
  for (const Bad& bad : cases) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    bad.set(config);
    ncclComm_t comm = reinterpret_cast<ncclComm_t>(&config);  // must become NULL
    EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument) << bad.field;
    EXPECT_NE(LastError().find(bad.field), std::string::npos) << LastError();
    EXPECT_EQ(comm, nullptr);
  }
}

// --- all-to-all, gather, scatter ---

int32_t Block(int from, int to, size_t i) {
  return from * 1000000 + to * 10000 + static_cast<int32_t>(i % 10000);
}

// Rank r's all-to-all: block j of the input goes to rank j.
void CheckAlltoAll(ncclComm_t comm, int r, int n, size_t count, bool in_place) {
  std::vector<int32_t> send(count * n), recv(count * n, -1);
  for (int j = 0; j < n; ++j) {
    for (size_t i = 0; i < count; ++i) send[j * count + i] = Block(r, j, i);
  }
  int32_t* out = in_place ? send.data() : recv.data();
  ASSERT_EQ(ncclAlltoAll(send.data(), out, count, ncclInt32, comm, nullptr), ncclSuccess)
      << LastError();
  for (int from = 0; from < n; ++from) {
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(out[from * count + i], Block(from, r, i)) << "rank " << r << " from " << from;
    }
  }
}

TEST_F(NcclShim, AlltoAllAtOneAndThreeRanksInAndOutOfPlaceAndInAGroup) {
  for (int n : {1, 3}) {
    std::vector<ncclComm_t> comms(n);
    ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << LastError();
    for (size_t count : {size_t{0}, size_t{1}, size_t{1031}}) {
      OnEachRank(n, [&](int r) {
        CheckAlltoAll(comms[r], r, n, count, false);
        CheckAlltoAll(comms[r], r, n, count, true);
      });
    }
    // One thread drives every rank: only a group makes that possible.
    const size_t count = 257;
    std::vector<std::vector<int32_t>> send(n, std::vector<int32_t>(count * n));
    std::vector<std::vector<int32_t>> recv(n, std::vector<int32_t>(count * n, -1));
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; ++r) {
      for (size_t k = 0; k < count * n; ++k)
        send[r][k] = Block(r, static_cast<int>(k / count), k % count);
      ASSERT_EQ(ncclAlltoAll(send[r].data(), recv[r].data(), count, ncclInt32, comms[r], nullptr),
                ncclSuccess)
          << LastError();
    }
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << LastError();
    for (int r = 0; r < n; ++r) {
      for (size_t k = 0; k < count * n; ++k) {
        ASSERT_EQ(recv[r][k], Block(static_cast<int>(k / count), r, k % count)) << "rank " << r;
      }
    }
    for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  }
}

TEST_F(NcclShim, Fp8MovesAsBytesButIsNotReduced) {
  constexpr int kRanks = 2;
  ncclComm_t comms[kRanks];
  ASSERT_EQ(ncclCommInitAll(comms, kRanks, nullptr), ncclSuccess) << LastError();
  OnEachRank(kRanks, [&](int r) {
    std::vector<uint8_t> send(2 * 5), recv(2 * 5, 0);
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<uint8_t>(r * 100 + i);
    ASSERT_EQ(ncclAlltoAll(send.data(), recv.data(), 5, ncclFloat8e5m2, comms[r], nullptr),
              ncclSuccess)
        << LastError();
    for (int from = 0; from < kRanks; ++from) {
      for (size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(recv[from * 5 + i], static_cast<uint8_t>(from * 100 + r * 5 + i));
      }
    }
  });
  uint8_t x[4] = {};
  EXPECT_EQ(ncclAllReduce(x, x, 4, ncclFloat8e4m3, ncclSum, comms[0], nullptr),
            ncclInvalidArgument);
  EXPECT_NE(LastError().find("ncclFloat8e4m3) cannot be reduced"), std::string::npos)
      << LastError();
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// Rank r of n gathers to `root` (recvbuff NULL elsewhere), out of place or
// in place, then scatters back from `root` (sendbuff NULL elsewhere).
void CheckGatherScatter(ncclComm_t comm, int r, int n, int root, size_t count, bool in_place) {
  std::vector<int32_t> mine(count), all(r == root ? count * n : 0, -1);
  for (size_t i = 0; i < count; ++i) mine[i] = Block(r, root, i);
  const int32_t* send = mine.data();
  if (r == root && in_place) {
    std::copy(mine.begin(), mine.end(), all.begin() + root * count);
    send = all.data() + root * count;
  }
  ASSERT_EQ(
      ncclGather(send, r == root ? all.data() : nullptr, count, ncclInt32, root, comm, nullptr),
      ncclSuccess)
      << LastError();
  if (r == root) {
    for (int from = 0; from < n; ++from) {
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(all[from * count + i], Block(from, root, i)) << "gather from " << from;
      }
    }
    for (size_t k = 0; k < all.size(); ++k) all[k] += 7;  // what the scatter hands back
  }
  std::vector<int32_t> got(count, -1);
  int32_t* recv = r == root && in_place ? all.data() + root * count : got.data();
  ASSERT_EQ(
      ncclScatter(r == root ? all.data() : nullptr, recv, count, ncclInt32, root, comm, nullptr),
      ncclSuccess)
      << LastError();
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(recv[i], Block(r, root, i) + 7) << "scatter";
}

TEST_F(NcclShim, GatherAndScatterFromEveryRootInAndOutOfPlace) {
  for (int n : {1, 3}) {
    std::vector<ncclComm_t> comms(n);
    ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << LastError();
    for (int root = 0; root < n; ++root) {
      for (size_t count : {size_t{1}, size_t{1031}}) {
        OnEachRank(n, [&](int r) {
          CheckGatherScatter(comms[r], r, n, root, count, false);
          CheckGatherScatter(comms[r], r, n, root, count, true);
        });
      }
    }
    // Zero elements: nothing moves, no buffer is needed.
    OnEachRank(n, [&](int r) {
      EXPECT_EQ(ncclGather(nullptr, nullptr, 0, ncclInt32, 0, comms[r], nullptr), ncclSuccess);
      EXPECT_EQ(ncclScatter(nullptr, nullptr, 0, ncclInt32, 0, comms[r], nullptr), ncclSuccess);
    });
    for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  }
}

TEST_F(NcclShim, GatherScatterAndAllReduceInOneGroupDrivenByOneThread) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 1031;
  ncclComm_t comms[kRanks];
  ASSERT_EQ(ncclCommInitAll(comms, kRanks, nullptr), ncclSuccess) << LastError();
  std::vector<std::vector<int32_t>> mine(kRanks, std::vector<int32_t>(kCount));
  std::vector<int32_t> gathered(kCount * kRanks, -1), to_scatter(kCount * kRanks);
  std::vector<std::vector<int32_t>> scattered(kRanks, std::vector<int32_t>(kCount, -1));
  std::vector<int32_t> sums(kRanks);
  for (size_t k = 0; k < to_scatter.size(); ++k) to_scatter[k] = static_cast<int32_t>(k) * 3;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < kCount; ++i) mine[r][i] = Block(r, 1, i);
    sums[r] = r + 1;
    ASSERT_EQ(ncclGather(mine[r].data(), r == 1 ? gathered.data() : nullptr, kCount, ncclInt32, 1,
                         comms[r], nullptr),
              ncclSuccess)
        << LastError();
    ASSERT_EQ(ncclAllReduce(&sums[r], &sums[r], 1, ncclInt32, ncclSum, comms[r], nullptr),
              ncclSuccess);
    ASSERT_EQ(ncclScatter(r == 2 ? to_scatter.data() : nullptr, scattered[r].data(), kCount,
                          ncclInt32, 2, comms[r], nullptr),
              ncclSuccess)
        << LastError();
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << LastError();
  for (size_t k = 0; k < gathered.size(); ++k) {
    ASSERT_EQ(gathered[k], Block(static_cast<int>(k / kCount), 1, k % kCount)) << k;
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(sums[r], 6);
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(scattered[r][i], static_cast<int32_t>(r * kCount + i) * 3) << "rank " << r;
    }
  }
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// Runs `call`, which must fail with `want` and a message containing `text`.
void ExpectRefused(ncclResult_t want, const std::string& text,
                   const std::function<ncclResult_t()>& call) {
  EXPECT_EQ(call(), want) << text;
  EXPECT_NE(LastError().find(text), std::string::npos)
      << "wanted \"" << text << "\" in: " << LastError();
}

TEST_F(NcclShim, AlltoAllGatherScatterRefuseBadArgumentsNamingThem) {
  ncclComm_t comms[2];
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess) << LastError();
  int32_t x[4] = {};
  const auto bad_type = static_cast<ncclDataType_t>(42);
  const ncclResult_t kArg = ncclInvalidArgument;
  ncclComm_t c0 = comms[0], c1 = comms[1];
  // Every one fails on its own rank before anything moves.
  ExpectRefused(kArg, "ncclAlltoAll: InvalidArgument: comm is NULL",
                [&] { return ncclAlltoAll(x, x, 1, ncclInt32, nullptr, nullptr); });
  ExpectRefused(kArg, "datatype 42", [&] { return ncclAlltoAll(x, x, 1, bad_type, c0, nullptr); });
  ExpectRefused(kArg, "sendbuff is NULL",
                [&] { return ncclAlltoAll(nullptr, x, 1, ncclInt32, c0, nullptr); });
  ExpectRefused(kArg, "recvbuff is NULL",
                [&] { return ncclAlltoAll(x, nullptr, 1, ncclInt32, c0, nullptr); });
  ExpectRefused(kArg, "ncclGather: InvalidArgument: comm is NULL",
                [&] { return ncclGather(x, x, 1, ncclInt32, 0, nullptr, nullptr); });
  ExpectRefused(kArg, "root 2", [&] { return ncclGather(x, x, 1, ncclInt32, 2, c0, nullptr); });
  ExpectRefused(kArg, "root -1", [&] { return ncclGather(x, x, 1, ncclInt32, -1, c0, nullptr); });
  ExpectRefused(kArg, "datatype 42", [&] { return ncclGather(x, x, 1, bad_type, 0, c0, nullptr); });
  ExpectRefused(kArg, "sendbuff is NULL",
                [&] { return ncclGather(nullptr, x, 1, ncclInt32, 0, c1, nullptr); });
  ExpectRefused(kArg, "recvbuff (on root) is NULL",
                [&] { return ncclGather(x, nullptr, 1, ncclInt32, 0, c0, nullptr); });
  ExpectRefused(kArg, "ncclScatter: InvalidArgument: comm is NULL",
                [&] { return ncclScatter(x, x, 1, ncclInt32, 0, nullptr, nullptr); });
  ExpectRefused(kArg, "root 5", [&] { return ncclScatter(x, x, 1, ncclInt32, 5, c0, nullptr); });
  ExpectRefused(kArg, "sendbuff (on root) is NULL",
                [&] { return ncclScatter(nullptr, x, 1, ncclInt32, 1, c1, nullptr); });
  ExpectRefused(kArg, "recvbuff is NULL",
                [&] { return ncclScatter(x, nullptr, 1, ncclInt32, 1, c0, nullptr); });
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// --- groups: checked at the call, run at ncclGroupEnd ---

TEST_F(NcclShim, AGroupRunsItsOperationsAtGroupEndAndDropsThoseOfADestroyedComm) {
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess) << LastError();
  float s = 2.0f;
  ncclRedOp_t op;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, ncclScalarHostImmediate, comm),
            ncclSuccess);
  // loom's own checks (here: the operator's datatype) run when the group
  // issues the operation; ncclGroupEnd reports them, naming the call.
  int32_t i = 3;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(&i, &i, 1, ncclInt32, op, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_NE(LastError().find("ncclAllReduce in the group"), std::string::npos) << LastError();
  EXPECT_EQ(ncclRedOpDestroy(op, comm), ncclSuccess);

  float in = 1, out = -1;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(&in, &out, 1, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(out, -1.0f);  // not run yet
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess) << LastError();
  EXPECT_EQ(out, -1.0f);  // dropped with its communicator
}

// --- ncclCommInitRankScalable ---

TEST_F(NcclShim, InitRankScalableMeetsAtTheFirstOfSeveralIds) {
  constexpr int kRanks = 3;
  ncclUniqueId ids[2] = {FreshId(), FreshId()};
  ncclComm_t comms[kRanks] = {};
  OnEachRank(kRanks, [&](int r) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.commName = "scalable";
    ASSERT_EQ(ncclCommInitRankScalable(&comms[r], kRanks, r, 2, ids, r == 1 ? &config : nullptr),
              ncclSuccess)
        << LastError();
    int n = 0, me = -1;
    EXPECT_EQ(ncclCommCount(comms[r], &n), ncclSuccess);
    EXPECT_EQ(ncclCommUserRank(comms[r], &me), ncclSuccess);
    EXPECT_EQ(n, kRanks);
    EXPECT_EQ(me, r);
    int32_t v = r + 1;
    ASSERT_EQ(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comms[r], nullptr), ncclSuccess);
    EXPECT_EQ(v, 6);
  });
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);

  // Refused before any rendezvous.
  ncclComm_t comm = nullptr;
  ncclUniqueId bad[2] = {ids[0], {}};
  const ncclResult_t kArg = ncclInvalidArgument;
  ExpectRefused(kArg, "newcomm is NULL",
                [&] { return ncclCommInitRankScalable(nullptr, 2, 0, 1, ids, nullptr); });
  ExpectRefused(kArg, "nId is 0",
                [&] { return ncclCommInitRankScalable(&comm, 2, 0, 0, ids, nullptr); });
  ExpectRefused(kArg, "nId is 3; it must be 1 to nranks (2)",
                [&] { return ncclCommInitRankScalable(&comm, 2, 0, 3, ids, nullptr); });
  ExpectRefused(kArg, "commIds is NULL",
                [&] { return ncclCommInitRankScalable(&comm, 2, 0, 1, nullptr, nullptr); });
  ExpectRefused(kArg, "commIds[1]",
                [&] { return ncclCommInitRankScalable(&comm, 2, 0, 2, bad, nullptr); });
  ExpectRefused(kArg, "rank 2 is not a rank",
                [&] { return ncclCommInitRankScalable(&comm, 2, 2, 1, ids, nullptr); });
  ExpectRefused(kArg, "nranks is 0",
                [&] { return ncclCommInitRankScalable(&comm, 0, 0, 1, ids, nullptr); });
  EXPECT_EQ(comm, nullptr);
}

// --- ncclCommShrink ---

// Ranks not in `exclude` shrink comms (of n ranks) and check the result;
// the excluded ranks do not call. Returns the new communicators (NULL for
// the excluded).
std::vector<ncclComm_t> ShrinkAndCheck(const std::vector<ncclComm_t>& comms,
                                       std::vector<int> exclude, int flags) {
  const int n = static_cast<int>(comms.size());
  std::vector<ncclComm_t> shrunk(n, nullptr);
  const std::vector<int> given = exclude;
  auto excluded = [&](int r) { return std::find(given.begin(), given.end(), r) != given.end(); };
  const int kept = n - static_cast<int>(given.size());
  OnEachRank(n, [&](int r) {
    if (excluded(r)) return;
    std::vector<int> list = given;  // each rank its own copy, as a real program has
    ASSERT_EQ(ncclCommShrink(comms[r], list.data(), static_cast<int>(list.size()), &shrunk[r],
                             nullptr, flags),
              ncclSuccess)
        << LastError();
    EXPECT_EQ(list, given) << "the list was modified";
    int size = 0, me = -1;
    ASSERT_EQ(ncclCommCount(shrunk[r], &size), ncclSuccess);
    ASSERT_EQ(ncclCommUserRank(shrunk[r], &me), ncclSuccess);
    int want = 0;
    for (int q = 0; q < r; ++q) want += excluded(q) ? 0 : 1;
    EXPECT_EQ(size, kept);
    EXPECT_EQ(me, want);  // old order kept
    int32_t v = r;
    ASSERT_EQ(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, shrunk[r], nullptr), ncclSuccess)
        << LastError();
    int32_t sum = 0;
    for (int q = 0; q < n; ++q) sum += excluded(q) ? 0 : q;
    EXPECT_EQ(v, sum);
  });
  return shrunk;
}

TEST_F(NcclShim, ShrinkKeepsTheOtherRanksInOrderWithoutTheExcludedOnes) {
  constexpr int kRanks = 4;
  std::vector<ncclComm_t> comms(kRanks);
  ASSERT_EQ(ncclCommInitAll(comms.data(), kRanks, nullptr), ncclSuccess) << LastError();
  // Unsorted list, and the first rank excluded (rank 1 leads the new one).
  for (ncclComm_t c : ShrinkAndCheck(comms, {3, 0}, NCCL_SHRINK_DEFAULT)) ncclCommDestroy(c);
  for (ncclComm_t c : ShrinkAndCheck(comms, {2}, NCCL_SHRINK_ABORT)) ncclCommDestroy(c);
  // The parent still works afterwards.
  OnEachRank(kRanks, [&](int r) {
    int32_t v = 1;
    ASSERT_EQ(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comms[r], nullptr), ncclSuccess);
    EXPECT_EQ(v, kRanks);
  });

  int list[2] = {1, 1};
  ncclComm_t out = comms[0];  // must become NULL
  const ncclResult_t kArg = ncclInvalidArgument;
  ncclComm_t c0 = comms[0];
  ExpectRefused(kArg, "newcomm is NULL",
                [&] { return ncclCommShrink(c0, list, 1, nullptr, nullptr, 0); });
  ExpectRefused(kArg, "comm is NULL",
                [&] { return ncclCommShrink(nullptr, list, 1, &out, nullptr, 0); });
  ExpectRefused(kArg, "excludeRanksList is NULL",
                [&] { return ncclCommShrink(c0, nullptr, 1, &out, nullptr, 0); });
  ExpectRefused(kArg, "excludeRanksCount is 0",
                [&] { return ncclCommShrink(c0, list, 0, &out, nullptr, 0); });
  ExpectRefused(kArg, "rank 1 is listed twice",
                [&] { return ncclCommShrink(c0, list, 2, &out, nullptr, 0); });
  list[1] = 4;
  ExpectRefused(kArg, "excludeRanksList[1] 4 is not a rank",
                [&] { return ncclCommShrink(c0, list, 2, &out, nullptr, 0); });
  list[1] = 0;
  ExpectRefused(kArg, "excluded ranks must not call ncclCommShrink",
                [&] { return ncclCommShrink(c0, list, 2, &out, nullptr, 0); });
  ExpectRefused(kArg, "shrinkFlags 0x2",
                [&] { return ncclCommShrink(c0, list, 1, &out, nullptr, 2); });
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  ExpectRefused(kArg, "NCCL_CONFIG_INITIALIZER",
                [&] { return ncclCommShrink(c0, list, 1, &out, &config, 0); });
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ExpectRefused(ncclInvalidUsage, "inside a group",
                [&] { return ncclCommShrink(c0, list, 1, &out, nullptr, 0); });
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(out, nullptr);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// --- ncclCommRevoke ---

TEST_F(NcclShim, RevokeRefusesLaterOperationsButShrinkAndDestroyWork) {
  constexpr int kRanks = 3;
  std::vector<ncclComm_t> comms(kRanks);
  ASSERT_EQ(ncclCommInitAll(comms.data(), kRanks, nullptr), ncclSuccess) << LastError();
  ExpectRefused(ncclInvalidArgument, "revokeFlags is 1",
                [&] { return ncclCommRevoke(comms[0], 1); });
  EXPECT_EQ(ncclCommRevoke(nullptr, NCCL_REVOKE_DEFAULT), ncclSuccess);  // as NCCL
  for (ncclComm_t c : comms) ASSERT_EQ(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT), ncclSuccess);
  ncclComm_t c0 = comms[0];
  int32_t x[kRanks] = {};
  const ncclResult_t kUsage = ncclInvalidUsage;
  ExpectRefused(kUsage, "ncclAllReduce: InvalidUsage: the communicator was revoked",
                [&] { return ncclAllReduce(x, x, 1, ncclInt32, ncclSum, c0, nullptr); });
  ExpectRefused(kUsage, "revoked", [&] { return ncclSend(x, 1, ncclInt32, 1, c0, nullptr); });
  ExpectRefused(kUsage, "revoked", [&] { return ncclAlltoAll(x, x, 1, ncclInt32, c0, nullptr); });
  ExpectRefused(kUsage, "revoked", [&] { return ncclGather(x, x, 1, ncclInt32, 0, c0, nullptr); });
  ExpectRefused(kUsage, "revoked", [&] { return ncclBcast(x, 1, ncclInt32, 0, c0, nullptr); });
  ExpectRefused(ncclInvalidArgument, "revoked already",
                [&] { return ncclCommRevoke(c0, NCCL_REVOKE_DEFAULT); });
  ExpectRefused(ncclInvalidArgument,
                "ncclCommFinalize: InvalidArgument: the communicator was revoked",
                [&] { return ncclCommFinalize(c0); });
  // Management still works: the ranks but the last shrink, then all go.
  for (ncclComm_t c : ShrinkAndCheck(comms, {kRanks - 1}, NCCL_SHRINK_ABORT)) ncclCommDestroy(c);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);

  // A finalized communicator is not revoked.
  ncclComm_t one;
  ASSERT_EQ(ncclCommInitAll(&one, 1, nullptr), ncclSuccess);
  ASSERT_EQ(ncclCommFinalize(one), ncclSuccess) << LastError();
  ExpectRefused(ncclInvalidArgument, "finalized", [&] { return ncclCommRevoke(one, 0); });
  EXPECT_EQ(ncclCommDestroy(one), ncclSuccess);
}

// --- windows ---

TEST_F(NcclShim, WindowsAreRegistrationsWithTheirOwnHandles) {
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess) << LastError();
  std::vector<float> buf(1024, 1.0f);
  ncclWindow_t win = nullptr, sym = nullptr;
  ASSERT_EQ(ncclCommWindowRegister(comm, buf.data(), 4096, &win, NCCL_WIN_DEFAULT), ncclSuccess)
      << LastError();
  ASSERT_EQ(ncclCommWindowRegister(comm, buf.data(), 4096, &sym, NCCL_WIN_COLL_SYMMETRIC),
            ncclSuccess)
      << LastError();
  EXPECT_NE(win, nullptr);
  EXPECT_NE(sym, win);
  ASSERT_EQ(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr),
            ncclSuccess);
  EXPECT_EQ(buf[7], 1.0f);
  const ncclResult_t kArg = ncclInvalidArgument;
  ncclWindow_t w = nullptr;
  ExpectRefused(kArg, "win is NULL",
                [&] { return ncclCommWindowRegister(comm, buf.data(), 64, nullptr, 0); });
  ExpectRefused(kArg, "winFlags 0x2",
                [&] { return ncclCommWindowRegister(comm, buf.data(), 64, &w, 2); });
  ExpectRefused(kArg, "buff is NULL",
                [&] { return ncclCommWindowRegister(comm, nullptr, 64, &w, 0); });
  ExpectRefused(kArg, "size is 0",
                [&] { return ncclCommWindowRegister(comm, buf.data(), 0, &w, 0); });
  ExpectRefused(kArg, "comm is NULL",
                [&] { return ncclCommWindowRegister(nullptr, buf.data(), 64, &w, 0); });
  EXPECT_EQ(w, nullptr);
  // A window is not a registration handle, nor the other way round.
  ExpectRefused(kArg, "was not registered with this communicator by ncclCommRegister",
                [&] { return ncclCommDeregister(comm, win); });
  void* handle = nullptr;
  ASSERT_EQ(ncclCommRegister(comm, buf.data(), 64, &handle), ncclSuccess);
  ExpectRefused(kArg, "by ncclCommWindowRegister", [&] {
    return ncclCommWindowDeregister(comm, reinterpret_cast<ncclWindow_t>(handle));
  });
  EXPECT_EQ(ncclCommWindowDeregister(comm, win), ncclSuccess) << LastError();
  ExpectRefused(kArg, "deregistered already", [&] { return ncclCommWindowDeregister(comm, win); });
  EXPECT_EQ(ncclCommDeregister(comm, handle), ncclSuccess);
  // sym stays registered: destroying the communicator frees it.
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// --- ncclGroupSimulateEnd ---

TEST_F(NcclShim, GroupSimulateEndPricesTheGroupWithoutRunningIt) {
  constexpr int kRanks = 3;
  ncclComm_t comms[kRanks];
  ASSERT_EQ(ncclCommInitAll(comms, kRanks, nullptr), ncclSuccess) << LastError();
  // Prices one thread's group of out-of-place all-reduces of `count` floats.
  std::vector<std::vector<float>> in(kRanks), out(kRanks);
  auto simulate = [&](size_t count) {
    ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
    EXPECT_EQ(info.estimatedTime, NCCL_UNDEF_FLOAT);
    EXPECT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < kRanks; ++r) {
      in[r].assign(count, 1.0f);
      out[r].assign(count, -1.0f);
      EXPECT_EQ(
          ncclAllReduce(in[r].data(), out[r].data(), count, ncclFloat, ncclSum, comms[r], nullptr),
          ncclSuccess);
    }
    EXPECT_EQ(ncclGroupSimulateEnd(&info), ncclSuccess) << LastError();
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(out[r].back(), -1.0f) << "the group ran";
    return info.estimatedTime;
  };
  const float small = simulate(2), large = simulate(1 << 20);
  EXPECT_GT(small, 0.0f);
  EXPECT_TRUE(std::isfinite(large));
  EXPECT_GT(large, small);
  // Nothing was left behind: a real group afterwards runs only itself.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(ncclAllReduce(in[r].data(), out[r].data(), 4, ncclFloat, ncclSum, comms[r], nullptr),
              ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << LastError();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(out[r][3], 3.0f);

  // NULL is ncclGroupEnd: the group runs.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(ncclAllReduce(in[r].data(), out[r].data(), 5, ncclFloat, ncclMax, comms[r], nullptr),
              ncclSuccess);
  }
  ASSERT_EQ(ncclGroupSimulateEnd(nullptr), ncclSuccess) << LastError();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(out[r][4], 1.0f);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST_F(NcclShim, GroupSimulateEndChecksItsStructAndNesting) {
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess) << LastError();
  float x = 1, y = -1;
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  ExpectRefused(ncclInvalidUsage, "without a matching ncclGroupStart",
                [&] { return ncclGroupSimulateEnd(&info); });
  // An empty group leaves the estimate undefined.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupSimulateEnd(&info), ncclSuccess);
  EXPECT_EQ(info.estimatedTime, NCCL_UNDEF_FLOAT);
  // An inner level only closes itself.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupSimulateEnd(&info), ncclSuccess);
  EXPECT_EQ(info.estimatedTime, NCCL_UNDEF_FLOAT);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << LastError();
  EXPECT_EQ(y, 1.0f);
  // A struct not from the initializer is refused, and the group ends dropped.
  y = -1;
  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 0x1234;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  ExpectRefused(ncclInvalidArgument, "NCCL_SIM_INFO_INITIALIZER",
                [&] { return ncclGroupSimulateEnd(&bad); });
  EXPECT_EQ(y, -1.0f);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  // A shorter struct (an older header's) is written only as far as its size.
  struct {
    ncclSimInfo_t info;
    float after;
  } shorter{NCCL_SIM_INFO_INITIALIZER, 42.0f};
  shorter.info.size = offsetof(ncclSimInfo_t, estimatedTime);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupSimulateEnd(&shorter.info), ncclSuccess) << LastError();
  EXPECT_EQ(shorter.info.estimatedTime, NCCL_UNDEF_FLOAT);
  EXPECT_EQ(shorter.after, 42.0f);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// --- ncclResetDebugInit ---

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_F(NcclShim, ResetDebugInitRereadsTheDebugVariables) {
  for (const char* v : {"LOOM_DEBUG", "LOOM_DEBUG_FILE", "LOOM_DEBUG_SUBSYS"}) unsetenv(v);
  const std::string path = ::testing::TempDir() + "nccl_reset_debug_" + std::to_string(getpid());
  std::remove(path.c_str());
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", path.c_str(), 1);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // as in NCCL's header
  ncclResetDebugInit();
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);  // logged at WARN
  unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_DEBUG_FILE");
  pncclResetDebugInit();  // back to the environment without them
#pragma GCC diagnostic pop
  EXPECT_NE(ReadFile(path).find("ncclGetVersion: InvalidArgument: version is NULL"),
            std::string::npos)
      << ReadFile(path);
  std::remove(path.c_str());
}

}  // namespace
