// What `loom topo` prints, as pure functions of a host topology and a job
// shape: the text report (path matrix like `nvidia-smi topo -m`, NIC list,
// algorithm per size), its JSON form, Graphviz, and the scaling simulation.
#pragma once

#include <string>
#include <vector>

#include "topology/cost_model.h"
#include "topology/json.h"
#include "topology/model.h"

namespace loom::tools {

// The devices of the matrix, GPUs then NICs, in topology order.
std::vector<int> MatrixDevices(const topology::Topology& t);

// One matrix cell: "X" for the device itself, "NV18" for NVLink with its
// lane count, else the path type ("PIX", "SYS", ...).
std::string CellLabel(const topology::Topology& t, int a, int b);

// The whole text report. `source` says where the topology came from.
std::string RenderText(const topology::Topology& t, const std::string& source,
                       const topology::JobShape& job);

// The JSON report (schema "loom-topo/1", documented in docs/TOPOLOGY.md).
json::Value RenderJson(const topology::Topology& t, const topology::JobShape& job);

// A Graphviz digraph: the tree as solid edges labelled with PCIe bandwidth,
// NVLinks as bold undirected edges labelled NV#, SMP links dashed.
std::string RenderDot(const topology::Topology& t);

// For 8 to 4096 ranks (`ranks_per_host` per host, hosts like `host`): the
// best algorithm at a few sizes and the size where tree stops beating ring.
std::string RenderSimulation(const topology::Topology& host, int ranks_per_host);

}  // namespace loom::tools
