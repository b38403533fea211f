// Pipeline schedules: GPipe (all forwards, then all backwards) and 1F1B
// (warm-up, one-forward-one-backward, cool-down), with grouped send/recv of
// activations and their gradients between neighbouring stages.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "trainer/groups.h"
#include "trainer/model.h"

namespace loom::train {

enum class Schedule { kGPipe, k1F1B };
Result<Schedule> ParseSchedule(const std::string& name);

// Runs one step's micro-batches through this rank's stage. Backward always
// takes micro-batches in order 0..M-1 so that gradients accumulate in the
// same order as on a single rank (bit-exact parity). Not thread-safe.
class PipelineRunner {
 public:
  // pp: the pipeline group (size 1 without PP). model must hold M slots;
  // tokens_per_micro_batch = B * T.
  PipelineRunner(StageModel& model, Group* pp, Schedule schedule, int micro_batches,
                 size_t tokens_per_micro_batch);

  // tokens/targets: (M, B, T) for this DP rank. loss_scale multiplies the
  // loss gradient. on_ready goes to the model's last backward (see
  // StageModel::Backward); on_last_backward runs right before it. *loss_sum
  // gets the sum of micro-batch losses on the last stage (0 elsewhere).
  Status Run(const float* params, float* grads, const int* tokens, const int* targets,
             float loss_scale, const std::function<void()>& on_last_backward,
             const std::function<void(int)>& on_ready, float* loss_sum);

 private:
  // One grouped exchange; -1 means "not this one". Sends/receives towards a
  // missing neighbour (first or last stage) are dropped.
  Status Transfer(int send_fwd, int recv_bwd, int send_bwd, int recv_fwd);

  StageModel& model_;
  Group* pp_;
  Schedule schedule_;
  int M_;
  size_t n_;  // floats per activation
  size_t tokens_per_mb_;
  std::vector<std::vector<float>> acts_in_;   // received activations, per micro-batch
  std::vector<std::vector<float>> grads_in_;  // received gradients, per micro-batch
};

}  // namespace loom::train
