// Live discovery of this host's topology from optional sources — hwloc
// (CPU, NUMA, PCI tree), /sys/class/net, libibverbs (dlopen'ed) and NVML
// (dlopen'ed) — merged by normalised PCI bus id, plus LocalTopology(), the
// one entry point that honours LOOM_TOPO_FILE and LOOM_TOPO_DUMP_FILE.
//
// Every probe is optional: a missing library, driver or file leaves its part
// empty and is logged once at INFO (never an error, never a crash).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/params.h"
#include "base/status.h"
#include "topology/model.h"

namespace loom::topology {

// LOOM_TOPO_FILE (NCCL_TOPO_FILE as its NCCL twin; the format is sniffed,
// see LoadTopologyFile) and LOOM_TOPO_DUMP_FILE. Listed here until
// base/params.cc's All() includes them.

// The normalised PCI address of the device a sysfs path points into: the
// last component of realpath(path) that is a full bus id ("0000:00:03.0"
// for /sys/class/net/eth0/device -> .../0000:00:03.0/virtio2). "" when
// there is none (a virtual device) or the path does not resolve.
std::string BusIdOfSysfsPath(const std::string& path);

// ---- /sys/class/net ----
struct SysfsNetDevice {
  std::string name;       // "eth0"
  std::string bus_id;     // normalised PCI address of the device, "" for virtual links
  int type = 0;           // ARPHRD_*: 1 Ethernet, 32 InfiniBand, 772 loopback
  bool up = false;        // operstate "up"
  int mtu = 0;            // 0 = unknown
  double speed_gbps = 0;  // 0 = unknown (sysfs says -1 for virtio and links without carrier)
};
// Every entry of `dir` except loopback. Unreadable attributes stay unknown;
// a missing directory gives an empty list. Blocks on sysfs reads.
std::vector<SysfsNetDevice> ProbeSysfsNet(std::string_view dir = "/sys/class/net");

// ---- libibverbs ----
struct VerbsPort {
  int port = 0;
  bool active = false;        // IBV_PORT_ACTIVE
  LinkLayer link_layer = LinkLayer::kUnknown;
  double rate_gbps = 0;       // active speed × width
  int mtu = 0;                // active MTU in bytes
  std::string netdev;         // from the GID table (RoCE); "" for IB
  int roce_version = 0;       // highest RoCE version in the GID table; 0 for IB
};
struct VerbsDevice {
  std::string name;           // "mlx5_0"
  std::string bus_id;         // from /sys/class/infiniband/<name>/device
  std::vector<VerbsPort> ports;
};
struct VerbsProbe {
  std::vector<VerbsDevice> devices;
  std::string no_ib_reason;   // why devices is empty: "libibverbs.so.1 not found", ...
};
// Lists verbs devices through `library` loaded with dlopen (never linked).
// No library, ENOSYS from the kernel and zero devices all give an empty
// list with a reason, logged once at INFO. Thread-safe; blocks on device
// queries.
VerbsProbe ProbeVerbs(const char* library = "libibverbs.so.1");

// ---- NVML ----
struct NvmlGpu {
  int index = 0;
  std::string bus_id;
  std::string model;
  int sm = 0;
  struct NvLink {
    std::string peer_bus_id;  // the GPU or NVSwitch at the other end
    bool to_switch = false;
  };
  std::vector<NvLink> nvlinks;  // one entry per active link
};
struct NvmlProbe {
  std::vector<NvmlGpu> gpus;
  std::string no_gpu_reason;  // "libnvidia-ml.so.1 not found", "nvmlInit failed: 9", ...
};
// GPUs and their NVLinks through `library` loaded with dlopen. No driver
// means zero GPUs, quietly (INFO once). Thread-safe (NVML is); blocks on
// driver queries.
NvmlProbe ProbeNvml(const char* library = "libnvidia-ml.so.1");

// ---- hwloc ----
// Machine, NUMA nodes (cores, cpuset), PCI host bridges and switches, and
// the GPUs (NVIDIA display/3D controllers), NICs (network and InfiniBand
// controllers, named after their OS devices: "mlx5_0" or "eth0") and
// NVSwitches below them, with the I/O filter set to keep everything and
// parents walked explicitly. PCIe generation and width come from
// /sys/bus/pci/devices/<bus id>/current_link_*. Without hwloc (not built
// in, or it fails) the result is the machine and one NUMA node with the
// online CPUs. `hwloc_used` tells which happened. Blocks (hwloc loads the
// whole topology; tens of milliseconds).
Topology ProbeHwloc(const std::string& hostname, bool* hwloc_used);

// Adds what sysfs, verbs and NVML found to `t` (from ProbeHwloc), matching
// devices by bus id: known NICs gain rate, state, MTU, netdev and link
// layer; devices hwloc did not report are added under the first NUMA node
// (virtual network links are skipped); NVLinks become links, creating
// NVSwitch nodes as needed. Pure; the result is valid if `t` was.
void MergeProbes(const std::vector<SysfsNetDevice>& net, const VerbsProbe& verbs,
                 const NvmlProbe& nvml, Topology* t);

// Probes everything and merges it (one call at a time per process: the
// probes are not thread-safe). Never fails: missing sources leave their
// parts empty.
Topology DiscoverTopology();

// The topology this process should use: the file named by LOOM_TOPO_FILE /
// NCCL_TOPO_FILE when set (then nothing is probed), else DiscoverTopology().
// Then, when LOOM_TOPO_DUMP_FILE is set, writes the result there (a write
// failure is logged at WARN, not returned). Errors: the file cannot be read
// or parsed. Blocks; call once per communicator setup, not per collective.
Result<Topology> LocalTopology();

}  // namespace loom::topology
