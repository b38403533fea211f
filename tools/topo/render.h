// What `loom topo` prints, as pure functions of a host topology and a job
// shape: the text report (path matrix like `nvidia-smi topo -m`, NIC list,
// all-reduce algorithm per size), its JSON form, Graphviz, and the scaling
// simulation. Algorithm choices come from the runtime's own selector
// (collectives/select/selector.h), so they are what a communicator picks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "collectives/select/selector.h"
#include "topology/cost_model.h"
#include "topology/json.h"
#include "topology/model.h"

namespace loom::tools {

// The job the algorithm table is for: `hosts` hosts like the topology with
// `ranks_per_host` ranks each, their link costs, and the selection knobs as
// the communicator applies them. A value type; build with MakeJobSpec.
struct JobSpec {
  int hosts = 1;
  int ranks_per_host = 1;
  topology::HostLinkCosts links;
  AlgoFilter filter;      // NCCL_ALGO
  TuneTable tune;         // LOOM_TUNE
  std::string nccl_algo;  // the two knobs as given, for the report
  std::string loom_tune;
  std::string ranks_note;  // how ranks_per_host was chosen when not given
};

// `hosts` (>= 1) hosts like `t`; `ranks_per_host` 0 means one per GPU, or
// one per core on a host without GPUs (at least 1). `nccl_algo` and `loom_tune` use the grammars of NCCL_ALGO and
// LOOM_TUNE; a malformed one is the InvalidArgument the communicator would
// fail with.
Result<JobSpec> MakeJobSpec(const topology::Topology& t, int hosts, int ranks_per_host,
                            std::string_view nccl_algo, std::string_view loom_tune);

// The devices of the matrix, GPUs then NICs, in topology order.
std::vector<int> MatrixDevices(const topology::Topology& t);

// One matrix cell: "X" for the device itself, "NV18" for NVLink with its
// lane count, else the path type ("PIX", "SYS", ...).
std::string CellLabel(const topology::Topology& t, int a, int b);

// The short lower-case name used in tables and JSON keys: "ring", "tree",
// "recdoubling", "direct", "hierarchical".
std::string ShortAlgoName(Algo algo);

// The whole text report. `source` says where the topology came from.
std::string RenderText(const topology::Topology& t, const std::string& source, const JobSpec& job);

// The JSON report (schema "loom-topo/1", documented in docs/TOPOLOGY.md).
json::Value RenderJson(const topology::Topology& t, const JobSpec& job);

// A Graphviz graph: the tree as solid edges labelled with PCIe bandwidth,
// NVLinks as bold edges labelled NV#, SMP links dashed.
std::string RenderDot(const topology::Topology& t);

// For 8 to 4096 ranks (job.ranks_per_host per host, hosts like `host`; the
// job's hosts are ignored, its knobs applied): the chosen algorithm at a
// few sizes, and the largest size at which the tree is cheaper than the ring.
std::string RenderSimulation(const topology::Topology& host, const JobSpec& job);

}  // namespace loom::tools
