// Synthetic training data generated from a seed: nothing is downloaded, and
// every sequence is a pure function of (seed, step, sequence index), so any
// DP/micro-batch slicing of a global batch sees the same tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/status.hpp"

namespace loom::train {

enum class Task {
  kCopy,    // a random first half, then the same tokens again
  kMarkov,  // a seeded Markov chain whose entropy rate is known exactly
};
Result<Task> ParseTask(const std::string& name);

// A Markov chain over `states` tokens (0..states-1): each state moves to
// `branch` successors with random weights, plus state+1 mod states so the
// chain is irreducible. Immutable after construction.
class MarkovChain {
 public:
  MarkovChain(uint64_t seed, int states, int branch);
  int states() const { return states_; }
  // Entropy rate in nats: sum_i pi_i * H(P_i). Since the first token is
  // drawn from pi, this is also the best possible mean next-token loss.
  double EntropyRate() const;
  // Samples the state after `from` with u uniform in [0, 1).
  int Next(int from, double u) const;
  // Samples the stationary distribution with u uniform in [0, 1).
  int Initial(double u) const;

 private:
  int states_;
  std::vector<double> p_;   // (states, states) transition matrix
  std::vector<double> pi_;  // stationary distribution
};

struct DataConfig {
  Task task = Task::kMarkov;
  uint64_t seed = 1234;
  int states = 16;  // alphabet of the synthetic task (<= vocab)
  int branch = 3;   // Markov successors per state
};

// Generates sequences [first, first + count) of the global batch of `step`:
// inputs and targets, (count, T) each, targets shifted by one position.
class DataSource {
 public:
  DataSource(const DataConfig& cfg, int seq_len);
  void Batch(int64_t step, int first, int count, int* inputs, int* targets) const;
  const MarkovChain& chain() const { return chain_; }

 private:
  DataConfig cfg_;
  int T_;
  MarkovChain chain_;
};

}  // namespace loom::train
