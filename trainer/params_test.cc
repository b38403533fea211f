// ParamLayout: TP slices reassemble the unsharded initialisation exactly.
#include "trainer/params.h"

#include <gtest/gtest.h>

#include <map>

namespace loom::train {
namespace {

TEST(ParamsTest, DefaultModelHasTheDocumentedSize) {
  EXPECT_EQ(GlobalParamCount(ModelConfig{}), 210304u);
}

TEST(ParamsTest, PaddingRoundsUpAndIsZero) {
  ModelConfig cfg;
  ShardPlan plan{0, 1, 0, cfg.layers, true, true};
  ParamLayout layout(cfg, plan, 7);
  EXPECT_EQ(layout.size() % 7, 0u);
  EXPECT_GE(layout.size(), GlobalParamCount(cfg));
  std::vector<float> p(layout.size(), 1.0f);
  layout.Init(p.data(), 1);
  for (size_t i = GlobalParamCount(cfg); i < p.size(); ++i) EXPECT_EQ(p[i], 0.0f);
}

TEST(ParamsTest, TensorParallelSlicesReassembleTheFullInit) {
  ModelConfig cfg{.vocab = 16, .channels = 8, .heads = 4, .layers = 2, .seq = 4};
  ParamLayout full(cfg, ShardPlan{0, 1, 0, cfg.layers, true, true});
  std::vector<float> ref(full.size());
  full.Init(ref.data(), 99);
  for (int tp : {2, 4}) {
    std::map<std::pair<int, size_t>, int> seen;  // (tensor, element) -> times
    for (int r = 0; r < tp; ++r) {
      ParamLayout part(cfg, ShardPlan{r, tp, 0, cfg.layers, true, true});
      std::vector<float> p(part.size());
      part.Init(p.data(), 99);
      for (const Slot& s : part.slots()) {
        const Slot* whole = full.Find(s.global_id);
        ASSERT_NE(whole, nullptr);
        for (size_t i = 0; i < s.count; ++i) {
          const size_t g = part.GlobalElement(s, i);
          ASSERT_LT(g, whole->count);
          EXPECT_EQ(p[s.offset + i], ref[whole->offset + g]) << s.global_id << " " << g;
          ++seen[{s.global_id, g}];
        }
      }
    }
    for (const Slot& s : full.slots()) {
      const bool split = GlobalTensor(cfg, s.global_id).shard != Shard::kNone;
      for (size_t g = 0; g < s.count; ++g) {
        EXPECT_EQ((seen[{s.global_id, g}]), split ? 1 : tp) << GlobalTensor(cfg, s.global_id).name;
      }
    }
  }
}

TEST(ParamsTest, QkvShardKeepsWholeHeadsOfQKAndV) {
  ModelConfig cfg{.vocab = 8, .channels = 4, .heads = 2, .layers = 1, .seq = 2};
  ParamLayout part(cfg, ShardPlan{1, 2, 0, 1, true, true});
  const Slot* qkvb = part.Find(LayerTensorId(0, LayerTensor::kQkvb));
  ASSERT_NE(qkvb, nullptr);
  ASSERT_EQ(qkvb->count, 6u);  // 3 blocks x 2 channels of head 1
  const size_t expect[] = {2, 3, 6, 7, 10, 11};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(part.GlobalElement(*qkvb, i), expect[i]);
}

TEST(ParamsTest, StagesHoldTheirLayersAndTheTiedEmbedding) {
  ModelConfig cfg;
  ParamLayout first(cfg, ShardPlan{0, 1, 0, 2, true, false});
  ParamLayout last(cfg, ShardPlan{0, 1, 2, 4, false, true});
  EXPECT_NE(first.Find(kWteId), nullptr);
  EXPECT_NE(first.Find(kWpeId), nullptr);
  EXPECT_EQ(first.Find(LayerTensorId(2, LayerTensor::kLn1w)), nullptr);
  EXPECT_NE(last.Find(kWteId), nullptr);  // tied LM head
  EXPECT_EQ(last.Find(kWpeId), nullptr);
  EXPECT_NE(last.Find(GlobalTensorCount(cfg) - 1), nullptr);
  EXPECT_EQ(first.Find(GlobalTensorCount(cfg) - 1), nullptr);
  EXPECT_EQ(first.Find(-1), nullptr);
}

}  // namespace
}  // namespace loom::train
