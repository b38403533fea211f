// The training loop: builds this rank's stage of the model from the grid,
// runs steps (pipeline schedule, tied-embedding sum, DP/ZeRO sync, AdamW)
// and writes the per-step log and the loss/gradient files for comparison.
#pragma once

#include <memory>
#include <string>

#include "loom/loom.hpp"
#include "trainer/adamw.h"
#include "trainer/data.h"
#include "trainer/grad_sync.h"
#include "trainer/groups.h"
#include "trainer/params.h"
#include "trainer/pipeline.h"

namespace loom::train {

struct TrainOptions {
  ModelConfig model;
  DataConfig data;
  GridShape grid;
  SyncOptions sync;
  AdamWConfig adamw;
  Schedule schedule = Schedule::k1F1B;
  int steps = 20;
  int batch = 8;           // global batch, sequences
  int micro_batches = 1;   // per DP rank and step
  uint64_t seed = 42;      // weights
  // Single process only: emulate this many DP ranks and combine their
  // gradients as (g0 + g1 + ...) / n, the reference for bit-exact DP tests.
  int sim_dp = 1;
  bool drop_tp_backward = false;  // mutation: see StageModel
  std::string losses_path;        // JSON with per-step loss and timings (world rank 0)
  std::string grads_path;         // step-0 gradients, one file per rank: <path>.<rank>
  int expect_dp_ops = -1;         // fail unless each step issues exactly this many DP ops
  double learn_margin = -1;       // Markov task: fail unless the final loss <= entropy + margin
  // At the end, every rank prints one JSON line (schema loom-train-bytes/1):
  // per group the operations and bytes one step hands to loom, and the bytes
  // of parameters, gradients and optimizer state it allocated.
  bool report_bytes = false;
  bool quiet = false;
};

// Checks the options against each other and the model (divisibility).
Status Validate(const TrainOptions& options);

// Runs the whole training on this rank. world: the job's communicator, or
// null for a single process. Blocking; collective over the world.
Status Train(const TrainOptions& options, std::unique_ptr<Communicator> world);

}  // namespace loom::train
