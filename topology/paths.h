// Paths between two devices of one host, classified like NCCL and
// `nvidia-smi topo -m` (LOC, NVL, NVB, PIX, PXB, PHB, NODE, SYS; NET between
// hosts), with the bottleneck bandwidth along the path.
#pragma once

#include <string_view>

#include "base/status.h"
#include "topology/model.h"

namespace loom::topology {

// Ordered from closest to farthest, so `a <= b` means "a is at least as
// close as b" (what NCCL_P2P_LEVEL compares against).
enum class PathType {
  kLoc,   // the same device
  kNvl,   // NVLink, directly or through NVSwitches
  kNvb,   // NVLink through one intermediate GPU
  kPix,   // at most one PCIe switch
  kPxb,   // several PCIe switches, no host bridge
  kPhb,   // through a PCIe host bridge (the CPU of one root complex)
  kNode,  // between host bridges inside one NUMA node
  kSys,   // across the SMP link between NUMA nodes (QPI/UPI/Infinity Fabric)
  kNet,   // between hosts, over the network
};

// "LOC", "NVL", ...; ParsePathType is case-insensitive and InvalidArgument
// on an unknown name (it reads NCCL_P2P_LEVEL-style settings).
std::string_view Name(PathType type);
Result<PathType> ParsePathType(std::string_view s);

// A distance setting as NCCL reads NCCL_P2P_LEVEL and NCCL_NET_GDR_LEVEL:
// a path name (not NET) or the legacy integers 0-5 (LOC, PIX, PXB, PHB,
// SYS, SYS); empty means NCCL's default, PXB. InvalidArgument naming
// `variable` and the value otherwise.
Result<PathType> ParseLevel(std::string_view text, std::string_view variable);

struct Path {
  PathType type = PathType::kSys;
  double bw_gbs = 0;  // the narrowest link on the path, GB/s per direction
  int nvlinks = 0;    // NVLink lanes for NVL/NVB paths (the "18" of NV18)
};

// The path between nodes a and b of `t` (indices). Pure; `t` must be valid
// (Topology::Validate). NVLink paths are considered only between GPUs and
// NVSwitches; everything else follows parent links through the tree, which
// is walked explicitly (never with hwloc's common-ancestor helper).
Path ClassifyPath(const Topology& t, int a, int b);

// The NIC closest to `device`: the smallest path type, then the highest
// min(path bandwidth, NIC rate), then the lowest index. NICs that are down
// are skipped unless every NIC is down. -1 when the host has no NIC.
int ClosestNic(const Topology& t, int device);

// The bandwidth of `nic` (index) towards the network, GB/s: its rate / 8,
// or 1.25 GB/s (10 Gb/s, a cautious guess) when the rate is unknown.
double NicGbs(const Topology& t, int nic);

}  // namespace loom::topology
