// Import of NCCL's topology XML (what NCCL_TOPO_DUMP_FILE writes and
// NCCL_TOPO_FILE reads) into the loom model, so that dumps from real
// clusters drive `loom topo` and the selector here.
#pragma once

#include <string_view>

#include "base/status.h"
#include "topology/model.h"

namespace loom::topology {

// Converts an NCCL topology XML document:
//   <system> → the machine; <cpu numaid affinity vendor familyid modelid> →
//   a NUMA node (cpuset from the affinity mask; SMP links between every pair
//   with NCCL's figure for the CPU: AMD 16, Intel Skylake and later 10,
//   older x86 6 GB/s); <pci class=0x0604..> → a PCI switch; <pci> holding
//   <gpu dev sm> → a GPU, holding <nic><net name port speed/> → one NIC per
//   <net> (speed in Mb/s; link layer IB for class 0x0207, Ethernet for
//   0x0200; RDMA when the name is a verbs device: mlx4_, mlx5_, bnxt_re,
//   irdma, efa, qedr, hns_, rxe, siw); <nic> directly under <cpu> → a NIC
//   without PCI address; <nvlink target count tclass> → NVLink to the GPU
//   or (tclass 0x068000) NVSwitch with that bus id, count × NvLinkLaneGbs(sm).
// link_speed "16.0 GT/s PCIe" / link_width give pcie_gen/pcie_width.
// NCCL's XML has no host bridges, so devices under different top-level
// <pci> of one <cpu> classify NODE (NCCL itself says PHB for both cases).
// PCI devices with neither GPU nor NIC below them are dropped, as NCCL does.
// InvalidArgument naming the element's line on malformed input. Pure.
Result<Topology> ParseNcclTopoXml(std::string_view text);

}  // namespace loom::topology
