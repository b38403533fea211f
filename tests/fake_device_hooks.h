// DeviceHooks (tests/device_conformance.h) over FakeDeviceOps: "device"
// memory is the fake's tagged host memory, uploads and downloads are tasks
// on one stream of the fake.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "loom/loom.hpp"
#include "tests/device_conformance.h"
#include "tests/fake_device_ops.h"

namespace loom::testing {

class FakeHooks final : public DeviceHooks {
 public:
  explicit FakeHooks(cuda::FakeDeviceOps& ops) : ops_(ops), stream_(ops.CreateStream()) {}
  void* Alloc(size_t bytes) override { return ops_.AllocDevice(bytes); }
  void Free(void* p) override { ops_.FreeDevice(p); }
  void Upload(void* dev, const void* host, size_t bytes) override {
    ops_.Enqueue(stream_, [=] { std::memcpy(dev, host, bytes); });
  }
  void Download(void* host, const void* dev, size_t bytes) override {
    ops_.Enqueue(stream_, [=] { std::memcpy(host, dev, bytes); });
  }
  void Sync() override {
    ASSERT_TRUE(ops_.Synchronize(stream_, Deadline::After(std::chrono::seconds(20))).ok());
  }
  GpuStream stream() override { return stream_; }

 private:
  cuda::FakeDeviceOps& ops_;
  GpuStream stream_;
};

// Runs `n` ranks as threads, rank r with fake device r current when it
// creates its communicator (the fake needs set_device_count(n) first).
inline void RunOnDevices(cuda::FakeDeviceOps& fake, int n,
                         const std::function<void(Communicator&)>& body) {
  auto id = UniqueId::Create();
  ASSERT_TRUE(id.ok());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ASSERT_TRUE(fake.SetDevice(r).ok());
      auto comm = Communicator::Create(id.value(), r, n);
      ASSERT_TRUE(comm.ok()) << comm.status().ToString();
      body(*comm.value());
      EXPECT_TRUE(comm.value()->Finalize().ok());
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace loom::testing
