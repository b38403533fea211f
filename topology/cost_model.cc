// Link costs derived from a host topology (cost_model.h).
#include "topology/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "topology/paths.h"

namespace loom::topology {
namespace {

// Host memory copies through a shared-memory segment.
constexpr double kHostMemoryGbs = 10;
// Used when the host has no NIC that is up: a 10 Gb/s Ethernet guess.
constexpr double kUnknownNetGbs = 1.25;

}  // namespace

HostLinkCosts LinkCostsFor(const Topology& host, int ranks_per_host) {
  HostLinkCosts c;
  std::vector<int> gpus = host.OfKind(NodeKind::kGpu);
  const size_t p = static_cast<size_t>(std::max(ranks_per_host, 1));
  if (gpus.size() > p) gpus.resize(p);

  if (gpus.empty()) {
    c.intra = LinkCost{1.5, kHostMemoryGbs, 0.0};
  } else if (gpus.size() < 2) {
    c.intra = LinkCost{2.0, kHostMemoryGbs, 0.0};
  } else {
    double bw = kLocalGbs;
    bool nvlink = true;
    for (size_t i = 0; i < gpus.size(); ++i) {
      for (size_t j = i + 1; j < gpus.size(); ++j) {
        const Path path = ClassifyPath(host, gpus[i], gpus[j]);
        bw = std::min(bw, path.bw_gbs);
        nvlink = nvlink && (path.type == PathType::kNvl || path.type == PathType::kNvb);
      }
    }
    c.intra = LinkCost{nvlink ? 1.0 : 2.0, bw, 0.0};
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
  c.inter = LinkCost{rdma && net > 0 ? 5.0 : 20.0, net > 0 ? net : kUnknownNetGbs, 0.0};
  return c;
}

LinkCost RuntimeLinkCost(RankLink kind, const PeerReadPrice& reads) {
  switch (kind) {
    case RankLink::kSharedMemory: return {1.0, kShmFifoGbs, reads.gbs, reads.setup_us};
    case RankLink::kInfiniBand: return {5.0, 12.0, 0.0};
    case RankLink::kSocketSameHost: return {7.0, 6.0, 0.0};
    case RankLink::kSocket:
    case RankLink::kUcx: break;
  }
  return {20.0, 1.5, 0.0};
}

PeerReadPrice PricePeerReads(size_t small_bytes, double small_us, size_t big_bytes, double big_us,
                             size_t fifo_bytes, double fifo_us, double fifo_gbs) {
  const double small = static_cast<double>(small_bytes), big = static_cast<double>(big_bytes);
  // bytes per us; a big read no slower than the small one: its plain rate.
  const double read_rate = big_us > small_us ? (big - small) / (big_us - small_us) : big / big_us;
  const double fixed_us = std::max(0.0, small_us - small / read_rate);
  const double fifo_rate = static_cast<double>(fifo_bytes) / std::max(fifo_us, 1e-3);
  const double scale = fifo_gbs * 1e3 / fifo_rate;  // model/real GB/s
  return PeerReadPrice{std::clamp(std::min(read_rate * scale / 1e3, fifo_gbs), 0.1, 1000.0),
                       std::clamp(fixed_us / scale, 0.0, 1000.0)};
}

Result<std::optional<PeerReadPrice>> ParsePeerReadPrice(std::string_view text) {
  if (text.empty()) return std::optional<PeerReadPrice>();
  const std::string owned(text);
  PeerReadPrice p{0, 20.0};
  char tail = 0;
  const int got = std::sscanf(owned.c_str(), "%lf,%lf%c", &p.gbs, &p.setup_us, &tail);
  const bool ok = (got == 1 || got == 2) && std::isfinite(p.gbs) && p.gbs > 0 && p.gbs <= 1000 &&
                  std::isfinite(p.setup_us) && p.setup_us >= 0 && p.setup_us <= 1000 &&
                  owned.find_first_not_of("0123456789.,eE+-") == std::string::npos &&
                  owned.back() != ',';
  if (!ok) {
    return InvalidArgument(
        "LOOM_SHM_READ_PRICE: expected GBS or GBS,US (a rate in (0, 1000] GB/s, "
        "a fixed cost per read in [0, 1000] us), got '" +
        owned + "'");
  }
  return std::optional<PeerReadPrice>(p);
}

}  // namespace loom::topology
