// GPUDirect RDMA on the communicator's side, without a GPU or an HCA: which
// Send/Recv buffers the network connection takes in place
// (NetworkTakesDeviceBuffer), and how DevicePath queues them: pointers kept,
// marked CollArgs::gdr, the user's stream only waiting, nothing staged.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "comm/device_path.h"
#include "transports/cuda/fake_device_ops.h"

namespace loom {
namespace {

// A connection that only answers the two GPUDirect RDMA questions.
class StubConnection final : public Connection {
 public:
  StubConnection(bool sends, size_t recv_from) : sends_(sends), recv_from_(recv_from) {}
  void PostSend(Transfer*) override {}
  void PostRecv(Transfer*) override {}
  Result<bool> Progress() override { return false; }
  bool idle() const override { return true; }
  std::string Describe() const override { return "stub"; }
  bool sends_device_memory() const override { return sends_; }
  size_t receives_device_memory_from() const override { return recv_from_; }

 private:
  bool sends_;
  size_t recv_from_;
};

CollArgs SendRecv(const void* send, void* recv, size_t floats, int peer) {
  CollArgs a;
  a.kind = OpKind::kSendRecv;
  a.send = send;
  a.recv = recv;
  a.count = floats;
  a.type = DataType::kFloat32;
  a.root = peer;
  return a;
}

TEST(GdrPlacement, TheConnectionDecidesPerDirectionAndSize) {
  float buf[1] = {};
  const StubConnection both(true, 4096), recv_only(false, 4096), none(false, 0);
  // Sends: any size, when the connection sends from GPU memory.
  EXPECT_TRUE(NetworkTakesDeviceBuffer(SendRecv(buf, nullptr, 1, 1), 0, &both));
  EXPECT_FALSE(NetworkTakesDeviceBuffer(SendRecv(buf, nullptr, 4096, 1), 0, &recv_only));
  // Receives: from the connection's smallest size on (4096 bytes = 1024 floats).
  EXPECT_FALSE(NetworkTakesDeviceBuffer(SendRecv(nullptr, buf, 1023, 1), 0, &both));
  EXPECT_TRUE(NetworkTakesDeviceBuffer(SendRecv(nullptr, buf, 1024, 1), 0, &both));
  EXPECT_TRUE(NetworkTakesDeviceBuffer(SendRecv(nullptr, buf, 1024, 1), 0, &recv_only));
  EXPECT_FALSE(NetworkTakesDeviceBuffer(SendRecv(nullptr, buf, 1 << 20, 1), 0, &none));
  // Never to self, without a connection, or for a collective.
  EXPECT_FALSE(NetworkTakesDeviceBuffer(SendRecv(buf, nullptr, 1, 0), 0, &both));
  EXPECT_FALSE(NetworkTakesDeviceBuffer(SendRecv(buf, nullptr, 1, 1), 0, nullptr));
  CollArgs ar = SendRecv(buf, buf, 1 << 20, 0);
  ar.kind = OpKind::kAllReduce;
  EXPECT_FALSE(NetworkTakesDeviceBuffer(ar, 0, &both));
}

TEST(GdrPlacement, InPlaceItemsKeepTheirPointersAndTheirStreamOnlyWaits) {
  cuda::FakeDeviceOps ops;
  SetDeviceOpsForTesting(&ops);
  auto path = std::make_unique<DevicePath>();
  SetDeviceOpsForTesting(nullptr);
  cuda::StreamHandle stream = ops.CreateStream();
  constexpr size_t kFloats = 4096;
  void* out = ops.AllocDevice(kFloats * 4);
  void* in = ops.AllocDevice(kFloats * 4);
  void* staged_in = ops.AllocDevice(16);
  std::vector<CollArgs> items = {SendRecv(out, nullptr, kFloats, 1),
                                 SendRecv(nullptr, in, kFloats, 1),
                                 SendRecv(nullptr, staged_in, 4, 1)};
  std::vector<Placement> where(3, Placement{true, stream, false});
  where[0].gdr = where[1].gdr = true;  // the small receive is staged
  std::vector<CollArgs> queued;
  std::shared_ptr<StagedOp> op;
  ASSERT_TRUE(path->StageAndQueue(items, where, 0, 2,
                                  [&](std::vector<CollArgs> q, std::shared_ptr<StagedOp> o) {
                                    queued = std::move(q);
                                    op = std::move(o);
                                  })
                  .ok());
  ASSERT_EQ(queued.size(), 3u);
  EXPECT_TRUE(queued[0].gdr && queued[1].gdr);
  EXPECT_FALSE(queued[0].device || queued[1].device);  // not the IPC path
  EXPECT_EQ(queued[0].send, out);
  EXPECT_EQ(queued[1].recv, in);
  EXPECT_FALSE(queued[2].gdr);
  EXPECT_NE(queued[2].recv, staged_in);  // rewritten to pinned memory
  EXPECT_EQ(path->staging_allocations(), 1u);
  // Work queued after the operation waits for it.
  std::atomic<bool> after{false};
  ops.Enqueue(stream, [&] { after = true; });
  const std::atomic<bool> abort{false};
  ASSERT_TRUE(path->AwaitReady(*op, Deadline::After(std::chrono::seconds(10)), abort).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(after.load());
  path->Complete(*op);
  ASSERT_TRUE(ops.Synchronize(stream, Deadline::After(std::chrono::seconds(10))).ok());
  EXPECT_TRUE(after.load());
  path.reset();
  for (void* p : {out, in, staged_in}) ops.FreeDevice(p);
}

}  // namespace
}  // namespace loom
