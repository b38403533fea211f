// The data-moving collectives straight between GPUs (comm/device_net.h),
// without a GPU or an HCA: ranks as threads over shared memory, whose
// connections copy the fake's "device" memory, with DeviceNet forced on
// (CUDA IPC off, so the reductions stage). The whole device conformance
// must hold, and all-gather, broadcast and all-to-all must have gone
// through DeviceNet (it flushes the NIC's writes after each).
#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/device_net.h"
#include "comm/device_path.h"
#include "tests/device_conformance.h"
#include "tests/fake_device_hooks.h"
#include "tests/harness.h"

namespace loom::testing {
namespace {

class DeviceNetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetDeviceOpsForTesting(&fake_);
    setenv("NCCL_P2P_DISABLE", "1", 1);
  }
  void TearDown() override {
    SetDeviceNetForTesting(0);
    unsetenv("NCCL_P2P_DISABLE");
    SetDeviceOpsForTesting(nullptr);
  }
  cuda::FakeDeviceOps fake_;
};

TEST_F(DeviceNetTest, EveryCollectiveWithTheDataMovingOnesStraightBetweenGpus) {
  SetDeviceNetForTesting(64);  // blocks of 64 bytes and more
  const std::vector<DataType> types = {DataType::kInt8, DataType::kFloat32, DataType::kFloat64};
  for (int n : {2, 3, 4}) {
    const size_t flushes = fake_.rdma_flushes();
    RunRanks(n, [&](Communicator& c) {
      FakeHooks h(fake_);
      CheckDeviceCollectives(c, h, types, {0, 7, 1031});
    });
    EXPECT_GT(fake_.rdma_flushes(), flushes) << n << " ranks: DeviceNet never ran";
  }
}

TEST_F(DeviceNetTest, EachRankWorksOnItsOwnGpu) {
  // The worker thread that runs the collective never chose a device: it
  // must select the rank's before any device call (the flush included).
  fake_.set_device_count(2);
  SetDeviceNetForTesting(64);
  RunOnDevices(fake_, 2, [&](Communicator& c) {
    FakeHooks h(fake_);
    CheckDeviceCollectives(c, h, {DataType::kFloat32}, {1031});
  });
  EXPECT_GT(fake_.rdma_flushes_on(0), 0u);
  EXPECT_EQ(fake_.rdma_flushes_on(1), fake_.rdma_flushes_on(0)) << "rank 1 flushed GPU 0";
}

TEST_F(DeviceNetTest, OffItStagesAsBefore) {
  RunRanks(2, [&](Communicator& c) {
    FakeHooks h(fake_);
    CheckDeviceCollectives(c, h, {DataType::kFloat32}, {1031});
  });
  EXPECT_EQ(fake_.rdma_flushes(), 0u);
}

}  // namespace
}  // namespace loom::testing
