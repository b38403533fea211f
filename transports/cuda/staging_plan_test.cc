// Staging plans: exact small plans, argument errors, and invariants over many
// shapes checked by simulating an executor that may run any ready step.
#include "transports/cuda/staging_plan.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace loom::cuda {
namespace {

using Kind = StagingStep::Kind;

TEST(StagingPlanTest, SmallSendPlanExactly) {
  Result<StagingPlan> p = PlanStaging(StagingDir::kDeviceToNet, 10, 4, 2);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->depth, 2);
  EXPECT_EQ(p->pinned_bytes, 8u);
  EXPECT_EQ(Describe(*p),
            "0 D2H chunk 0 [0, 4) slot 0 after -\n"
            "1 D2H chunk 1 [4, 8) slot 1 after -\n"
            "2 Send chunk 0 [0, 4) slot 0 after 0\n"
            "3 D2H chunk 2 [8, 10) slot 0 after 2\n"
            "4 Send chunk 1 [4, 8) slot 1 after 1\n"
            "5 Send chunk 2 [8, 10) slot 0 after 3\n");
}

TEST(StagingPlanTest, SmallReceivePlanExactly) {
  Result<StagingPlan> p = PlanStaging(StagingDir::kNetToDevice, 8, 4, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(Describe(*p),
            "0 Recv chunk 0 [0, 4) slot 0 after -\n"
            "1 H2D chunk 0 [0, 4) slot 0 after 0\n"
            "2 Recv chunk 1 [4, 8) slot 0 after 1\n"
            "3 H2D chunk 1 [4, 8) slot 0 after 2\n");
}

TEST(StagingPlanTest, DepthIsCappedByTheChunkCount) {
  Result<StagingPlan> p = PlanStaging(StagingDir::kDeviceToNet, 100, 64, 8);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->depth, 2);
  EXPECT_EQ(p->pinned_bytes, 128u);
  EXPECT_EQ(p->steps.size(), 4u);
}

TEST(StagingPlanTest, EmptyTransferIsAnEmptyPlan) {
  Result<StagingPlan> p = PlanStaging(StagingDir::kNetToDevice, 0, 4096, 4);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->steps.empty());
  EXPECT_EQ(p->pinned_bytes, 0u);
}

TEST(StagingPlanTest, BadArgumentsAreInvalid) {
  EXPECT_EQ(PlanStaging(StagingDir::kDeviceToNet, 10, 0, 2).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(PlanStaging(StagingDir::kDeviceToNet, 10, 4, 0).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(PlanStaging(StagingDir::kDeviceToNet, 10, 4, -3).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(PlanStaging(StagingDir::kDeviceToNet, 10, 6, 2, 4).status().code(),
            Code::kInvalidArgument);  // a float would straddle two chunks
  EXPECT_EQ(PlanStaging(StagingDir::kDeviceToNet, 10, 6, 2, 0).status().code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(PlanStaging(StagingDir::kDeviceToNet, 10, 8, 2, 4).ok());
}

// Runs the plan in a random order that respects `after` and checks that data
// gets through intact: no slot is overwritten before it is drained, every
// byte goes through exactly once, and the network sees chunks in order.
void Simulate(const StagingPlan& plan, StagingDir dir, size_t bytes, uint64_t seed) {
  const bool send = dir == StagingDir::kDeviceToNet;
  std::vector<uint8_t> source(bytes), sink(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) source[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<std::vector<uint8_t>> slots(plan.depth, std::vector<uint8_t>(plan.chunk_bytes));
  std::vector<int64_t> slot_holder(plan.depth, -1);  // chunk filled and not yet drained
  std::vector<bool> done(plan.steps.size(), false);
  size_t next_net_chunk = 0;
  std::mt19937_64 rng(seed);
  for (size_t finished = 0; finished < plan.steps.size(); ++finished) {
    // Among steps whose dependency is done, the network ones must also go in
    // posting order (a connection is FIFO); pick any of the ready ones.
    std::vector<size_t> ready;
    bool net_candidate = false;
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const StagingStep& s = plan.steps[i];
      if (done[i] || (s.after >= 0 && !done[s.after])) continue;
      const bool net = s.kind == Kind::kNetSend || s.kind == Kind::kNetRecv;
      if (net && (net_candidate || s.chunk != next_net_chunk)) continue;
      net_candidate = net_candidate || net;
      ready.push_back(i);
    }
    ASSERT_FALSE(ready.empty()) << "deadlock\n" << Describe(plan);
    const size_t i = ready[rng() % ready.size()];
    const StagingStep& s = plan.steps[i];
    ASSERT_LT(s.after, static_cast<int64_t>(i)) << "waits on a later step";
    ASSERT_GE(s.slot, 0);
    ASSERT_LT(s.slot, plan.depth);
    ASSERT_LE(s.bytes, plan.chunk_bytes);
    const bool fills = s.kind == (send ? Kind::kDeviceToHost : Kind::kNetRecv);
    if (fills) {
      ASSERT_EQ(slot_holder[s.slot], -1) << "slot " << s.slot << " overwritten before drain";
      slot_holder[s.slot] = static_cast<int64_t>(s.chunk);
      for (size_t k = 0; k < s.bytes; ++k) slots[s.slot][k] = source[s.offset + k];
    } else {
      ASSERT_EQ(slot_holder[s.slot], static_cast<int64_t>(s.chunk)) << "drains another chunk";
      slot_holder[s.slot] = -1;
      for (size_t k = 0; k < s.bytes; ++k) sink[s.offset + k] += slots[s.slot][k];
    }
    if (s.kind == Kind::kNetSend || s.kind == Kind::kNetRecv) ++next_net_chunk;
    done[i] = true;
  }
  EXPECT_EQ(sink, source);  // += above: a byte moved twice would show
}

TEST(StagingPlanTest, InvariantsHoldForManyShapesAndOrders) {
  for (StagingDir dir : {StagingDir::kDeviceToNet, StagingDir::kNetToDevice}) {
    for (size_t bytes : {1u, 3u, 64u, 65u, 1000u, 4096u, 4097u}) {
      for (size_t chunk : {1u, 7u, 64u, 4096u}) {
        const size_t chunks = (bytes + chunk - 1) / chunk;
        if (chunks > 300) continue;  // the simulation is quadratic in steps
        for (int depth : {1, 2, 3, 8}) {
          Result<StagingPlan> p = PlanStaging(dir, bytes, chunk, depth);
          ASSERT_TRUE(p.ok());
          ASSERT_EQ(p->steps.size(), 2 * chunks);
          ASSERT_EQ(p->pinned_bytes, static_cast<size_t>(p->depth) * chunk);
          for (uint64_t seed = 0; seed < 3; ++seed) {
            Simulate(*p, dir, bytes, seed);
            if (HasFatalFailure()) {
              FAIL() << "bytes " << bytes << " chunk " << chunk << " depth " << depth;
            }
          }
        }
      }
    }
  }
}

TEST(StagingPlanTest, CopiesRunAheadOfTheNetworkByDepth) {
  // With depth d, d fills are issued before the first drain: the copy engine
  // is d chunks ahead, which is what overlaps copies with communication.
  Result<StagingPlan> p = PlanStaging(StagingDir::kDeviceToNet, 1 << 20, 1 << 16, 4);
  ASSERT_TRUE(p.ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(p->steps[i].kind, Kind::kDeviceToHost) << i;
  EXPECT_EQ(p->steps[4].kind, Kind::kNetSend);
}

}  // namespace
}  // namespace loom::cuda
