// StageModel: the GPT block sequence of one pipeline stage on one TP rank.
#include "trainer/model.h"

#include <algorithm>

#include "trainer/layers.h"

namespace loom::train {

namespace {
using Vec = std::vector<float>;
}  // namespace

// Activations of one layer for one micro-batch (N = B*T rows).
struct LayerActs {
  Vec ln1, ln1_mean, ln1_rstd;  // (N, C), (N), (N)
  Vec qkv;                      // (N, 3Cl)
  Vec att;                      // (B, NHl, T, T)
  Vec atty;                     // (N, Cl)
  Vec res2;                     // (N, C)
  Vec ln2, ln2_mean, ln2_rstd;  // (N, C), (N), (N)
  Vec fch, fchg;                // (N, 4Cl)
  Vec res3;                     // (N, C), the layer's output
};

struct StageModel::Slot {
  std::vector<int> tokens, targets;  // (N) each
  Vec input;                         // (N, C): embedding output or received input
  std::vector<LayerActs> layers;
  Vec lnf, lnf_mean, lnf_rstd;  // (N, C), (N), (N)
  Vec logits, probs;            // (N, Vl)
  Vec maxv, sums, losses;       // (N), (2N), (N)
};

struct StageModel::Scratch {
  Vec tmp;           // (N, C) forward: row-parallel outputs before the residual
  Vec dres, dres2;   // (N, C) the residual stream's gradient
  Vec dln;           // (N, C)
  Vec dqkv;          // (N, 3Cl)
  Vec datty;         // (N, Cl)
  Vec dfch, dfchg;   // (N, 4Cl)
  Vec dlogits;       // (N, Vl)
};

StageModel::StageModel(const ParamLayout& layout, int micro_batch, int slots, TpCollectives* tp,
                       bool drop_tp_backward)
    : layout_(layout), tp_(tp), drop_tp_backward_(drop_tp_backward) {
  const ModelConfig& cfg = layout.config();
  const ShardPlan& plan = layout.plan();
  B_ = micro_batch;
  T_ = cfg.seq;
  C_ = cfg.channels;
  Cl_ = cfg.channels / plan.tp_size;
  NHl_ = cfg.heads / plan.tp_size;
  Vl_ = cfg.vocab / plan.tp_size;
  v0_ = plan.tp_rank * Vl_;
  const size_t N = static_cast<size_t>(B_) * T_;
  const size_t NC = N * C_;
  const int nlayers = plan.layer_end - plan.layer_begin;
  for (int i = 0; i < slots; ++i) {
    auto s = std::make_unique<Slot>();
    s->tokens.resize(N);
    s->targets.resize(N);
    s->input.resize(NC);
    s->layers.resize(nlayers);
    for (LayerActs& a : s->layers) {
      a.ln1.resize(NC), a.ln1_mean.resize(N), a.ln1_rstd.resize(N);
      a.qkv.resize(N * 3 * Cl_);
      a.att.resize(static_cast<size_t>(B_) * NHl_ * T_ * T_);
      a.atty.resize(N * Cl_);
      a.res2.resize(NC);
      a.ln2.resize(NC), a.ln2_mean.resize(N), a.ln2_rstd.resize(N);
      a.fch.resize(N * 4 * Cl_), a.fchg.resize(N * 4 * Cl_);
      a.res3.resize(NC);
    }
    if (plan.last_stage) {
      s->lnf.resize(NC), s->lnf_mean.resize(N), s->lnf_rstd.resize(N);
      s->logits.resize(N * Vl_), s->probs.resize(N * Vl_);
      s->maxv.resize(N), s->sums.resize(2 * N), s->losses.resize(N);
    }
    slots_.push_back(std::move(s));
  }
  scratch_ = std::make_unique<Scratch>();
  Scratch& k = *scratch_;
  k.tmp.resize(NC), k.dres.resize(NC), k.dres2.resize(NC), k.dln.resize(NC);
  k.dqkv.resize(N * 3 * Cl_), k.datty.resize(N * Cl_);
  k.dfch.resize(N * 4 * Cl_), k.dfchg.resize(N * 4 * Cl_);
  if (plan.last_stage) {
    k.dlogits.resize(N * Vl_);
    head_wte_grad_.assign(static_cast<size_t>(Vl_) * C_, 0.0f);
  }
}

StageModel::~StageModel() = default;

const float* StageModel::P(const float* base, int id) const {
  return base + layout_.Find(id)->offset;
}
float* StageModel::G(float* base, int id) const { return base + layout_.Find(id)->offset; }

size_t StageModel::activation_floats() const { return static_cast<size_t>(B_) * T_ * C_; }
std::vector<float>& StageModel::head_wte_grad() { return head_wte_grad_; }

const float* StageModel::Output(int slot) const {
  const Slot& s = *slots_[slot];
  return s.layers.empty() ? s.input.data() : s.layers.back().res3.data();
}
const float* StageModel::InputGrad() const { return scratch_->dres.data(); }

Status StageModel::LayerForward(Slot& s, int layer, const float* params, const float* in,
                                float* out) {
  LayerActs& a = s.layers[layer - layout_.plan().layer_begin];
  auto id = [layer](LayerTensor t) { return LayerTensorId(layer, t); };
  const int N = B_ * T_;
  float* tmp = scratch_->tmp.data();
  // LayerNorm -> QKV (column-parallel: this rank's heads) -> attention.
  LayerNormForward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), in,
                   P(params, id(LayerTensor::kLn1w)), P(params, id(LayerTensor::kLn1b)), N, C_);
  MatmulForward(a.qkv.data(), a.ln1.data(), P(params, id(LayerTensor::kQkvw)),
                P(params, id(LayerTensor::kQkvb)), N, C_, 3 * Cl_);
  AttentionForward(a.atty.data(), a.att.data(), a.qkv.data(), B_, T_, Cl_, NHl_);
  // Projection (row-parallel): partial sums, g = all-reduce, then the bias.
  MatmulForward<float>(tmp, a.atty.data(), P(params, id(LayerTensor::kAttProjw)), nullptr, N, Cl_,
                       C_);
  if (tp_ != nullptr) LOOM_TRY(tp_->AllReduceSum(tmp, static_cast<size_t>(N) * C_));
  AddBias(tmp, P(params, id(LayerTensor::kAttProjb)), N, C_);
  ResidualForward(a.res2.data(), in, tmp, N * C_);
  // LayerNorm -> FC (column-parallel) -> GELU -> projection (row-parallel).
  LayerNormForward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(),
                   P(params, id(LayerTensor::kLn2w)), P(params, id(LayerTensor::kLn2b)), N, C_);
  MatmulForward(a.fch.data(), a.ln2.data(), P(params, id(LayerTensor::kFcw)),
                P(params, id(LayerTensor::kFcb)), N, C_, 4 * Cl_);
  GeluForward(a.fchg.data(), a.fch.data(), N * 4 * Cl_);
  MatmulForward<float>(tmp, a.fchg.data(), P(params, id(LayerTensor::kFcProjw)), nullptr, N,
                       4 * Cl_, C_);
  if (tp_ != nullptr) LOOM_TRY(tp_->AllReduceSum(tmp, static_cast<size_t>(N) * C_));
  AddBias(tmp, P(params, id(LayerTensor::kFcProjb)), N, C_);
  ResidualForward(out, a.res2.data(), tmp, N * C_);
  return Status::Ok();
}

Status StageModel::Forward(int slot, const float* params, const int* tokens, const float* input,
                           const int* targets, float* loss) {
  Slot& s = *slots_[slot];
  const ShardPlan& plan = layout_.plan();
  const int N = B_ * T_;
  if (plan.first_stage) {
    // Vocabulary-parallel embedding: rows of other shards are zero until the
    // all-reduce; positions are replicated and added after it.
    std::copy_n(tokens, N, s.tokens.begin());
    EmbeddingForward(s.input.data(), tokens, P(params, kWteId), N, C_, v0_, Vl_);
    if (tp_ != nullptr) LOOM_TRY(tp_->AllReduceSum(s.input.data(), s.input.size()));
    AddPositions(s.input.data(), P(params, kWpeId), B_, T_, C_);
  } else {
    std::copy_n(input, s.input.size(), s.input.begin());
  }
  const float* x = s.input.data();
  for (int l = plan.layer_begin; l < plan.layer_end; ++l) {
    LayerActs& a = s.layers[l - plan.layer_begin];
    LOOM_TRY(LayerForward(s, l, params, x, a.res3.data()));
    x = a.res3.data();
  }
  if (!plan.last_stage) return Status::Ok();
  // Final LayerNorm, tied LM head (column-parallel over the vocabulary) and
  // vocabulary-parallel cross-entropy: MAX, then SUM of (sumexp, target).
  std::copy_n(targets, N, s.targets.begin());
  const int lnf = GlobalTensorCount(layout_.config()) - 2;
  LayerNormForward(s.lnf.data(), s.lnf_mean.data(), s.lnf_rstd.data(), x, P(params, lnf),
                   P(params, lnf + 1), N, C_);
  MatmulForward<float>(s.logits.data(), s.lnf.data(), P(params, kWteId), nullptr, N, C_, Vl_);
  CrossEntropyRowMax(s.maxv.data(), s.logits.data(), N, Vl_);
  if (tp_ != nullptr) LOOM_TRY(tp_->AllReduceMax(s.maxv.data(), s.maxv.size()));
  CrossEntropyPartials(s.sums.data(), s.logits.data(), s.maxv.data(), s.targets.data(), N, Vl_, v0_);
  if (tp_ != nullptr) LOOM_TRY(tp_->AllReduceSum(s.sums.data(), s.sums.size()));
  CrossEntropyFinish(s.losses.data(), s.probs.data(), s.logits.data(), s.maxv.data(),
                     s.sums.data(), N, Vl_);
  float sum = 0;
  for (float l : s.losses) sum += l;
  *loss = sum / static_cast<float>(N);
  return Status::Ok();
}

Status StageModel::LayerBackward(Slot& s, int layer, const float* params, float* grads,
                                 const float* in, const std::function<void(int)>& on_ready) {
  LayerActs& a = s.layers[layer - layout_.plan().layer_begin];
  Scratch& k = *scratch_;
  auto id = [layer](LayerTensor t) { return LayerTensorId(layer, t); };
  auto ready = [&](LayerTensor w, LayerTensor b) {
    if (on_ready) {
      on_ready(id(w));
      on_ready(id(b));
    }
  };
  const int N = B_ * T_;
  const size_t NC = static_cast<size_t>(N) * C_;
  // k.dres holds d(res3). Row-parallel FC projection: g's backward is the
  // identity, so the replicated dres feeds the local shard directly.
  MatmulBackward(k.dfchg.data(), G(grads, id(LayerTensor::kFcProjw)),
                 G(grads, id(LayerTensor::kFcProjb)), k.dres.data(), a.fchg.data(),
                 P(params, id(LayerTensor::kFcProjw)), N, 4 * Cl_, C_);
  ready(LayerTensor::kFcProjw, LayerTensor::kFcProjb);
  GeluBackward(k.dfch.data(), a.fch.data(), k.dfchg.data(), N * 4 * Cl_);
  MatmulBackward(k.dln.data(), G(grads, id(LayerTensor::kFcw)), G(grads, id(LayerTensor::kFcb)),
                 k.dfch.data(), a.ln2.data(), P(params, id(LayerTensor::kFcw)), N, C_, 4 * Cl_);
  ready(LayerTensor::kFcw, LayerTensor::kFcb);
  // f's backward: the column-parallel layer's input gradient is summed over TP.
  if (tp_ != nullptr) LOOM_TRY(tp_->AllReduceSum(k.dln.data(), NC));
  // d(res2) = d(res3) (residual) + LayerNorm-2 backward.
  std::copy_n(k.dres.data(), NC, k.dres2.data());
  LayerNormBackward(k.dres2.data(), G(grads, id(LayerTensor::kLn2w)),
                    G(grads, id(LayerTensor::kLn2b)), k.dln.data(), a.res2.data(),
                    P(params, id(LayerTensor::kLn2w)), a.ln2_mean.data(), a.ln2_rstd.data(), N, C_);
  ready(LayerTensor::kLn2w, LayerTensor::kLn2b);
  MatmulBackward(k.datty.data(), G(grads, id(LayerTensor::kAttProjw)),
                 G(grads, id(LayerTensor::kAttProjb)), k.dres2.data(), a.atty.data(),
                 P(params, id(LayerTensor::kAttProjw)), N, Cl_, C_);
  ready(LayerTensor::kAttProjw, LayerTensor::kAttProjb);
  AttentionBackward(k.dqkv.data(), k.datty.data(), a.qkv.data(), a.att.data(), B_, T_, Cl_, NHl_);
  MatmulBackward(k.dln.data(), G(grads, id(LayerTensor::kQkvw)), G(grads, id(LayerTensor::kQkvb)),
                 k.dqkv.data(), a.ln1.data(), P(params, id(LayerTensor::kQkvw)), N, C_, 3 * Cl_);
  ready(LayerTensor::kQkvw, LayerTensor::kQkvb);
  if (tp_ != nullptr && !drop_tp_backward_) LOOM_TRY(tp_->AllReduceSum(k.dln.data(), NC));
  // d(layer input) = d(res2) + LayerNorm-1 backward; lands in k.dres.
  std::copy_n(k.dres2.data(), NC, k.dres.data());
  LayerNormBackward(k.dres.data(), G(grads, id(LayerTensor::kLn1w)),
                    G(grads, id(LayerTensor::kLn1b)), k.dln.data(), in,
                    P(params, id(LayerTensor::kLn1w)), a.ln1_mean.data(), a.ln1_rstd.data(), N, C_);
  ready(LayerTensor::kLn1w, LayerTensor::kLn1b);
  return Status::Ok();
}

Status StageModel::Backward(int slot, const float* params, float* grads, const float* dout,
                            float loss_scale, const std::function<void(int)>& on_ready) {
  Slot& s = *slots_[slot];
  Scratch& k = *scratch_;
  const ShardPlan& plan = layout_.plan();
  const int N = B_ * T_;
  const size_t NC = static_cast<size_t>(N) * C_;
  if (plan.last_stage) {
    const int lnf = GlobalTensorCount(layout_.config()) - 2;
    CrossEntropyBackward(k.dlogits.data(), s.probs.data(), s.targets.data(), loss_scale, N, Vl_,
                         v0_);
    MatmulBackward(k.dln.data(), head_wte_grad_.data(), static_cast<float*>(nullptr),
                   k.dlogits.data(), s.lnf.data(), P(params, kWteId), N, C_, Vl_);
    if (tp_ != nullptr) LOOM_TRY(tp_->AllReduceSum(k.dln.data(), NC));
    const float* x = s.layers.empty() ? s.input.data() : s.layers.back().res3.data();
    std::fill_n(k.dres.data(), NC, 0.0f);
    LayerNormBackward(k.dres.data(), G(grads, lnf), G(grads, lnf + 1), k.dln.data(), x,
                      P(params, lnf), s.lnf_mean.data(), s.lnf_rstd.data(), N, C_);
    if (on_ready) {
      on_ready(lnf);
      on_ready(lnf + 1);
    }
  } else {
    std::copy_n(dout, NC, k.dres.data());
  }
  for (int l = plan.layer_end - 1; l >= plan.layer_begin; --l) {
    const int li = l - plan.layer_begin;
    const float* in = li == 0 ? s.input.data() : s.layers[li - 1].res3.data();
    LOOM_TRY(LayerBackward(s, l, params, grads, in, on_ready));
  }
  if (plan.first_stage) {
    EmbeddingBackward(G(grads, kWteId), G(grads, kWpeId), k.dres.data(), s.tokens.data(), B_, T_,
                      C_, v0_, Vl_);
    if (on_ready) on_ready(kWpeId);
  }
  return Status::Ok();
}

}  // namespace loom::train
