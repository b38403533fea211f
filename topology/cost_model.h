// What the runtime cost model (collectives/select/selector.h CostModel)
// knows about links, in one place: the price of each kind of link and the
// CPU's reduction rate (used by the communicator), the link costs of a job
// whose hosts all look like one host topology, derived from hardware paths
// (used by `loom topo`), and the price of single-copy reads from what setup
// timed. Pure; no I/O.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "base/status.h"
#include "topology/job.h"
#include "topology/model.h"

namespace loom::topology {

// Intra: between two ranks of one host. Inter: from one host to the
// network, all its ranks together. Neither has single-copy peer reads
// (peer_read_gbs 0): a topology cannot say whether the kernel allows them.
struct HostLinkCosts {
  LinkCost intra;
  LinkCost inter;
};

// For `ranks_per_host` ranks on `host` (one per GPU when it has GPUs):
//   intra bandwidth: the slowest path between two of the first
//     `ranks_per_host` GPUs; 10 GB/s (host memory) with fewer than two GPUs.
//   intra latency: 1 µs when every such path is NVLink (NVL/NVB), 2 µs over
//     PCIe or with one GPU, 1.5 µs for shared memory on a CPU-only host.
//   inter bandwidth: the distinct NICs those GPUs use (each GPU's closest,
//     capped by its path to it), or on a CPU-only host the fastest NIC that
//     is up; 1.25 GB/s when there is none.
//   inter latency: 5 µs when all those NICs do RDMA, else 20 µs (sockets).
// `host` must be valid; ranks_per_host < 1 counts as 1.
HostLinkCosts LinkCostsFor(const Topology& host, int ranks_per_host);

// The runtime's prices, in the cost model's units (latency us, GB/s), for
// each kind of link between two ranks: the FIFOs and one TCP stream as loom
// measures them on a development host; the IB figures are an assumption (a
// 100 Gb/s port behind RDMA latency). Sockets between ranks of one host
// (loopback) are priced as loom's own loopback exchanges run
// (perf/tcp_exchange_bench), which puts the 2-rank all-reduce's switch from
// recursive doubling to the ring where it measures faster. Single-copy
// reads over shared memory are priced as setup times them on the host
// (`reads`, PricePeerReads below); shareable buffers (AllocShared) switch to
// Direct whatever the price.
// RuntimeLinkCost (below) gives the price.
enum class RankLink { kSharedMemory, kSocketSameHost, kSocket, kUcx, kInfiniBand };

// The shared-memory FIFOs' rate (GB/s); the model's other rates are
// relative to it, and setup rescales reads by the host's own FIFOs.
inline constexpr double kShmFifoGbs = 6.0;

// How fast a rank reduces what arrives (two inputs, one output) when host
// collectives reduce on the CPU, with the inputs in cache: pricing it is
// what lets the ring beat recursive doubling at large sizes, where the
// latter reduces twice the bytes.
inline constexpr double kHostReduceGbs = 20.0;

// The share of a 1 MiB memcpy's rate that a shared-memory FIFO reaches: each
// byte is copied in by the sender and out by the receiver, plus the FIFO's
// synchronisation. Only a fallback, for a rank that could not time its host's
// FIFOs (setup times them); hosts differ widely in this share.
inline constexpr double kFifoShareOfMemcpy = 0.4;

// Single-copy reads of a peer's memory (process_vm_readv), priced in the
// cost model's units from what setup timed on this host: a small and a big
// read (bytes, best us) and the FIFOs moving `fifo_bytes` in `fifo_us` (a
// ring step through the real FIFOs, or a memcpy's time over
// kFifoShareOfMemcpy). The slope of the two reads is their rate and the rest
// of the small read their fixed cost per call; both are scaled by the real
// FIFO rate against `fifo_gbs`, the model's FIFO rate, so that reads and
// FIFOs keep the ratio they had on this host; but the rate never above
// `fifo_gbs`. Setup can only time reads of a buffer nobody writes, and a
// collective's input was usually just written by its owner (a gradient):
// reading it hands dirty lines from that core, as the FIFOs do with every
// byte, and can take several times as long as the timed read. Returns {peer_read_gbs, peer_read_setup_us},
// clamped to [0.1, 1000] GB/s and [0, 1000] us. Requires small_bytes <
// big_bytes and positive times.
struct PeerReadPrice {
  double gbs = 0;
  double setup_us = 0;
};
PeerReadPrice PricePeerReads(size_t small_bytes, double small_us, size_t big_bytes, double big_us,
                             size_t fifo_bytes, double fifo_us, double fifo_gbs);

// The price of a link of `kind` (see RankLink); `reads` only matters for
// shared memory.
LinkCost RuntimeLinkCost(RankLink kind, const PeerReadPrice& reads);

// LOOM_SHM_READ_PRICE: "GBS" or "GBS,US", a rate above 0 and at most 1000
// GB/s and a fixed cost per read from 0 to 1000 us (default 20); nullopt
// for "" (measure). Anything else is kInvalidArgument naming the text.
Result<std::optional<PeerReadPrice>> ParsePeerReadPrice(std::string_view text);

}  // namespace loom::topology
