// ncclGroupSimulateEnd's estimate: loom's cost model (CostModel, SelectAlgo)
// priced for a job whose ranks all share one host and talk through the
// shared-memory FIFOs. The communicator's own model, built from the real
// job at setup, is not reachable through loom's API, so this is the order of
// magnitude a one-host run would take, not a prediction of this job.
#include <cmath>
#include <vector>

#include "collectives/select/selector.h"
#include "comm/nccl/shim.h"
#include "topology/cost_model.h"
#include "topology/job.h"

namespace loom::nccl_shim {

namespace {

// What the communicator's setup would build for `nranks` ranks on one host
// (comm/setup.cc): FIFO-priced links, reductions on the CPU, the small slots.
CostModel OneHostModel(int nranks) {
  const topology::PeerReadPrice no_reads{};
  const topology::LinkCost shm =
      topology::RuntimeLinkCost(topology::RankLink::kSharedMemory, no_reads);
  const topology::LinkCost net = topology::RuntimeLinkCost(topology::RankLink::kSocket, no_reads);
  return CostModel(topology::JobTopology::Uniform(1, nranks, shm, net), topology::kHostReduceGbs,
                   /*small_slots=*/true);
}

}  // namespace

double EstimateUs(const std::vector<GroupedOp>& ops) {
  const AlgoFilter no_filter;
  const TuneTable no_tune;
  double total = 0;
  for (const GroupedOp& op : ops) {
    const OpCost& c = op.cost;
    // The same choice the dispatcher makes, priced as it prices it.
    const double us =
        SelectAlgo(c.kind, c.bytes, OneHostModel(c.nranks), no_filter, no_tune).predicted_us;
    if (std::isfinite(us)) total += us;
  }
  return total;
}

}  // namespace loom::nccl_shim
