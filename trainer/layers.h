// The GPT's layers: one forward and one backward function each, on plain
// row-major arrays (shapes in the comments; N = B*T rows). Templated on the
// float type so the gradient check can run them in double.
//
// Determinism contract: each output element is computed by a fixed loop
// order that does not depend on how many rows or threads there are, so the
// same inputs give bit-identical outputs in every layout (with
// -ffp-contract=off). Backward functions ACCUMULATE (+=) into weight
// gradients (gradient accumulation over micro-batches) and into dinp where
// noted; "overwrites" means the buffer is written, not added to.
#pragma once

namespace loom::train {

// out (N, OC) = inp (N, C) @ w (OC, C)^T, then + bias (OC) when bias != null.
// Sums run over C in index order, then the bias is added.
template <class F>
void MatmulForward(F* out, const F* inp, const F* w, const F* bias, int N, int C, int OC);
// dinp (N, C) overwritten with dout @ w (skipped when dinp is null);
// dw (OC, C) += dout^T @ inp; dbias (OC) += column sums of dout (if not null).
template <class F>
void MatmulBackward(F* dinp, F* dw, F* dbias, const F* dout, const F* inp, const F* w, int N,
                    int C, int OC);
// out (N, OC) += bias (OC): the bias of a row-parallel layer, added after its
// all-reduce.
template <class F>
void AddBias(F* out, const F* bias, int N, int OC);

// out (N, C) = (inp - mean) * rstd * w + b; mean, rstd (N) saved for backward.
template <class F>
void LayerNormForward(F* out, F* mean, F* rstd, const F* inp, const F* w, const F* b, int N, int C);
// dinp (N, C) += ..., dw, db (C) += ...
template <class F>
void LayerNormBackward(F* dinp, F* dw, F* db, const F* dout, const F* inp, const F* w,
                       const F* mean, const F* rstd, int N, int C);

// Causal self-attention over NH heads of size hs = C/NH, where qkv (B, T, 3C)
// holds [q | k | v] with head h at columns h*hs. out (B, T, C); att
// (B, NH, T, T) saves the softmax (zero above the diagonal).
template <class F>
void AttentionForward(F* out, F* att, const F* qkv, int B, int T, int C, int NH);
// dqkv (B, T, 3C) overwritten.
template <class F>
void AttentionBackward(F* dqkv, const F* dout, const F* qkv, const F* att, int B, int T, int C,
                       int NH);

// GELU, tanh approximation, elementwise over n values.
template <class F>
void GeluForward(F* out, const F* inp, int n);
// dinp overwritten.
template <class F>
void GeluBackward(F* dinp, const F* inp, const F* dout, int n);

// out = a + b over n values (the residual connection; its backward passes
// dout to both inputs).
template <class F>
void ResidualForward(F* out, const F* a, const F* b, int n);

// Token embedding from a vocabulary shard: rows [v0, v0 + Vl) of wte live
// here as wte_local (Vl, C). out (N, C) = wte row of the token, or zeros when
// the token belongs to another shard (the all-reduce over shards fills it).
template <class F>
void EmbeddingForward(F* out, const int* tokens, const F* wte_local, int N, int C, int v0, int Vl);
// out (B, T, C) += wpe (T, C).
template <class F>
void AddPositions(F* out, const F* wpe, int B, int T, int C);
// dwte_local (Vl, C) += dout rows of local tokens; dwpe (T, C) += dout summed
// over the batch (skipped when dwpe is null).
template <class F>
void EmbeddingBackward(F* dwte_local, F* dwpe, const F* dout, const int* tokens, int B, int T,
                       int C, int v0, int Vl);

// Vocabulary-parallel softmax cross-entropy in three phases, with an
// all-reduce over the shards between them (MAX after the first, SUM after the
// second). logits (N, Vl) hold vocabulary columns [v0, v0 + Vl).
// 1. maxv (N) = row maxima of the local logits.
template <class F>
void CrossEntropyRowMax(F* maxv, const F* logits, int N, int Vl);
// 2. sums (2N): sums[n] = sum of exp(logit - maxv[n]) over the local columns,
//    sums[N + n] = the target's logit when it is local, else 0.
template <class F>
void CrossEntropyPartials(F* sums, const F* logits, const F* maxv, const int* targets, int N,
                          int Vl, int v0);
// 3. losses (N) = log(sumexp) + max - target logit; probs (N, Vl) = softmax.
template <class F>
void CrossEntropyFinish(F* losses, F* probs, const F* logits, const F* maxv, const F* sums, int N,
                        int Vl);
// dlogits (N, Vl) overwritten with (probs - onehot(target)) * scale.
template <class F>
void CrossEntropyBackward(F* dlogits, const F* probs, const int* targets, F scale, int N, int Vl,
                          int v0);

}  // namespace loom::train
