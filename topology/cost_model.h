// A closed-form cost model of all-reduce algorithms on a job shape (hosts ×
// ranks per host, intra- and inter-host bandwidth and latency), used for
// `loom topo --simulate`, the selection table in docs/TOPOLOGY.md, and as
// the inputs the collective selector needs from the fused topology.
// Pure functions; no I/O.
#pragma once

#include <string_view>
#include <vector>

#include "topology/model.h"

namespace loom::topology {

// The job as the cost model sees it. Bandwidths are GB/s per direction.
struct JobShape {
  int hosts = 1;
  int ranks_per_host = 1;
  double intra_gbs = 10;     // per rank, between ranks of one host (NVLink, PCIe or shared memory)
  double intra_lat_us = 1;   // one step between ranks of one host
  double host_net_gbs = 1;   // per host: the NICs its ranks use, together
  double inter_lat_us = 5;   // one step between hosts
  int ranks() const { return hosts * ranks_per_host; }
};

enum class CostAlgo { kRing, kTree, kRecursiveDoubling, kHierarchical };
inline constexpr CostAlgo kAllCostAlgos[] = {CostAlgo::kRing, CostAlgo::kTree,
                                             CostAlgo::kRecursiveDoubling, CostAlgo::kHierarchical};
// "ring", "tree", "recdoubling", "hierarchical".
std::string_view Name(CostAlgo algo);

// Predicted microseconds for an all-reduce of `bytes` per rank (formulas in
// docs/TOPOLOGY.md). 0 ranks or 0 bytes cost nothing; one rank costs nothing.
double AllReduceUs(CostAlgo algo, double bytes, const JobShape& shape);

struct Estimate {
  CostAlgo algo;
  double us;
};
// Every algorithm's estimate, cheapest first (ties keep kAllCostAlgos order).
std::vector<Estimate> RankAllReduce(double bytes, const JobShape& shape);

// The shape of a job whose hosts all look like `host`, with `ranks_per_host`
// ranks each (one per GPU when it has GPUs): intra bandwidth is the slowest
// path between two of the first `ranks_per_host` GPUs (shared memory, 10
// GB/s, on a CPU-only host); host bandwidth adds up the distinct NICs the
// GPUs would use (each GPU's closest, capped by its path), or the fastest
// NIC that is up on a CPU-only host; latencies follow the path and link
// types (NVLink 1 µs, PCIe 2 µs, shared memory 1.5 µs; RDMA 5 µs, sockets
// 20 µs). `host` must be valid.
JobShape ShapeFor(const Topology& host, int hosts, int ranks_per_host);

}  // namespace loom::topology
