// Ranks of one process on different GPUs (ncclCommInitAll's way), without a
// GPU: FakeDeviceOps with several devices, each rank thread on its own.
// Through CUDA IPC they read each other's buffers by raw pointers once peer
// access is enabled; the whole device conformance must hold.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "comm/device_path.h"
#include "loom/loom.hpp"
#include "tests/device_conformance.h"
#include "tests/fake_device_hooks.h"

namespace loom::testing {
namespace {

class MultiGpuOneProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.set_device_count(4);
    // As CUDA does: ranks of one process read each other by raw pointers.
    fake_.set_ipc_within_process(false);
    SetDeviceOpsForTesting(&fake_);
    // The fake's GPUs are not in this host's topology: their path counts
    // as PHB, beyond the default PXB.
    setenv("NCCL_P2P_LEVEL", "SYS", 1);
  }
  void TearDown() override {
    unsetenv("NCCL_P2P_LEVEL");
    SetDeviceOpsForTesting(nullptr);
  }
  cuda::FakeDeviceOps fake_;
};

TEST_F(MultiGpuOneProcess, EveryCollectiveThroughPeerAccess) {
  const std::vector<DataType> types = {DataType::kInt32, DataType::kFloat16, DataType::kFloat32};
  for (int n : {2, 3}) {
    const size_t enabled = fake_.peer_accesses_enabled();
    RunOnDevices(fake_, n, [&](Communicator& c) {
      FakeHooks h(fake_);
      CheckDeviceCollectives(c, h, types, {1, 1031});
    });
    // Each rank enabled access to every other rank's GPU, and mapped nothing.
    EXPECT_EQ(fake_.peer_accesses_enabled() - enabled, static_cast<size_t>(n * (n - 1)));
    EXPECT_EQ(fake_.ipc_opens(), 0u);
  }
  EXPECT_GT(fake_.reduce_launches(), 0u) << "the reductions must run on the devices (IPC path)";
}

TEST_F(MultiGpuOneProcess, TheDefaultLevelStagesGpusTheTopologyDoesNotShow) {
  unsetenv("NCCL_P2P_LEVEL");
  RunOnDevices(fake_, 2, [&](Communicator& c) {
    FakeHooks h(fake_);
    CheckDeviceCollectives(c, h, {DataType::kFloat32}, {7});
  });
  EXPECT_EQ(fake_.reduce_launches(), 0u);  // staged: the CPU reduced
}

}  // namespace
}  // namespace loom::testing
