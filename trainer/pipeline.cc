// GPipe and 1F1B as loops over (forward, backward, transfer) steps.
#include "trainer/pipeline.h"

#include <algorithm>

namespace loom::train {

Result<Schedule> ParseSchedule(const std::string& name) {
  if (name == "gpipe") return Schedule::kGPipe;
  if (name == "1f1b") return Schedule::k1F1B;
  return InvalidArgument("unknown schedule '" + name + "' (gpipe, 1f1b)");
}

PipelineRunner::PipelineRunner(StageModel& model, Group* pp, Schedule schedule, int micro_batches,
                               size_t tokens_per_micro_batch)
    : model_(model),
      pp_(pp),
      schedule_(schedule),
      M_(micro_batches),
      n_(model.activation_floats()),
      tokens_per_mb_(tokens_per_micro_batch) {
  acts_in_.assign(M_, std::vector<float>(pp->rank() > 0 ? n_ : 0));
  grads_in_.assign(M_, std::vector<float>(pp->rank() < pp->size() - 1 ? n_ : 0));
}

Status PipelineRunner::Transfer(int send_fwd, int recv_bwd, int send_bwd, int recv_fwd) {
  const int s = pp_->rank();
  const bool first = s == 0;
  const bool last = s == pp_->size() - 1;
  if (last) send_fwd = recv_bwd = -1;
  if (first) send_bwd = recv_fwd = -1;
  // Pair a: with the next stage; pair b: with the previous stage.
  return pp_->Exchange(send_fwd >= 0 ? model_.Output(send_fwd) : nullptr, n_,
                       send_fwd >= 0 ? s + 1 : -1,
                       recv_bwd >= 0 ? grads_in_[recv_bwd].data() : nullptr, n_,
                       recv_bwd >= 0 ? s + 1 : -1,
                       send_bwd >= 0 ? model_.InputGrad() : nullptr, n_,
                       send_bwd >= 0 ? s - 1 : -1,
                       recv_fwd >= 0 ? acts_in_[recv_fwd].data() : nullptr, n_,
                       recv_fwd >= 0 ? s - 1 : -1);
}

Status PipelineRunner::Run(const float* params, float* grads, const int* tokens,
                           const int* targets, float loss_scale,
                           const std::function<void()>& on_last_backward,
                           const std::function<void(int)>& on_ready, float* loss_sum) {
  const int s = pp_->rank();
  const int P = pp_->size();
  const bool first = s == 0;
  const bool last = s == P - 1;
  *loss_sum = 0;
  auto fwd = [&](int m) -> Status {
    const size_t off = static_cast<size_t>(m) * tokens_per_mb_;
    float loss = 0;
    LOOM_TRY(model_.Forward(m, params, tokens + off, first ? nullptr : acts_in_[m].data(),
                            targets + off, &loss));
    if (last) *loss_sum += loss;
    return Status::Ok();
  };
  auto bwd = [&](int m) -> Status {
    const bool final_mb = m == M_ - 1;
    if (final_mb && on_last_backward) on_last_backward();
    return model_.Backward(m, params, grads, last ? nullptr : grads_in_[m].data(), loss_scale,
                           final_mb ? on_ready : std::function<void(int)>());
  };
  if (schedule_ == Schedule::kGPipe) {
    for (int m = 0; m < M_; ++m) {
      LOOM_TRY(Transfer(-1, -1, -1, m));
      LOOM_TRY(fwd(m));
      LOOM_TRY(Transfer(m, -1, -1, -1));
    }
    for (int m = 0; m < M_; ++m) {
      LOOM_TRY(Transfer(-1, m, -1, -1));
      LOOM_TRY(bwd(m));
      LOOM_TRY(Transfer(-1, -1, m, -1));
    }
    return Status::Ok();
  }
  // 1F1B: stage s runs P-s-1 forwards ahead, then alternates; each exchange
  // pairs with the neighbour's mirror-image exchange.
  const int warm = std::min(P - s - 1, M_);
  const int steady = M_ - warm;
  for (int i = 0; i < warm; ++i) {
    LOOM_TRY(Transfer(-1, -1, -1, i));
    LOOM_TRY(fwd(i));
    LOOM_TRY(Transfer(i, -1, -1, -1));
  }
  if (steady > 0) LOOM_TRY(Transfer(-1, -1, -1, warm));
  for (int i = 0; i < steady; ++i) {
    LOOM_TRY(fwd(warm + i));
    LOOM_TRY(Transfer(warm + i, i, -1, -1));
    LOOM_TRY(bwd(i));
    LOOM_TRY(Transfer(-1, -1, i, i == steady - 1 ? -1 : warm + i + 1));
  }
  for (int i = steady; i < M_; ++i) {
    LOOM_TRY(Transfer(-1, i, -1, -1));
    LOOM_TRY(bwd(i));
    LOOM_TRY(Transfer(-1, -1, i, -1));
  }
  return Status::Ok();
}

}  // namespace loom::train
