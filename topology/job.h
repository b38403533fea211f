// The job-wide topology: which ranks share a host, what the links inside a
// host and between hosts cost, fused from the records every rank publishes
// at setup. A pure function of those records, so every rank computes the
// same JobTopology and the selector makes the same choice everywhere.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom::topology {

// An alpha-beta link: a fixed cost per message plus bytes / bandwidth.
struct LinkCost {
  double latency_us = 2.0;     // per message, software included
  double bandwidth_gbs = 5.0;  // GB/s per direction
  double peer_read_gbs = 0.0;  // single-copy reads of a peer's memory; 0 = unavailable
  // Fixed cost of one single-copy read (a system call that pins the peer's
  // pages); only large messages amortise it. Setup times it per host.
  double peer_read_setup_us = 20.0;
  bool operator==(const LinkCost&) const = default;
};

// What setup knows about one rank, identically on every rank: its host and
// the cost of the transports the (shared) transport plan gives its links.
struct RankRecord {
  std::string host_id;   // equal <=> same host (topology/host.h HostIdentity)
  std::string hostname;  // for logs
  double nic_gbs = 0;    // its network interface's speed in GB/s; 0 = unknown
  LinkCost intra;        // its links to ranks of its own host
  LinkCost inter;        // its links to other hosts, as the transport alone allows
};

// The fused job. Hosts are numbered in order of their lowest rank, ranks of
// a host in rank order. A value type; not synchronised (build once, read).
struct JobTopology {
  int nranks = 0;
  std::vector<std::string> host_names;       // per host
  std::vector<std::vector<int>> host_ranks;  // per host, ascending
  std::vector<int> host_of_rank;             // per rank
  std::vector<int> local_index;              // per rank: position in host_ranks[host]
  std::vector<double> host_nic_gbs;  // per host: slowest known NIC of its ranks; 0 = unknown
  // Between two ranks of one host: the slowest such link in the job.
  LinkCost intra;
  // From one host to the network, all its ranks together: the slowest
  // transport's latency, and the bottleneck of transport and NIC speed over
  // all hosts. Meaningless (but set) when there is one host.
  LinkCost inter;

  int hosts() const { return static_cast<int>(host_ranks.size()); }
  // Ranks per host when every host has the same number, else 0.
  int ranks_per_host() const;
  // One line for the INIT/TUNING log: "2 hosts x 2 ranks (h1: 0,1; h2: 2,3),
  // intra 1.0 us 6.0 GB/s, inter 20.0 us 1.2 GB/s (NIC 1.2 GB/s)".
  std::string Describe() const;

  // A job of `hosts` hosts with `per_host` consecutive ranks each: for
  // simulations and tests. hosts, per_host >= 1.
  static JobTopology Uniform(int hosts, int per_host, LinkCost intra, LinkCost inter);
};

// Fuses the per-rank records (index = rank). Intra: the worst latency and
// bandwidth over ranks that share a host with another rank (peer reads only
// if every such rank has them). Inter: the worst transport latency, and the
// lowest of the transports' bandwidth and each host's NIC speed (unknown
// speeds do not count), without peer reads. InvalidArgument for no records
// or a record without host_id (naming the rank). Pure; thread-safe.
Result<JobTopology> FuseJobTopology(std::span<const RankRecord> ranks);

}  // namespace loom::topology
