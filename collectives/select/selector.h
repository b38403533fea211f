// Algorithm selection as data: a CostModel built once per communicator from
// the job-wide topology gives each (collective, algorithm) a predicted time;
// the cheapest allowed one wins. Two strings change that:
//   NCCL_ALGO (LOOM_ALGO), NCCL's grammar, restricts the candidates:
//     "Ring,Tree", "^Tree", per collective "allreduce:tree,ring;broadcast:ring";
//   LOOM_TUNE, a table, names the algorithm per collective and size range:
//     "allreduce:0-64K=rd,64K-inf=ring;allgather:*=ring".
// Precedence: NCCL_ALGO > LOOM_TUNE > cost model. A LOOM_TUNE entry that
// NCCL_ALGO excludes, or that cannot run in this job, is ignored (the model
// decides among what NCCL_ALGO allows) and the Choice says why.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/algos/algorithms.h"
#include "topology/job.h"

namespace loom {

using LinkModel = topology::LinkCost;

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

// LOOM_TUNE: per collective, size ranges [lo, hi) of bytes (as the TUNING
// log counts them: the whole buffer for AllReduce/Broadcast/Reduce, one
// block for ReduceScatter/AllGather) mapped to an algorithm. Grammar in
// docs/ENVIRONMENT.md. A value type; immutable after Parse, thread-safe.
class TuneTable {
 public:
  // Strict: an unknown collective or algorithm, an algorithm the collective
  // does not implement, a malformed or empty range, or ranges of one
  // collective that overlap are an InvalidArgument quoting the bad token.
  static Result<TuneTable> Parse(std::string_view spec);
  // The algorithm named for `kind` at `bytes`, or Algo::kAuto if none.
  Algo Lookup(OpKind kind, size_t bytes) const;
  bool empty() const { return rules_.empty(); }

 private:
  struct Rule {
    OpKind kind;
    uint64_t lo, hi;  // [lo, hi); hi = UINT64_MAX for "inf"
    Algo algo;
  };
  std::vector<Rule> rules_;
};

// Predicted times for one communicator's job. Built once at setup (it walks
// every rank's schedule: O(n log n)); then PredictUs is a few multiply-adds.
// Immutable after construction; thread-safe.
class CostModel {
 public:
  CostModel();  // a job of one rank: every prediction is free
  // `reduce_gbs`: how fast this rank reduces what arrives (two inputs, one
  // output), when the reductions run on the CPU; 0 leaves that work out
  // (reductions as fast as the links, e.g. on GPUs). `small_slots`: a
  // one-host job's ranks have the small-collective slots (Algo::kSlots).
  explicit CostModel(const topology::JobTopology& job, double reduce_gbs = 0.0,
                     bool small_slots = false);

  // Predicted time of `algo` for `bytes` (see TuneTable for what bytes
  // counts); +infinity when the algorithm cannot run in this job (Direct
  // without single-copy reads on one host, Hierarchical without several
  // hosts of several ranks each, Slots without the slots or for more than
  // they hold, an algorithm the collective lacks).
  double PredictUs(OpKind kind, Algo algo, size_t bytes) const;
  int nranks() const { return n_; }
  int hosts() const { return hosts_; }
  // Why Hierarchical cannot run here ("" when it can): for the TUNING log.
  const std::string& hierarchical_unavailable() const { return hier_unavailable_; }

 private:
  int n_ = 1;
  int hosts_ = 1;
  int per_host_ = 1;  // ranks on every host; 0 when uneven
  LinkModel intra_, inter_;
  LinkModel ring_;                      // the slowest hop of the rank-order ring
  std::vector<LinkModel> rd_rounds_;    // recursive doubling, fold rounds included
  size_t rd_reducing_rounds_ = 0;       // of them, those that reduce (not the fold-out)
  double reduce_gbs_ = 0.0;             // 0: reductions not modelled
  bool small_slots_ = false;
  std::vector<LinkModel> tree_levels_;  // binomial tree rooted at 0, one per level
  std::string hier_unavailable_;
};

struct Choice {
  enum class Source : uint8_t {
    kModel,     // the cheapest algorithm NCCL_ALGO allows
    kTune,      // LOOM_TUNE's entry
    kFallback,  // NCCL_ALGO allows nothing that runs here: the model's pick
  };
  // Why a LOOM_TUNE entry for this call was not used.
  enum class TuneIgnored : uint8_t { kNo, kExcludedByAlgo, kUnusable };
  Algo algo = Algo::kRing;
  double predicted_us = 0;
  Source source = Source::kModel;
  TuneIgnored tune_ignored = TuneIgnored::kNo;
  Algo tuned = Algo::kAuto;  // what LOOM_TUNE named, if anything
  // Ask first whether every rank's buffers are shareable, and run Direct if
  // so (RunDirectIfAllShared); else `algo`.
  bool direct_if_shared = false;
};

// The algorithms implemented for a collective, in preference order.
std::span<const Algo> CandidateAlgos(OpKind kind);
// Picks the algorithm for one call (precedence in the file comment): the
// only place that does, for the communicator and `loom topo` alike. Pure.
Choice SelectAlgo(OpKind kind, size_t bytes, const CostModel& model, const AlgoFilter& filter,
                  const TuneTable& tune);
// "Ring 120.0 us, RecursiveDoubling 21.0 us, Tree inf": every candidate's
// estimate, for the TUNING log.
std::string DescribeEstimates(OpKind kind, size_t bytes, const CostModel& model);
// The choices over sizes 1 B .. 4 GiB (powers of two) merged into ranges:
// "0-32K RecursiveDoubling, 32K-inf Hierarchical (tune)". For the INFO log
// at setup, so a user sees the whole table once instead of per call.
std::string SelectionSummary(OpKind kind, const CostModel& model, const AlgoFilter& filter,
                             const TuneTable& tune);
// Lower-case key used by both grammars: "allreduce", "reducescatter", ...
std::string CollectiveKey(OpKind kind);

}  // namespace loom
