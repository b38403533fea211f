// Synthetic data: slicing independence and the Markov entropy rate.
#include "trainer/data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace loom::train {
namespace {

TEST(DataTest, SlicesOfAGlobalBatchAreTheSameSequences) {
  for (Task task : {Task::kCopy, Task::kMarkov}) {
    DataSource src(DataConfig{task, 5, 16, 3}, 9);
    std::vector<int> in(8 * 9), tg(8 * 9), in2(3 * 9), tg2(3 * 9);
    src.Batch(3, 0, 8, in.data(), tg.data());
    src.Batch(3, 5, 3, in2.data(), tg2.data());
    for (int i = 0; i < 3 * 9; ++i) {
      EXPECT_EQ(in[5 * 9 + i], in2[i]);
      EXPECT_EQ(tg[5 * 9 + i], tg2[i]);
    }
    for (int t = 0; t + 1 < 9; ++t) EXPECT_EQ(tg[t], in[t + 1]);  // shifted by one
    src.Batch(4, 5, 3, in2.data(), tg2.data());
    EXPECT_NE(std::vector<int>(in.begin() + 45, in.end()), in2);  // another step, other data
  }
}

TEST(DataTest, CopyTaskRepeatsTheFirstHalf) {
  const int T = 10;
  DataSource src(DataConfig{Task::kCopy, 1, 16, 3}, T);
  std::vector<int> in(T), tg(T);
  src.Batch(0, 0, 1, in.data(), tg.data());
  std::vector<int> seq(in);
  seq.push_back(tg.back());
  for (int t = 6; t <= T; ++t) EXPECT_EQ(seq[t], seq[t - 6]);
  for (int x : seq) EXPECT_LT(x, 16);
}

TEST(DataTest, MarkovEntropyMatchesSampledTransitions) {
  MarkovChain chain(7, 8, 3);
  // Empirical conditional entropy from one long run.
  std::vector<double> count(64, 0.0);
  int s = chain.Initial(0.5);
  const int n = 400000;
  uint64_t x = 12345;
  for (int i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const int next = chain.Next(s, static_cast<double>(x >> 11) * 0x1.0p-53);
    count[s * 8 + next] += 1;
    s = next;
  }
  double h = 0;
  for (int i = 0; i < 8; ++i) {
    double row = 0;
    for (int j = 0; j < 8; ++j) row += count[i * 8 + j];
    for (int j = 0; j < 8; ++j) {
      if (count[i * 8 + j] > 0) h -= count[i * 8 + j] / n * std::log(count[i * 8 + j] / row);
    }
  }
  EXPECT_NEAR(h, chain.EntropyRate(), 0.01);
  EXPECT_GT(chain.EntropyRate(), 0.1);
  EXPECT_LT(chain.EntropyRate(), std::log(8.0));
}

TEST(DataTest, UnknownTaskIsAnError) {
  EXPECT_FALSE(ParseTask("bible").ok());
  EXPECT_TRUE(ParseTask("copy").ok());
}

}  // namespace
}  // namespace loom::train
