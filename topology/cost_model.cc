// All-reduce cost formulas and the job shape derived from a host topology
// (cost_model.h).
#include "topology/cost_model.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "topology/paths.h"

namespace loom::topology {
namespace {

// A pipelined tree never streams quite as well as a ring: NCCL's own tuner
// scales tree bandwidth down by a similar factor.
constexpr double kTreeEfficiency = 0.85;
constexpr double kHostMemoryGbs = 10;

double Log2Ceil(int n) { return n <= 1 ? 0 : std::ceil(std::log2(static_cast<double>(n))); }

// GB/s → bytes per microsecond.
double BytesPerUs(double gbs) { return gbs * 1e3; }

double RingUs(double bytes, int n, int hosts, double lat_intra, double lat_inter, double bw) {
  // 2(n-1) steps; of the n hops around the ring, `hosts` cross a host
  // boundary when hosts > 1, so latency grows linearly with ranks.
  const double hops_inter = hosts > 1 ? hosts : 0;
  const double lat = 2.0 * (n - 1) * ((n - hops_inter) * lat_intra + hops_inter * lat_inter) / n;
  return lat + 2.0 * (n - 1) / n * bytes / BytesPerUs(bw);
}

double TreeUs(double bytes, int hosts, int per_host, double lat_intra, double lat_inter, double bw) {
  // Reduce up and broadcast down a chain inside each host and a (double)
  // binary tree between hosts: latency grows with log2(hosts).
  const double lat = 2.0 * ((per_host - 1) * lat_intra + Log2Ceil(hosts) * lat_inter);
  return lat + 2.0 * bytes / BytesPerUs(bw * kTreeEfficiency);
}

}  // namespace

std::string_view Name(CostAlgo algo) {
  switch (algo) {
    case CostAlgo::kRing: return "ring";
    case CostAlgo::kTree: return "tree";
    case CostAlgo::kRecursiveDoubling: return "recdoubling";
    case CostAlgo::kHierarchical: return "hierarchical";
  }
  return "?";
}

double AllReduceUs(CostAlgo algo, double bytes, const JobShape& s) {
  const int n = s.ranks();
  if (n <= 1 || bytes <= 0) return 0;
  const int h = s.hosts;
  const int p = s.ranks_per_host;
  // Per-rank share of the network when all local ranks talk at once, and
  // the bottleneck of a path that crosses both kinds of link.
  const double net_per_rank = s.host_net_gbs / p;
  const double flat_bw = h > 1 ? std::min(s.intra_gbs, s.host_net_gbs) : s.intra_gbs;
  switch (algo) {
    case CostAlgo::kRing:
      return RingUs(bytes, n, h, s.intra_lat_us, s.inter_lat_us, flat_bw);
    case CostAlgo::kTree:
      return TreeUs(bytes, h, p, s.intra_lat_us, s.inter_lat_us, flat_bw);
    case CostAlgo::kRecursiveDoubling: {
      // log2 rounds exchanging the whole buffer; a rank count that is not a
      // power of two costs two extra rounds (fold in, fan out).
      const double fold = (n & (n - 1)) != 0 ? 2 : 0;
      const double in = Log2Ceil(p);
      const double out = Log2Ceil(h);
      return (in + (h == 1 ? fold : 0)) * (s.intra_lat_us + bytes / BytesPerUs(s.intra_gbs)) +
             (out + (h > 1 ? fold : 0)) * (s.inter_lat_us + bytes / BytesPerUs(net_per_rank));
    }
    case CostAlgo::kHierarchical: {
      // Reduce-scatter inside the host, all-reduce of each 1/p slice across
      // hosts (p of them at once, sharing the NICs), all-gather inside.
      const double slice = bytes / p;
      const double intra =
          p > 1 ? 2.0 * ((p - 1) * s.intra_lat_us + (p - 1) * slice / BytesPerUs(s.intra_gbs)) : 0;
      double inter = 0;
      if (h > 1) {
        inter = std::min(RingUs(slice, h, h, s.inter_lat_us, s.inter_lat_us, net_per_rank),
                         TreeUs(slice, h, 1, 0, s.inter_lat_us, net_per_rank));
      }
      return intra + inter;
    }
  }
  return 0;
}

std::vector<Estimate> RankAllReduce(double bytes, const JobShape& shape) {
  std::vector<Estimate> out;
  for (CostAlgo a : kAllCostAlgos) out.push_back(Estimate{a, AllReduceUs(a, bytes, shape)});
  std::stable_sort(out.begin(), out.end(),
                   [](const Estimate& x, const Estimate& y) { return x.us < y.us; });
  return out;
}

JobShape ShapeFor(const Topology& host, int hosts, int ranks_per_host) {
  JobShape s;
  s.hosts = std::max(hosts, 1);
  s.ranks_per_host = std::max(ranks_per_host, 1);
  std::vector<int> gpus = host.OfKind(NodeKind::kGpu);
  if (gpus.size() > static_cast<size_t>(s.ranks_per_host)) gpus.resize(static_cast<size_t>(s.ranks_per_host));

  if (gpus.empty()) {
    s.intra_gbs = kHostMemoryGbs;
    s.intra_lat_us = 1.5;
  } else {
    s.intra_gbs = kLocalGbs;
    bool nvlink = true;
    for (size_t i = 0; i < gpus.size(); ++i) {
      for (size_t j = i + 1; j < gpus.size(); ++j) {
        const Path p = ClassifyPath(host, gpus[i], gpus[j]);
        s.intra_gbs = std::min(s.intra_gbs, p.bw_gbs);
        nvlink = nvlink && (p.type == PathType::kNvl || p.type == PathType::kNvb);
      }
    }
    if (gpus.size() < 2) s.intra_gbs = kHostMemoryGbs;
    s.intra_lat_us = nvlink && gpus.size() >= 2 ? 1.0 : 2.0;
  }

  // The network side: each GPU's closest NIC (counted once), or on a
  // CPU-only host the fastest NIC that is up.
  std::set<int> nics;
  double net = 0;
  bool rdma = true;
  for (int g : gpus) {
    const int nic = ClosestNic(host, g);
    if (nic < 0 || !nics.insert(nic).second) continue;
    net += std::min(NicGbs(host, nic), ClassifyPath(host, g, nic).bw_gbs);
    rdma = rdma && host.nodes[static_cast<size_t>(nic)].rdma;
  }
  if (gpus.empty()) {
    for (int nic : host.OfKind(NodeKind::kNic)) {
      const Node& n = host.nodes[static_cast<size_t>(nic)];
      if (n.up && NicGbs(host, nic) > net) {
        net = NicGbs(host, nic);
        rdma = n.rdma;
      }
    }
  }
  s.host_net_gbs = net > 0 ? net : 1.25;
  s.inter_lat_us = rdma && net > 0 ? 5.0 : 20.0;
  return s;
}

}  // namespace loom::topology
