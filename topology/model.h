// The topology model of one host: a tree of nodes (machine → NUMA → PCI
// host bridges and switches → GPUs, NICs, NVSwitches) plus the links that
// are not tree edges (NVLink, the SMP link between NUMA nodes), with the
// bandwidths that path classification and the cost model read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace loom::topology {

enum class NodeKind { kMachine, kNuma, kPci, kGpu, kNic, kNvSwitch };
enum class LinkKind { kNvLink, kSmp };
enum class LinkLayer { kUnknown, kInfiniBand, kEthernet };

// Lower-case names used in files and output: "machine", "numa", "pci",
// "gpu", "nic", "nvswitch"; "nvlink", "smp"; "unknown", "ib", "eth".
std::string_view Name(NodeKind kind);
std::string_view Name(LinkKind kind);
std::string_view Name(LinkLayer layer);
Result<NodeKind> ParseNodeKind(std::string_view s);
Result<LinkKind> ParseLinkKind(std::string_view s);
Result<LinkLayer> ParseLinkLayer(std::string_view s);

// One node. Which fields mean something depends on `kind`; the others keep
// their defaults (and are neither written to nor expected in files).
struct Node {
  NodeKind kind = NodeKind::kPci;
  std::string id;       // unique within the host: "gpu0", "mlx5_0", "numa1", "sw3"
  int parent = -1;      // index into Topology::nodes; -1 only for the machine
  std::string bus_id;   // normalised PCI address "0000:3b:00.0"; "" when not a PCI device
  int pcie_gen = 0;     // PCIe generation and lanes of the link to the parent; 0 = unknown
  int pcie_width = 0;

  // kNuma
  int numa_id = -1;     // OS index
  int cores = 0;        // physical cores local to this NUMA node
  std::string cpuset;   // "0-27,56-83"

  // kPci
  bool host_bridge = false;  // a root complex: paths whose lowest shared node is this are PHB

  // kGpu
  int gpu_index = -1;   // CUDA/NVML device index
  std::string model;    // "NVIDIA H100 80GB HBM3"
  int sm = 0;           // compute capability × 10: 90 for Hopper

  // kNic (one node per port)
  LinkLayer link_layer = LinkLayer::kUnknown;
  bool rdma = false;        // reachable through verbs (IB, or RoCE when the layer is Ethernet)
  int port = 0;             // verbs port number; 0 for a plain Ethernet device
  double rate_gbps = 0;     // link rate in Gb/s; 0 = unknown
  std::string netdev;       // kernel interface: "ib0", "ens1f0"; "" when none
  bool up = true;           // port active / operstate up
  int mtu = 0;              // 0 = unknown
  int roce_version = 0;     // 1 or 2 for RoCE; 0 otherwise or unknown
};

// A link that is not a parent edge. Undirected; bandwidth is per direction.
struct Link {
  int a = -1;
  int b = -1;
  LinkKind kind = LinkKind::kNvLink;
  int count = 1;        // NVLink lanes ("NV18")
  double bw_gbs = 0;    // total over `count`, GB/s per direction
};

// One host. A plain value; not thread-safe to mutate concurrently, fine to
// read from many threads.
struct Topology {
  std::string hostname;
  std::vector<Node> nodes;  // a parent always precedes its children; nodes[0] is the machine
  std::vector<Link> links;

  // Appends `node`; returns its index. Does not check anything: Validate() does.
  int Add(Node node);
  // Appends a machine node with id "machine" to an empty topology.
  static Topology WithMachine(std::string hostname);
  // Index of the node with this id, or -1.
  int Find(std::string_view id) const;
  // Index of the node with this normalised bus id, or -1.
  int FindBusId(std::string_view bus_id) const;
  // Indices of the nodes of this kind, in order.
  std::vector<int> OfKind(NodeKind kind) const;
  // The NUMA node above `index` (itself for a NUMA node), or -1.
  int NumaOf(int index) const;

  // Checks the invariants every consumer relies on: exactly one machine, at
  // index 0; ids non-empty and unique; each parent precedes its child and is
  // not a leaf kind (GPU, NIC, NVSwitch); bus ids normalised and unique
  // (except between NIC nodes: the ports of one adapter share its address);
  // links between existing distinct nodes with positive bandwidth and count;
  // NVLinks only between GPUs and NVSwitches, SMP links only between NUMA
  // nodes. InvalidArgument naming the node.
  Status Validate() const;
};

// "0000:3b:00.0" from "3b:00.0", "0000:3B:00.0" or NVML's "00000000:3B:00.0".
// InvalidArgument on anything else.
Result<std::string> NormalizeBusId(std::string_view s);

// Bandwidth in GB/s per direction, with NCCL's figures so that paths and
// logs compare with NCCL's: PCIe gen 1..6 × lanes (Gen3 x16 = 12, Gen4 x16 =
// 24, Gen5 x16 = 48); one NVLink lane by GPU generation (sm 60: 18, 70/80:
// 20, 90: 20.6, 100+: 40.1).
double PcieLinkGbs(int gen, int width);
double NvLinkLaneGbs(int sm);

inline constexpr double kLocalGbs = 5000;       // no link: the same device, or inside a CPU
inline constexpr double kDefaultPcieGbs = 12;   // a PCIe link of unknown speed (Gen3 x16)
inline constexpr double kDefaultSmpGbs = 10;    // a socket-to-socket link not described

// Bandwidth of the link between nodes[index] and its parent: the PCIe figure
// when known; kDefaultPcieGbs for a device or switch whose link is unknown;
// kLocalGbs for NUMA nodes and host bridges (CPU-internal).
double UplinkGbs(const Topology& t, int index);

}  // namespace loom::topology
