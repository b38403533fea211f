// Algorithm selection as data: each (collective, algorithm) pair has a cost
// function of (bytes, ranks, link); the cheapest allowed one wins. NCCL_ALGO
// (LOOM_ALGO) restricts the choice with NCCL's grammar: "Ring,Tree",
// "^Tree", or per collective "allreduce:tree,ring;broadcast:ring".
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/algos/algorithms.h"

namespace loom {

struct LinkModel {
  double latency_us = 2.0;      // per message
  double bandwidth_gbs = 5.0;   // GB/s per link direction
  double peer_read_gbs = 0.0;   // single-copy reads of peer memory; 0 = unavailable
};

class AlgoFilter {
 public:
  // Parses NCCL_ALGO; an unknown algorithm name is an InvalidArgument naming it.
  static Result<AlgoFilter> Parse(std::string_view spec);
  bool Allows(OpKind kind, Algo algo) const;
  bool empty() const { return rules_.empty(); }

 private:
  struct Rule {
    std::string collective;  // "" = every collective
    bool exclude = false;
    std::vector<Algo> algos;
  };
  std::vector<Rule> rules_;
};

struct Choice {
  Algo algo = Algo::kRing;
  double predicted_us = 0;
  bool forced_fallback = false;  // the filter allowed nothing usable
};

// The algorithms implemented for a collective, in preference order.
std::span<const Algo> CandidateAlgos(OpKind kind);
// Predicted time of `algo` for `bytes` per rank on `nranks` ranks.
double PredictUs(OpKind kind, Algo algo, size_t bytes, int nranks, const LinkModel& link);
Choice SelectAlgo(OpKind kind, size_t bytes, int nranks, const LinkModel& link,
                  const AlgoFilter& filter);

}  // namespace loom
