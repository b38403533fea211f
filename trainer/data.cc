// Seeded synthetic tasks (copy, Markov chain) and the Markov entropy rate.
#include "trainer/data.h"

#include <cmath>

#include "trainer/rng.h"

namespace loom::train {

Result<Task> ParseTask(const std::string& name) {
  if (name == "copy") return Task::kCopy;
  if (name == "markov") return Task::kMarkov;
  return InvalidArgument("unknown task '" + name + "' (copy, markov)");
}

MarkovChain::MarkovChain(uint64_t seed, int states, int branch)
    : states_(states), p_(static_cast<size_t>(states) * states, 0.0), pi_(states, 0.0) {
  for (int i = 0; i < states; ++i) {
    double* row = &p_[static_cast<size_t>(i) * states];
    row[(i + 1) % states] += 0.2;
    for (int k = 0; k < branch; ++k) {
      const int to = static_cast<int>(CounterHash(seed, 1, i, k) % static_cast<uint64_t>(states));
      row[to] += 0.1 + UniformAt(seed, 2, i, k);
    }
    double sum = 0;
    for (int j = 0; j < states; ++j) sum += row[j];
    for (int j = 0; j < states; ++j) row[j] /= sum;
  }
  // Lazy power iteration converges for any irreducible chain, periodic or not.
  for (int j = 0; j < states; ++j) pi_[j] = 1.0 / states;
  std::vector<double> next(states);
  for (int it = 0; it < 5000; ++it) {
    for (int j = 0; j < states; ++j) next[j] = 0.5 * pi_[j];
    for (int i = 0; i < states; ++i) {
      for (int j = 0; j < states; ++j) next[j] += 0.5 * pi_[i] * p_[static_cast<size_t>(i) * states + j];
    }
    pi_.swap(next);
  }
}

double MarkovChain::EntropyRate() const {
  double h = 0;
  for (int i = 0; i < states_; ++i) {
    for (int j = 0; j < states_; ++j) {
      const double p = p_[static_cast<size_t>(i) * states_ + j];
      if (p > 0) h -= pi_[i] * p * std::log(p);
    }
  }
  return h;
}

namespace {
// Inverse-CDF sample; the last index absorbs rounding.
int Sample(const double* probs, int n, double u) {
  double c = 0;
  for (int j = 0; j < n - 1; ++j) {
    c += probs[j];
    if (u < c) return j;
  }
  return n - 1;
}
}  // namespace

int MarkovChain::Next(int from, double u) const {
  return Sample(&p_[static_cast<size_t>(from) * states_], states_, u);
}

int MarkovChain::Initial(double u) const { return Sample(pi_.data(), states_, u); }

DataSource::DataSource(const DataConfig& cfg, int seq_len)
    : cfg_(cfg), T_(seq_len), chain_(cfg.seed ^ 0x6D61726B6F76ull, cfg.states, cfg.branch) {}

void DataSource::Batch(int64_t step, int first, int count, int* inputs, int* targets) const {
  std::vector<int> seq(T_ + 1);
  const uint64_t s = static_cast<uint64_t>(step);
  for (int k = 0; k < count; ++k) {
    const uint64_t id = static_cast<uint64_t>(first + k);
    if (cfg_.task == Task::kMarkov) {
      seq[0] = chain_.Initial(UniformAt(cfg_.seed, s, id, 0));
      for (int t = 1; t <= T_; ++t) seq[t] = chain_.Next(seq[t - 1], UniformAt(cfg_.seed, s, id, t));
    } else {
      const int half = (T_ + 2) / 2;
      for (int t = 0; t <= T_; ++t) {
        seq[t] = t < half ? static_cast<int>(CounterHash(cfg_.seed, s, id, t) % cfg_.states)
                          : seq[t - half];
      }
    }
    for (int t = 0; t < T_; ++t) {
      inputs[static_cast<size_t>(k) * T_ + t] = seq[t];
      targets[static_cast<size_t>(k) * T_ + t] = seq[t + 1];
    }
  }
}

}  // namespace loom::train
