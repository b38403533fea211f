// One pipeline stage of the GPT on one TP rank: forward and backward of a
// micro-batch, with the Megatron TP collectives as hooks.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "loom/status.hpp"
#include "trainer/params.h"

namespace loom::train {

// The collectives the model issues inside its TP group. In place, blocking;
// every TP rank issues them in the same order. With one TP rank the model
// does not call them at all.
class TpCollectives {
 public:
  virtual ~TpCollectives() = default;
  virtual Status AllReduceSum(float* buf, size_t n) = 0;
  virtual Status AllReduceMax(float* buf, size_t n) = 0;
};

// Holds activations for `slots` micro-batches in flight (GPipe needs all of
// them, 1F1B at most the pipeline depth) and the scratch of one backward.
// Parameters and gradients are the caller's flat buffers laid out by
// `layout`. Not thread-safe; one instance per rank.
class StageModel {
 public:
  // micro_batch: sequences per micro-batch (B). tp may be null when
  // layout.plan().tp_size == 1. drop_tp_backward is a mutation for the test
  // suite: skip the f-operator all-reduce before the QKV layer's input.
  StageModel(const ParamLayout& layout, int micro_batch, int slots, TpCollectives* tp,
             bool drop_tp_backward = false);
  ~StageModel();

  // Forward of one micro-batch into `slot`. First stage: tokens (B, T);
  // other stages: input (B, T, C), the previous stage's output. Last stage:
  // targets (B, T) and *loss gets the micro-batch's mean loss.
  Status Forward(int slot, const float* params, const int* tokens, const float* input,
                 const int* targets, float* loss);
  // The residual stream leaving this stage (B, T, C); not on the last stage.
  const float* Output(int slot) const;

  // Backward of the micro-batch in `slot`. Last stage: the loss gradient is
  // scaled by loss_scale; other stages: dout (B, T, C) from the next stage.
  // Accumulates (+=) into grads (layout size), except that the tied LM
  // head's wte gradient goes to head_wte_grad() (see there). When on_ready is
  // set, it is called with a tensor's global id once its gradient is final
  // for this backward (never for wte: the caller finishes that one).
  Status Backward(int slot, const float* params, float* grads, const float* dout,
                  float loss_scale, const std::function<void(int)>& on_ready);
  // Gradient with respect to the stage input (B, T, C); not on the first stage.
  const float* InputGrad() const;
  // Last stage: the LM head's part of the wte gradient, accumulated over
  // micro-batches apart from the embedding's part so that the two are added
  // once, in the same way whether or not they live on the same rank.
  std::vector<float>& head_wte_grad();

  size_t activation_floats() const;  // (B, T, C), what crosses a stage boundary

 private:
  struct Slot;
  struct Scratch;
  Status LayerForward(Slot& s, int layer, const float* params, const float* in, float* out);
  Status LayerBackward(Slot& s, int layer, const float* params, float* grads, const float* in,
                       const std::function<void(int)>& on_ready);
  const float* P(const float* base, int id) const;
  float* G(float* base, int id) const;

  const ParamLayout& layout_;
  int B_, T_, C_, Cl_, NHl_, Vl_, v0_;
  TpCollectives* tp_;
  bool drop_tp_backward_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::unique_ptr<Scratch> scratch_;
  std::vector<float> head_wte_grad_;
};

}  // namespace loom::train
