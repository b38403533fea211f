// Hierarchical all-reduce for jobs of several hosts with several ranks each:
// ring reduce-scatter inside each host, ring all-reduce of each block among
// the ranks that hold it on every host, ring all-gather inside each host.
// The network then carries 2(h-1)/h of the buffer per host instead of the
// flat ring's 2(n-1)/n, and each inter-host step moves 1/p of it.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/algos/algorithms.h"
#include "collectives/patterns/ring.h"
#include "topology/job.h"

namespace loom {

// Whom one rank works with.
struct HierGroups {
  std::vector<int> local;  // the ranks of its host, ascending: the intra-host ring
  std::vector<int> cross;  // the ranks of its local index, one per host in host order
  int local_pos = 0;       // its position in `local` (= its local index)
  int cross_pos = 0;       // its position in `cross` (= its host index)
};

// The groups of `rank` in `job`. Every host must have the same number of
// ranks (job.ranks_per_host() > 0); with uneven hosts `cross` would differ
// between ranks of one block, so the caller falls back to a flat algorithm.
// Pure.
HierGroups MakeHierGroups(const topology::JobTopology& job, int rank);

// One ring step: send one element range to one peer and receive one from
// another. A step's send waits for the previous step's receive (which
// filled the block it forwards); phases run one after another.
struct HierStep {
  enum class Source : uint8_t { kInput, kOutput };
  enum class Land : uint8_t {
    kReduceWithInput,   // out[range] = op(in[range], incoming)
    kReduceWithOutput,  // out[range] = op(out[range], incoming)
    kCopy,              // out[range] = incoming
  };
  int send_peer;
  patterns::Range send;
  Source source;
  int recv_peer;
  patterns::Range recv;
  Land land;
};

// The schedule of one rank for `count` elements, as up to three phases
// (intra reduce-scatter, inter all-reduce, intra all-gather; a phase with
// one participant is left out). Blocks are patterns::BlockRange splits with
// boundaries at multiples of align_elems. Rank-local ranges index elements
// of the whole buffer. With one rank per host the caller first copies the
// input to the output (the inter phase works in place). Pure.
std::vector<std::vector<HierStep>> HierarchicalSchedule(const HierGroups& groups, size_t count,
                                                        size_t align_elems);

// Runs the all-reduce `args` (kind kAllReduce; any type, op, in or out of
// place) on `engine` for the rank whose `groups` these are. Every rank of the
// communicator must call it for the same call with groups from the same
// JobTopology. Blocks until done, an error, an abort, or `deadline`;
// results are bit-identical on every rank (each element is reduced by one
// rank and copied to the others).
Status HierarchicalAllReduce(Engine& engine, const HierGroups& groups, const CollArgs& args,
                             Deadline deadline);

}  // namespace loom
