// GradSync's bucket plan on a group of one rank (the multi-rank behaviour is
// covered by the parity tests under `loom run`).
#include "trainer/grad_sync.h"

#include <gtest/gtest.h>

namespace loom::train {
namespace {

TEST(GradSyncTest, BucketsCoverTheBufferAndZeroOwnsAllOfItAlone) {
  ModelConfig cfg;
  ParamLayout layout(cfg, ShardPlan{0, 1, 0, cfg.layers, true, true});
  CommClock clock;
  Group one("dp", nullptr, &clock);
  for (SyncMode mode : {SyncMode::kPlain, SyncMode::kBucketed, SyncMode::kOverlap}) {
    GradSync sync(layout, &one, SyncOptions{mode, true, 1000, false});
    EXPECT_EQ(sync.buckets(), mode == SyncMode::kPlain ? 1 : static_cast<int>((layout.size() + 999) / 1000));
    size_t total = 0;
    for (const auto& r : sync.owned()) total += r.count;
    EXPECT_EQ(total, layout.size());
    std::vector<float> grads(layout.size());
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i);
    sync.Arm();
    for (const Slot& s : layout.slots()) sync.TensorReady(s.global_id, grads.data());
    ASSERT_TRUE(sync.Finish(grads.data()).ok());
    size_t k = 0;
    for (const auto& r : sync.owned()) {
      for (size_t i = 0; i < r.count; ++i, ++k) ASSERT_EQ(sync.shard_grads()[k], grads[r.offset + i]);
    }
    EXPECT_EQ(one.ops(), 0u);  // a group of one never calls loom
  }
}

TEST(GradSyncTest, WithoutZeroTheWholeBufferIsOwned) {
  ModelConfig cfg;
  ParamLayout layout(cfg, ShardPlan{0, 1, 0, cfg.layers, true, true});
  CommClock clock;
  Group one("dp", nullptr, &clock);
  GradSync sync(layout, &one, SyncOptions{});
  ASSERT_EQ(sync.owned().size(), 1u);
  EXPECT_EQ(sync.owned()[0].count, layout.size());
  std::vector<float> params(layout.size(), 1.0f);
  EXPECT_TRUE(sync.GatherParams(params.data()).ok());
  EXPECT_EQ(params[0], 1.0f);
}

}  // namespace
}  // namespace loom::train
