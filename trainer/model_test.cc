// StageModel: a whole-model finite-difference check (float, tiny config),
// and the schedule-independence the pipeline parity tests rely on.
#include "trainer/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "trainer/data.h"

namespace loom::train {
namespace {

constexpr ModelConfig kTiny{.vocab = 12, .channels = 8, .heads = 2, .layers = 2, .seq = 5};
constexpr int kB = 2;

struct Fixture {
  ParamLayout layout{kTiny, ShardPlan{0, 1, 0, kTiny.layers, true, true}};
  std::vector<float> params = std::vector<float>(layout.size());
  std::vector<int> tokens = std::vector<int>(2 * kB * kTiny.seq);
  std::vector<int> targets = std::vector<int>(2 * kB * kTiny.seq);
  Fixture() {
    layout.Init(params.data(), 3);
    // Larger weights than GPT-2's init make the gradients easy to see.
    for (float& p : params) p *= 5.0f;
    DataSource(DataConfig{Task::kMarkov, 9, 12, 3}, kTiny.seq)
        .Batch(0, 0, 2 * kB, tokens.data(), targets.data());
  }
};

TEST(ModelTest, GradientsMatchFiniteDifferencesForEveryTensor) {
  Fixture f;
  StageModel model(f.layout, kB, 1, nullptr);
  const float scale = 1.0f / (kB * kTiny.seq);
  std::vector<float> grads(f.layout.size(), 0.0f);
  float loss = 0;
  ASSERT_TRUE(model.Forward(0, f.params.data(), f.tokens.data(), nullptr, f.targets.data(), &loss).ok());
  ASSERT_TRUE(model.Backward(0, f.params.data(), grads.data(), nullptr, scale, {}).ok());
  const Slot* wte = f.layout.Find(kWteId);
  for (size_t i = 0; i < wte->count; ++i) grads[wte->offset + i] += model.head_wte_grad()[i];
  auto eval = [&] {
    float l = 0;
    EXPECT_TRUE(model.Forward(0, f.params.data(), f.tokens.data(), nullptr, f.targets.data(), &l).ok());
    return static_cast<double>(l);
  };
  for (const Slot& s : f.layout.slots()) {
    // The largest gradient of each tensor and a few others.
    size_t big = s.offset;
    for (size_t i = s.offset; i < s.offset + s.count; ++i) {
      if (std::fabs(grads[i]) > std::fabs(grads[big])) big = i;
    }
    for (size_t i : {big, s.offset, s.offset + s.count / 2, s.offset + s.count - 1}) {
      const float saved = f.params[i];
      const float h = 1e-2f;
      f.params[i] = saved + h;
      const double up = eval();
      f.params[i] = saved - h;
      const double down = eval();
      f.params[i] = saved;
      const double numeric = (up - down) / (2.0 * h);
      EXPECT_NEAR(grads[i], numeric, 2e-3 + 0.05 * std::fabs(numeric))
          << GlobalTensor(kTiny, s.global_id).name << " element " << i - s.offset;
    }
  }
}

// GPipe keeps several micro-batches in flight; gradients must not depend on it.
TEST(ModelTest, AllForwardsThenAllBackwardsEqualsInterleaved) {
  Fixture f;
  const int n = kB * kTiny.seq;
  const float scale = 1.0f / (2 * n);
  std::vector<float> g1(f.layout.size(), 0.0f), g2(f.layout.size(), 0.0f);
  float l0 = 0, l1 = 0, m0 = 0, m1 = 0;
  StageModel a(f.layout, kB, 1, nullptr);
  ASSERT_TRUE(a.Forward(0, f.params.data(), f.tokens.data(), nullptr, f.targets.data(), &l0).ok());
  ASSERT_TRUE(a.Backward(0, f.params.data(), g1.data(), nullptr, scale, {}).ok());
  ASSERT_TRUE(a.Forward(0, f.params.data(), f.tokens.data() + n, nullptr, f.targets.data() + n, &l1).ok());
  ASSERT_TRUE(a.Backward(0, f.params.data(), g1.data(), nullptr, scale, {}).ok());
  StageModel b(f.layout, kB, 2, nullptr);
  ASSERT_TRUE(b.Forward(0, f.params.data(), f.tokens.data(), nullptr, f.targets.data(), &m0).ok());
  ASSERT_TRUE(b.Forward(1, f.params.data(), f.tokens.data() + n, nullptr, f.targets.data() + n, &m1).ok());
  std::vector<int> ready;
  ASSERT_TRUE(b.Backward(0, f.params.data(), g2.data(), nullptr, scale, {}).ok());
  ASSERT_TRUE(b.Backward(1, f.params.data(), g2.data(), nullptr, scale,
                         [&](int id) { ready.push_back(id); }).ok());
  EXPECT_EQ(l0, m0);
  EXPECT_EQ(l1, m1);
  EXPECT_EQ(g1, g2);
  EXPECT_EQ(a.head_wte_grad(), b.head_wte_grad());
  // Every tensor but wte (finished by the caller) is reported exactly once.
  std::sort(ready.begin(), ready.end());
  std::vector<int> expect;
  for (int id = 1; id < GlobalTensorCount(kTiny); ++id) expect.push_back(id);
  EXPECT_EQ(ready, expect);
}

}  // namespace
}  // namespace loom::train
