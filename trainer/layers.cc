// Forward and backward kernels of the GPT's layers (contracts in layers.h).
// Inner loops run over contiguous, independent outputs so the compiler can
// vectorise them without reassociating any sum.
#include "trainer/layers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace loom::train {

template <class F>
void MatmulForward(F* out, const F* inp, const F* w, const F* bias, int N, int C, int OC) {
  // wT (C, OC): makes the inner loop run over outputs, not over a reduction.
  std::vector<F> wT(static_cast<size_t>(C) * OC);
  for (int o = 0; o < OC; ++o) {
    for (int i = 0; i < C; ++i) wT[static_cast<size_t>(i) * OC + o] = w[static_cast<size_t>(o) * C + i];
  }
  for (int n = 0; n < N; ++n) {
    F* orow = out + static_cast<size_t>(n) * OC;
    const F* irow = inp + static_cast<size_t>(n) * C;
    std::fill(orow, orow + OC, F(0));
    for (int i = 0; i < C; ++i) {
      const F a = irow[i];
      const F* wrow = wT.data() + static_cast<size_t>(i) * OC;
      for (int o = 0; o < OC; ++o) orow[o] += a * wrow[o];
    }
    if (bias != nullptr) {
      for (int o = 0; o < OC; ++o) orow[o] += bias[o];
    }
  }
}

template <class F>
void MatmulBackward(F* dinp, F* dw, F* dbias, const F* dout, const F* inp, const F* w, int N,
                    int C, int OC) {
  for (int n = 0; n < N; ++n) {
    const F* grow = dout + static_cast<size_t>(n) * OC;
    const F* irow = inp + static_cast<size_t>(n) * C;
    if (dinp != nullptr) {
      F* drow = dinp + static_cast<size_t>(n) * C;
      std::fill(drow, drow + C, F(0));
      for (int o = 0; o < OC; ++o) {
        const F g = grow[o];
        const F* wrow = w + static_cast<size_t>(o) * C;
        for (int i = 0; i < C; ++i) drow[i] += g * wrow[i];
      }
    }
    for (int o = 0; o < OC; ++o) {
      const F g = grow[o];
      F* dwrow = dw + static_cast<size_t>(o) * C;
      for (int i = 0; i < C; ++i) dwrow[i] += g * irow[i];
    }
    if (dbias != nullptr) {
      for (int o = 0; o < OC; ++o) dbias[o] += grow[o];
    }
  }
}

template <class F>
void AddBias(F* out, const F* bias, int N, int OC) {
  for (int n = 0; n < N; ++n) {
    F* orow = out + static_cast<size_t>(n) * OC;
    for (int o = 0; o < OC; ++o) orow[o] += bias[o];
  }
}

template <class F>
void LayerNormForward(F* out, F* mean, F* rstd, const F* inp, const F* w, const F* b, int N,
                      int C) {
  const F eps = F(1e-5);
  for (int n = 0; n < N; ++n) {
    const F* x = inp + static_cast<size_t>(n) * C;
    F m = 0;
    for (int i = 0; i < C; ++i) m += x[i];
    m = m / C;
    F v = 0;
    for (int i = 0; i < C; ++i) {
      const F d = x[i] - m;
      v += d * d;
    }
    v = v / C;
    const F s = F(1) / std::sqrt(v + eps);
    F* o = out + static_cast<size_t>(n) * C;
    for (int i = 0; i < C; ++i) o[i] = (x[i] - m) * s * w[i] + b[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <class F>
void LayerNormBackward(F* dinp, F* dw, F* db, const F* dout, const F* inp, const F* w,
                       const F* mean, const F* rstd, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const F* g = dout + static_cast<size_t>(n) * C;
    const F* x = inp + static_cast<size_t>(n) * C;
    F* dx = dinp + static_cast<size_t>(n) * C;
    const F m = mean[n];
    const F s = rstd[n];
    // Two reductions of the normalised-input gradient (see llm.c).
    F dnorm_mean = 0;
    F dnorm_norm_mean = 0;
    for (int i = 0; i < C; ++i) {
      const F norm = (x[i] - m) * s;
      const F dnorm = w[i] * g[i];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean = dnorm_mean / C;
    dnorm_norm_mean = dnorm_norm_mean / C;
    for (int i = 0; i < C; ++i) {
      const F norm = (x[i] - m) * s;
      const F dnorm = w[i] * g[i];
      db[i] += g[i];
      dw[i] += norm * g[i];
      dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

template <class F>
void AttentionForward(F* out, F* att, const F* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const F scale = F(1) / std::sqrt(F(hs));
  const size_t C3 = static_cast<size_t>(3) * C;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < NH; ++h) {
        const F* q = qkv + (static_cast<size_t>(b) * T + t) * C3 + h * hs;
        F* row = att + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        // Scores of positions 0..t, then a max-shifted softmax.
        F maxv = -std::numeric_limits<F>::infinity();
        for (int t2 = 0; t2 <= t; ++t2) {
          const F* k = qkv + (static_cast<size_t>(b) * T + t2) * C3 + C + h * hs;
          F dot = 0;
          for (int i = 0; i < hs; ++i) dot += q[i] * k[i];
          row[t2] = dot * scale;
          maxv = std::max(maxv, row[t2]);
        }
        F sum = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          row[t2] = std::exp(row[t2] - maxv);
          sum += row[t2];
        }
        const F inv = F(1) / sum;
        for (int t2 = 0; t2 < T; ++t2) row[t2] = t2 <= t ? row[t2] * inv : F(0);
        F* o = out + (static_cast<size_t>(b) * T + t) * C + h * hs;
        std::fill(o, o + hs, F(0));
        for (int t2 = 0; t2 <= t; ++t2) {
          const F* v = qkv + (static_cast<size_t>(b) * T + t2) * C3 + 2 * C + h * hs;
          const F a = row[t2];
          for (int i = 0; i < hs; ++i) o[i] += a * v[i];
        }
      }
    }
  }
}

template <class F>
void AttentionBackward(F* dqkv, const F* dout, const F* qkv, const F* att, int B, int T, int C,
                       int NH) {
  const int hs = C / NH;
  const F scale = F(1) / std::sqrt(F(hs));
  const size_t C3 = static_cast<size_t>(3) * C;
  std::fill(dqkv, dqkv + static_cast<size_t>(B) * T * C3, F(0));
  std::vector<F> datt(T);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < NH; ++h) {
        const F* row = att + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        const F* g = dout + (static_cast<size_t>(b) * T + t) * C + h * hs;
        const F* q = qkv + (static_cast<size_t>(b) * T + t) * C3 + h * hs;
        F* dq = dqkv + (static_cast<size_t>(b) * T + t) * C3 + h * hs;
        // Through the weighted sum of values.
        for (int t2 = 0; t2 <= t; ++t2) {
          const size_t base = (static_cast<size_t>(b) * T + t2) * C3 + h * hs;
          const F* v = qkv + base + 2 * C;
          F* dv = dqkv + base + 2 * C;
          F dot = 0;
          for (int i = 0; i < hs; ++i) dot += v[i] * g[i];
          datt[t2] = dot;
          for (int i = 0; i < hs; ++i) dv[i] += row[t2] * g[i];
        }
        // Through the softmax: dpre = att * (datt - sum(att * datt)).
        F s = 0;
        for (int t2 = 0; t2 <= t; ++t2) s += row[t2] * datt[t2];
        // Through the scaled dot products.
        for (int t2 = 0; t2 <= t; ++t2) {
          const size_t base = (static_cast<size_t>(b) * T + t2) * C3 + h * hs;
          const F* k = qkv + base + C;
          F* dk = dqkv + base + C;
          const F dpre = row[t2] * (datt[t2] - s) * scale;
          for (int i = 0; i < hs; ++i) dq[i] += dpre * k[i];
          for (int i = 0; i < hs; ++i) dk[i] += dpre * q[i];
        }
      }
    }
  }
}

namespace {
template <class F>
constexpr F kGeluScale = F(0.7978845608028654);  // sqrt(2 / pi)
}  // namespace

template <class F>
void GeluForward(F* out, const F* inp, int n) {
  for (int i = 0; i < n; ++i) {
    const F x = inp[i];
    const F cube = F(0.044715) * x * x * x;
    out[i] = F(0.5) * x * (F(1) + std::tanh(kGeluScale<F> * (x + cube)));
  }
}

template <class F>
void GeluBackward(F* dinp, const F* inp, const F* dout, int n) {
  for (int i = 0; i < n; ++i) {
    const F x = inp[i];
    const F cube = F(0.044715) * x * x * x;
    const F arg = kGeluScale<F> * (x + cube);
    const F th = std::tanh(arg);
    const F ch = std::cosh(arg);
    const F sech2 = F(1) / (ch * ch);
    const F local = F(0.5) * (F(1) + th) +
                    x * F(0.5) * sech2 * kGeluScale<F> * (F(1) + F(3) * F(0.044715) * x * x);
    dinp[i] = local * dout[i];
  }
}

template <class F>
void ResidualForward(F* out, const F* a, const F* b, int n) {
  for (int i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class F>
void EmbeddingForward(F* out, const int* tokens, const F* wte_local, int N, int C, int v0, int Vl) {
  for (int n = 0; n < N; ++n) {
    F* o = out + static_cast<size_t>(n) * C;
    const int local = tokens[n] - v0;
    if (local >= 0 && local < Vl) {
      std::copy_n(wte_local + static_cast<size_t>(local) * C, C, o);
    } else {
      std::fill(o, o + C, F(0));
    }
  }
}

template <class F>
void AddPositions(F* out, const F* wpe, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      F* o = out + (static_cast<size_t>(b) * T + t) * C;
      const F* p = wpe + static_cast<size_t>(t) * C;
      for (int i = 0; i < C; ++i) o[i] += p[i];
    }
  }
}

template <class F>
void EmbeddingBackward(F* dwte_local, F* dwpe, const F* dout, const int* tokens, int B, int T,
                       int C, int v0, int Vl) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const size_t n = static_cast<size_t>(b) * T + t;
      const F* g = dout + n * C;
      const int local = tokens[n] - v0;
      if (local >= 0 && local < Vl) {
        F* d = dwte_local + static_cast<size_t>(local) * C;
        for (int i = 0; i < C; ++i) d[i] += g[i];
      }
      if (dwpe != nullptr) {
        F* d = dwpe + static_cast<size_t>(t) * C;
        for (int i = 0; i < C; ++i) d[i] += g[i];
      }
    }
  }
}

template <class F>
void CrossEntropyRowMax(F* maxv, const F* logits, int N, int Vl) {
  for (int n = 0; n < N; ++n) {
    const F* l = logits + static_cast<size_t>(n) * Vl;
    F m = -std::numeric_limits<F>::infinity();
    for (int v = 0; v < Vl; ++v) m = std::max(m, l[v]);
    maxv[n] = m;
  }
}

template <class F>
void CrossEntropyPartials(F* sums, const F* logits, const F* maxv, const int* targets, int N,
                          int Vl, int v0) {
  for (int n = 0; n < N; ++n) {
    const F* l = logits + static_cast<size_t>(n) * Vl;
    F s = 0;
    for (int v = 0; v < Vl; ++v) s += std::exp(l[v] - maxv[n]);
    sums[n] = s;
    const int local = targets[n] - v0;
    sums[N + n] = (local >= 0 && local < Vl) ? l[local] : F(0);
  }
}

template <class F>
void CrossEntropyFinish(F* losses, F* probs, const F* logits, const F* maxv, const F* sums, int N,
                        int Vl) {
  for (int n = 0; n < N; ++n) {
    const F* l = logits + static_cast<size_t>(n) * Vl;
    F* p = probs + static_cast<size_t>(n) * Vl;
    const F inv = F(1) / sums[n];
    for (int v = 0; v < Vl; ++v) p[v] = std::exp(l[v] - maxv[n]) * inv;
    losses[n] = std::log(sums[n]) - (sums[N + n] - maxv[n]);
  }
}

template <class F>
void CrossEntropyBackward(F* dlogits, const F* probs, const int* targets, F scale, int N, int Vl,
                          int v0) {
  for (int n = 0; n < N; ++n) {
    const F* p = probs + static_cast<size_t>(n) * Vl;
    F* d = dlogits + static_cast<size_t>(n) * Vl;
    const int local = targets[n] - v0;
    for (int v = 0; v < Vl; ++v) d[v] = (p[v] - (v == local ? F(1) : F(0))) * scale;
  }
}

#define LOOM_TRAIN_INSTANTIATE(F)                                                                \
  template void MatmulForward<F>(F*, const F*, const F*, const F*, int, int, int);              \
  template void MatmulBackward<F>(F*, F*, F*, const F*, const F*, const F*, int, int, int);     \
  template void AddBias<F>(F*, const F*, int, int);                                              \
  template void LayerNormForward<F>(F*, F*, F*, const F*, const F*, const F*, int, int);        \
  template void LayerNormBackward<F>(F*, F*, F*, const F*, const F*, const F*, const F*,        \
                                     const F*, int, int);                                        \
  template void AttentionForward<F>(F*, F*, const F*, int, int, int, int);                      \
  template void AttentionBackward<F>(F*, const F*, const F*, const F*, int, int, int, int);     \
  template void GeluForward<F>(F*, const F*, int);                                               \
  template void GeluBackward<F>(F*, const F*, const F*, int);                                    \
  template void ResidualForward<F>(F*, const F*, const F*, int);                                 \
  template void EmbeddingForward<F>(F*, const int*, const F*, int, int, int, int);              \
  template void AddPositions<F>(F*, const F*, int, int, int);                                    \
  template void EmbeddingBackward<F>(F*, F*, const F*, const int*, int, int, int, int, int);    \
  template void CrossEntropyRowMax<F>(F*, const F*, int, int);                                   \
  template void CrossEntropyPartials<F>(F*, const F*, const F*, const int*, int, int, int);     \
  template void CrossEntropyFinish<F>(F*, F*, const F*, const F*, const F*, int, int);          \
  template void CrossEntropyBackward<F>(F*, const F*, const int*, F, int, int, int);

LOOM_TRAIN_INSTANTIATE(float)
LOOM_TRAIN_INSTANTIATE(double)
#undef LOOM_TRAIN_INSTANTIATE

}  // namespace loom::train
