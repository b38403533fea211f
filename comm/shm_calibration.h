// Single-copy reads and the shared-memory FIFOs as setup finds them on this
// host: the probe that proves peers' memory readable, the timing of reads and
// of a ring step through the FIFOs (plain and streamed), and the price and
// choices that come of it. Used by Communicator setup (setup.cc) only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/exchange.h"
#include "base/status.h"
#include "comm/transport_plan.h"
#include "topology/cost_model.h"
#include "transports/transport.h"

namespace loom {

// This rank's neighbours in setup's FIFO timing: the ranks of its host in
// rank order, closed into a ring, when every pair of them talks over shared
// memory (every rank of the host computes the same answer); nullopt when the
// rank is alone on its host or some pair of its host uses another transport.
struct HostRing {
  int next = -1;
  int prev = -1;
};
std::optional<HostRing> SameHostShmRing(int rank, const std::vector<std::string>& host_ids,
                                        const std::vector<TransportRecord>& transports);

// One per process, written once (so no peer's read ever faults a page in
// here) and never freed: peers may read it during any communicator's setup.
// Its address goes to the peers in the setup record.
const char* ReadProbeRegion();

// Single-copy reads between same-host ranks: each rank probes every shm peer,
// and the feature is on only if every rank of the communicator succeeded
// (algorithms must agree on whether to use it). Each rank prices the reads
// from its own timings (TimeShm) of its ring neighbour, unless
// LOOM_SHM_READ_PRICE names the price or this process timed them before, and
// from the same timings decides whether its sends start streaming into the
// FIFOs (the communicator's StreamChooser takes over from there), unless
// LOOM_SHM_STREAM says or this process decided before. When any rank
// must time, every rank of a host ring times, so that the FIFO steps have
// both ends. The job prices reads at the slowest rate and the largest fixed
// cost any rank found. Returns that job-wide verdict and price, the same on
// every rank that calls it.
// `conns[p]` is a ShmConnection for every p in `shm_peers`; `read_probes[p]`
// and `pids[p]` are rank p's ReadProbeRegion() and process id.
// `*stream_clear`: this rank's timing (now or earlier in this process) found
// one way of sending kClearStreamMargin faster than the other.
Result<topology::PeerReadPrice> EnableSingleCopy(Exchange& exchange, int rank,
                                                 const std::vector<int>& shm_peers,
                                                 const std::vector<uint64_t>& read_probes,
                                                 const std::vector<int>& pids,
                                                 const std::optional<HostRing>& ring,
                                                 std::vector<std::unique_ptr<Connection>>& conns,
                                                 Deadline deadline, bool* stream_clear);
inline constexpr double kClearStreamMargin = 1.5;

}  // namespace loom
