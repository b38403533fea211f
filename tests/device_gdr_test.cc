// GPUDirect RDMA on the communicator's side, without a GPU or an HCA: which
// Send/Recv buffers the network connection takes in place
// (NetworkTakesDeviceBuffer), how DevicePath queues them (pointers kept,
// marked CollArgs::gdr, the user's stream only waiting, nothing staged),
// and the data-moving collectives' transfers (PlanNetDirect, DeviceNet).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "comm/device_net.h"
#include "comm/device_path.h"
#include "tests/fake_device_ops.h"

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

// What a plan's transfers are, as (dir, peer, byte offset from base, bytes).
struct Move {
  char dir;
  int peer;
  ptrdiff_t at;
  size_t bytes;
  bool operator==(const Move&) const = default;
};
std::vector<Move> Moves(const NetDirectPlan& plan, const char* send, const char* recv) {
  std::vector<Move> out;
  for (const Transfer& t : plan.transfers) {
    EXPECT_TRUE(t.device);
    const bool s = t.dir == Transfer::Dir::kSend;
    out.push_back({s ? 's' : 'r', t.peer,
                   s ? static_cast<const char*>(t.src) - send : static_cast<char*>(t.dst) - recv,
                   t.bytes});
  }
  return out;
}

TEST(NetDirect, AllGatherSendsItsBlockToEveryoneAndCopiesItsOwn) {
  std::vector<char> send(400), recv(1600);
  CollArgs a = SendRecv(send.data(), recv.data(), 100, 0);
  a.kind = OpKind::kAllGather;
  const NetDirectPlan p = PlanNetDirect(a, 2, 4);
  EXPECT_EQ(Moves(p, send.data(), recv.data()), (std::vector<Move>{{'s', 0, 0, 400},
                                                                   {'r', 0, 0, 400},
                                                                   {'s', 1, 0, 400},
                                                                   {'r', 1, 400, 400},
                                                                   {'s', 3, 0, 400},
                                                                   {'r', 3, 1200, 400}}));
  ASSERT_TRUE(p.local.has_value());
  EXPECT_EQ(p.local->dst, recv.data() + 800);
  EXPECT_EQ(p.local->src, send.data());
  a.send = recv.data() + 800;  // in place: nothing to copy
  EXPECT_FALSE(PlanNetDirect(a, 2, 4).local.has_value());
}

TEST(NetDirect, AllToAllSwapsBlocksAndSendsFromTheSnapshotInPlace) {
  std::vector<char> buf(1200), snap(1200);
  CollArgs a = SendRecv(buf.data(), buf.data(), 100, 0);  // in place
  a.kind = OpKind::kAllToAll;
  const NetDirectPlan p = PlanNetDirect(a, 1, 3, snap.data());
  EXPECT_EQ(Moves(p, snap.data(), buf.data()),
            (std::vector<Move>{
                {'s', 0, 0, 400}, {'r', 0, 0, 400}, {'s', 2, 800, 400}, {'r', 2, 800, 400}}));
  ASSERT_TRUE(p.local.has_value());
  EXPECT_EQ(p.local->dst, buf.data() + 400);
  EXPECT_EQ(p.local->src, snap.data() + 400);
}

TEST(NetDirect, BroadcastGoesFromTheRootToEveryone) {
  std::vector<char> send(40), recv(40);
  CollArgs a = SendRecv(send.data(), recv.data(), 10, 2);  // root 2
  a.kind = OpKind::kBroadcast;
  const NetDirectPlan root = PlanNetDirect(a, 2, 3);
  EXPECT_EQ(Moves(root, send.data(), recv.data()),
            (std::vector<Move>{{'s', 0, 0, 40}, {'s', 1, 0, 40}}));
  EXPECT_TRUE(root.local.has_value());
  const NetDirectPlan leaf = PlanNetDirect(a, 0, 3);
  EXPECT_EQ(Moves(leaf, send.data(), recv.data()), (std::vector<Move>{{'r', 2, 0, 40}}));
  EXPECT_FALSE(leaf.local.has_value());
}

TEST(NetDirect, HandlesOnlyDataMovingCollectivesAboveTheGrantSizeOnceEnabled) {
  cuda::FakeDeviceOps ops;
  DeviceNet net;
  float x[1];
  CollArgs a = SendRecv(x, x, 1024, 0);  // 4096 bytes per block
  a.kind = OpKind::kAllGather;
  EXPECT_FALSE(net.Handles(a));  // not enabled
  net.Enable(&ops, 4096, 0);
  EXPECT_TRUE(net.Handles(a));
  a.count = 1023;
  EXPECT_FALSE(net.Handles(a));
  a.count = 1 << 20;
  for (OpKind k : {OpKind::kAllToAll, OpKind::kBroadcast}) {
    a.kind = k;
    EXPECT_TRUE(net.Handles(a));
  }
  for (OpKind k :
       {OpKind::kAllReduce, OpKind::kReduceScatter, OpKind::kReduce, OpKind::kSendRecv}) {
    a.kind = k;
    EXPECT_FALSE(net.Handles(a)) << OpKindName(k);
  }
}

}  // namespace
}  // namespace loom
