// Finite-difference gradient checks for every layer, run in double so the
// tolerance can be tight, plus the layout-independence properties the
// bit-exact parity tests rely on.
#include "trainer/layers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace loom::train {
namespace {

using Vec = std::vector<double>;

Vec Random(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, scale);
  Vec v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares `analytic` with central differences of `loss` with respect to x.
void ExpectGradient(const std::function<double()>& loss, Vec& x, const Vec& analytic,
                    const char* what) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const double h = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic[i], numeric, 1e-6 * (1.0 + std::fabs(numeric))) << what << "[" << i << "]";
  }
}

TEST(LayersTest, MatmulGradients) {
  const int N = 5, C = 7, OC = 3;
  Vec inp = Random(N * C, 1), w = Random(OC * C, 2), bias = Random(OC, 3), r = Random(N * OC, 4);
  auto loss = [&] {
    Vec out(N * OC);
    MatmulForward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    return Dot(out, r);
  };
  Vec dinp(N * C, 99.0), dw(OC * C, 0.0), db(OC, 0.0);  // dinp is overwritten
  MatmulBackward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), N, C, OC);
  ExpectGradient(loss, inp, dinp, "dinp");
  ExpectGradient(loss, w, dw, "dw");
  ExpectGradient(loss, bias, db, "dbias");
}

TEST(LayersTest, MatmulAccumulatesWeightGradients) {
  const int N = 2, C = 3, OC = 2;
  Vec inp = Random(N * C, 5), w = Random(OC * C, 6), g = Random(N * OC, 7);
  Vec once(OC * C, 0.0), twice(OC * C, 0.0), db(OC, 0.0);
  MatmulBackward<double>(nullptr, once.data(), nullptr, g.data(), inp.data(), w.data(), N, C, OC);
  MatmulBackward<double>(nullptr, twice.data(), db.data(), g.data(), inp.data(), w.data(), N, C, OC);
  MatmulBackward<double>(nullptr, twice.data(), db.data(), g.data(), inp.data(), w.data(), N, C, OC);
  for (int i = 0; i < OC * C; ++i) EXPECT_DOUBLE_EQ(twice[i], 2 * once[i]);
}

TEST(LayersTest, AddBiasMatchesFusedBias) {
  const int N = 3, C = 4, OC = 5;
  Vec inp = Random(N * C, 8), w = Random(OC * C, 9), bias = Random(OC, 10);
  Vec fused(N * OC), split(N * OC);
  MatmulForward(fused.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  MatmulForward<double>(split.data(), inp.data(), w.data(), nullptr, N, C, OC);
  AddBias(split.data(), bias.data(), N, OC);
  EXPECT_EQ(fused, split);  // bit-identical: the row-parallel path equals the plain one at TP=1
}

TEST(LayersTest, LayerNormGradients) {
  const int N = 4, C = 6;
  Vec inp = Random(N * C, 11), w = Random(C, 12), b = Random(C, 13), r = Random(N * C, 14);
  Vec mean(N), rstd(N);
  auto loss = [&] {
    Vec out(N * C);
    LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return Dot(out, r);
  };
  loss();
  Vec dinp(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  LayerNormBackward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), mean.data(),
                    rstd.data(), N, C);
  ExpectGradient(loss, inp, dinp, "dinp");
  ExpectGradient(loss, w, dw, "dw");
  ExpectGradient(loss, b, db, "db");
}

TEST(LayersTest, AttentionGradients) {
  for (int T : {1, 4}) {
    const int B = 2, C = 6, NH = 2;
    Vec qkv = Random(B * T * 3 * C, 15), r = Random(B * T * C, 16);
    Vec att(B * NH * T * T);
    auto loss = [&] {
      Vec out(B * T * C);
      AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
      return Dot(out, r);
    };
    loss();
    Vec dqkv(B * T * 3 * C, 7.0);  // overwritten
    AttentionBackward(dqkv.data(), r.data(), qkv.data(), att.data(), B, T, C, NH);
    ExpectGradient(loss, qkv, dqkv, "dqkv");
  }
}

TEST(LayersTest, AttentionIsCausal) {
  const int B = 1, T = 3, C = 4, NH = 1;
  Vec qkv = Random(B * T * 3 * C, 17), att(T * T), out1(T * C), out2(T * C);
  AttentionForward(out1.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int i = 0; i < 3 * C; ++i) qkv[2 * 3 * C + i] += 1.0;  // change the last position only
  AttentionForward(out2.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int i = 0; i < 2 * C; ++i) EXPECT_EQ(out1[i], out2[i]);
  EXPECT_EQ(att[0 * T + 1], 0.0);
  EXPECT_EQ(att[0 * T + 0], 1.0);
}

TEST(LayersTest, GeluGradients) {
  const int n = 9;
  Vec inp = Random(n, 18, 2.0), r = Random(n, 19);
  auto loss = [&] {
    Vec out(n);
    GeluForward(out.data(), inp.data(), n);
    return Dot(out, r);
  };
  Vec dinp(n);
  GeluBackward(dinp.data(), inp.data(), r.data(), n);
  ExpectGradient(loss, inp, dinp, "dinp");
}

TEST(LayersTest, EmbeddingGradientsOnAShard) {
  const int B = 2, T = 3, C = 4, v0 = 2, Vl = 3;  // of a vocabulary of 6, tokens 2..4
  const std::vector<int> tokens = {0, 2, 4, 5, 3, 3};
  Vec wte = Random(Vl * C, 20), wpe = Random(T * C, 21), r = Random(B * T * C, 22);
  auto loss = [&] {
    Vec out(B * T * C);
    EmbeddingForward(out.data(), tokens.data(), wte.data(), B * T, C, v0, Vl);
    AddPositions(out.data(), wpe.data(), B, T, C);
    return Dot(out, r);
  };
  Vec dwte(Vl * C, 0.0), dwpe(T * C, 0.0);
  EmbeddingBackward(dwte.data(), dwpe.data(), r.data(), tokens.data(), B, T, C, v0, Vl);
  ExpectGradient(loss, wte, dwte, "dwte");
  ExpectGradient(loss, wpe, dwpe, "dwpe");
}

// Runs the three cross-entropy phases over `shards` vocabulary shards,
// standing in for the all-reduces (MAX, then SUM) between them.
Vec ShardedLosses(const Vec& logits, const std::vector<int>& targets, int N, int V, int shards,
                  Vec* probs) {
  const int Vl = V / shards;
  std::vector<Vec> local(shards, Vec(N * Vl));
  for (int s = 0; s < shards; ++s) {
    for (int n = 0; n < N; ++n) {
      for (int v = 0; v < Vl; ++v) local[s][n * Vl + v] = logits[n * V + s * Vl + v];
    }
  }
  Vec maxv(N, -INFINITY), sums(2 * N, 0.0);
  for (int s = 0; s < shards; ++s) {
    Vec m(N);
    CrossEntropyRowMax(m.data(), local[s].data(), N, Vl);
    for (int n = 0; n < N; ++n) maxv[n] = std::max(maxv[n], m[n]);
  }
  for (int s = 0; s < shards; ++s) {
    Vec part(2 * N);
    CrossEntropyPartials(part.data(), local[s].data(), maxv.data(), targets.data(), N, Vl, s * Vl);
    for (int i = 0; i < 2 * N; ++i) sums[i] += part[i];
  }
  Vec losses(N);
  probs->assign(N * V, 0.0);
  for (int s = 0; s < shards; ++s) {
    Vec p(N * Vl);
    CrossEntropyFinish(losses.data(), p.data(), local[s].data(), maxv.data(), sums.data(), N, Vl);
    for (int n = 0; n < N; ++n) {
      for (int v = 0; v < Vl; ++v) (*probs)[n * V + s * Vl + v] = p[n * Vl + v];
    }
  }
  return losses;
}

TEST(LayersTest, CrossEntropyGradients) {
  const int N = 4, V = 6;
  const std::vector<int> targets = {0, 5, 3, 3};
  Vec logits = Random(N * V, 23, 3.0), probs;
  const double scale = 0.25;
  auto loss = [&] {
    Vec p;
    Vec l = ShardedLosses(logits, targets, N, V, 1, &p);
    double s = 0;
    for (double x : l) s += x * scale;
    return s;
  };
  ShardedLosses(logits, targets, N, V, 1, &probs);
  Vec dlogits(N * V);
  CrossEntropyBackward(dlogits.data(), probs.data(), targets.data(), scale, N, V, 0);
  ExpectGradient(loss, logits, dlogits, "dlogits");
}

TEST(LayersTest, CrossEntropyShardsAgreeWithWholeVocabulary) {
  const int N = 3, V = 8;
  const std::vector<int> targets = {7, 0, 4};
  Vec logits = Random(N * V, 24, 5.0), p1, p4;
  const Vec whole = ShardedLosses(logits, targets, N, V, 1, &p1);
  const Vec sharded = ShardedLosses(logits, targets, N, V, 4, &p4);
  for (int n = 0; n < N; ++n) EXPECT_NEAR(whole[n], sharded[n], 1e-12);
  for (int i = 0; i < N * V; ++i) EXPECT_NEAR(p1[i], p4[i], 1e-12);
}

// Rows are computed independently: the micro-batch split cannot change a bit.
TEST(LayersTest, FloatKernelsDoNotDependOnRowCount) {
  const int N = 6, C = 8, OC = 5;
  std::vector<float> inp(N * C), w(OC * C), bias(OC);
  std::mt19937 gen(25);
  std::normal_distribution<float> dist;
  for (float& x : inp) x = dist(gen);
  for (float& x : w) x = dist(gen);
  for (float& x : bias) x = dist(gen);
  std::vector<float> all(N * OC), part(OC);
  MatmulForward(all.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  for (int n = 0; n < N; ++n) {
    MatmulForward(part.data(), inp.data() + n * C, w.data(), bias.data(), 1, C, OC);
    for (int o = 0; o < OC; ++o) EXPECT_EQ(all[n * OC + o], part[o]);
  }
}

}  // namespace
}  // namespace loom::train
