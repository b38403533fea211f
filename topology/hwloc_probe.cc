// The hwloc probe (discover.h): CPU, NUMA and the PCI tree with GPUs, NICs
// and NVSwitches. Compiled with or without hwloc (LOOM_HAVE_HWLOC).
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>

#include "base/log.h"
#include "topology/discover.h"

#ifdef LOOM_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace loom::topology {
namespace {

Topology Fallback(const std::string& hostname) {
  Topology t = Topology::WithMachine(hostname);
  Node numa;
  numa.kind = NodeKind::kNuma;
  numa.id = "numa0";
  numa.parent = 0;
  numa.numa_id = 0;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  numa.cores = cpus > 0 ? static_cast<int>(cpus) : 1;
  numa.cpuset = numa.cores > 1 ? "0-" + std::to_string(numa.cores - 1) : "0";
  t.Add(std::move(numa));
  return t;
}

#ifdef LOOM_HAVE_HWLOC

constexpr unsigned kNvidiaVendor = 0x10de;

std::string ReadSysfsLine(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  char buf[128] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  return ok ? std::string(buf) : "";
}

// Negotiated PCIe generation and width from sysfs ("16.0 GT/s PCIe", "16").
void ReadPcieLink(Node* n) {
  if (n->bus_id.empty()) return;
  const std::string dir = "/sys/bus/pci/devices/" + n->bus_id + "/";
  const double gts = std::strtod(ReadSysfsLine(dir + "current_link_speed").c_str(), nullptr);
  const long width = std::strtol(ReadSysfsLine(dir + "current_link_width").c_str(), nullptr, 10);
  int gen = 0;
  for (const double threshold : {2.0, 4.0, 7.0, 15.0, 30.0, 60.0}) gen += gts >= threshold ? 1 : 0;
  if (gen > 0 && width > 0 && width <= 32) {
    n->pcie_gen = gen;
    n->pcie_width = static_cast<int>(width);
  }
}

bool IsIo(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_BRIDGE || o->type == HWLOC_OBJ_PCI_DEVICE ||
         o->type == HWLOC_OBJ_OS_DEVICE;
}

std::string BusIdOf(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", static_cast<unsigned>(pci.domain),
                static_cast<unsigned>(pci.bus), static_cast<unsigned>(pci.dev),
                static_cast<unsigned>(pci.func));
  return buf;
}

class HwlocBuilder {
 public:
  HwlocBuilder(hwloc_topology_t topo, Topology* t) : topo_(topo), t_(t) {}

  void Build() {
    AddNumaNodes();
    for (hwloc_obj_t dev = hwloc_get_next_pcidev(topo_, nullptr); dev != nullptr;
         dev = hwloc_get_next_pcidev(topo_, dev)) {
      const NodeKind kind = Classify(dev);
      if (kind == NodeKind::kPci) continue;  // storage, USB, ...: not part of the model
      Node n;
      n.kind = kind;
      n.bus_id = BusIdOf(dev->attr->pcidev);
      n.id = DeviceName(dev, kind, n.bus_id);
      n.parent = Ensure(dev->parent);
      ReadPcieLink(&n);
      t_->Add(std::move(n));
    }
  }

 private:
  void AddNumaNodes() {
    const int n = hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < n; ++i) {
      hwloc_obj_t numa = hwloc_get_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
      Node node;
      node.kind = NodeKind::kNuma;
      node.numa_id = static_cast<int>(numa->os_index);
      node.id = "numa" + std::to_string(numa->os_index);
      node.parent = 0;
      node.cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo_, numa->cpuset, HWLOC_OBJ_CORE);
      char* list = nullptr;
      if (hwloc_bitmap_list_asprintf(&list, numa->cpuset) >= 0 && list != nullptr) {
        node.cpuset = list;
        std::free(list);
      }
      numa_index_[numa->os_index] = t_->Add(std::move(node));
    }
  }

  NodeKind Classify(hwloc_obj_t dev) const {
    const unsigned cls = dev->attr->pcidev.class_id;
    const unsigned vendor = dev->attr->pcidev.vendor_id;
    if ((cls == 0x0300 || cls == 0x0302) && vendor == kNvidiaVendor) return NodeKind::kGpu;
    if (cls == 0x0680 && vendor == kNvidiaVendor) return NodeKind::kNvSwitch;
    if (cls == 0x0200 || cls == 0x0207) return NodeKind::kNic;
    return NodeKind::kPci;
  }

  // A NIC is named after its verbs device when it has one, else its netdev.
  std::string DeviceName(hwloc_obj_t dev, NodeKind kind, const std::string& bus_id) const {
    std::string net;
    std::string fabric;
    for (hwloc_obj_t c = dev->io_first_child; c != nullptr; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == nullptr) continue;
      if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && fabric.empty()) fabric = c->name;
      if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && net.empty()) net = c->name;
    }
    std::string id;
    if (kind == NodeKind::kNic) id = !fabric.empty() ? fabric : net;
    if (id.empty()) id = std::string(Name(kind)) + "-" + bus_id;
    return t_->Find(id) < 0 ? id : id + "@" + bus_id;
  }

  // The model node for a CPU-side object or a bridge, created (with its
  // ancestors) on first use. Walks parents one by one: hwloc's
  // common-ancestor helper must not be used on I/O objects.
  int Ensure(hwloc_obj_t o) {
    if (o == nullptr) return 0;
    auto it = made_.find(o);
    if (it != made_.end()) return it->second;
    int index = 0;
    if (!IsIo(o)) {
      index = NumaFor(o);
    } else if (o->type == HWLOC_OBJ_BRIDGE) {
      const int parent = Ensure(o->parent);
      const bool host = o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
      const Node& p = t_->nodes[static_cast<size_t>(parent)];
      // A switch shows as an upstream port with one bridge per downstream
      // port, all with the same vendor:device id: fold the ports into the
      // switch so that two devices behind one switch are PIX.
      if (!host && o->parent->type == HWLOC_OBJ_BRIDGE &&
          o->parent->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI &&
          p.kind == NodeKind::kPci && !p.host_bridge &&
          o->parent->attr->bridge.upstream.pci.device_id == o->attr->bridge.upstream.pci.device_id &&
          o->parent->attr->bridge.upstream.pci.vendor_id == o->attr->bridge.upstream.pci.vendor_id) {
        index = parent;
      } else {
        Node n;
        n.kind = NodeKind::kPci;
        n.parent = parent;
        n.host_bridge = host;
        if (host) {
          n.id = "hb" + std::to_string(host_bridges_++);
        } else {
          n.bus_id = BusIdOf(o->attr->bridge.upstream.pci);
          n.id = "sw-" + n.bus_id;
          ReadPcieLink(&n);
        }
        index = t_->Add(std::move(n));
      }
    } else {
      index = Ensure(o->parent);  // a PCI device that is not a bridge holds nothing we model
    }
    made_[o] = index;
    return index;
  }

  // The NUMA node of a CPU-side object: the first NUMA node in its nodeset.
  int NumaFor(hwloc_obj_t o) const {
    if (o->nodeset == nullptr) return 0;
    const int first = hwloc_bitmap_first(o->nodeset);
    if (first < 0) return 0;
    auto it = numa_index_.find(static_cast<unsigned>(first));
    return it == numa_index_.end() ? 0 : it->second;
  }

  hwloc_topology_t topo_;
  Topology* t_;
  std::map<hwloc_obj_t, int> made_;
  std::map<unsigned, int> numa_index_;
  int host_bridges_ = 0;
};

// Drops PCI switches and host bridges with no device below them; indices
// are renumbered, parents before children is kept.
void PruneEmptyBridges(Topology* t) {
  std::vector<bool> keep(t->nodes.size(), false);
  for (size_t i = t->nodes.size(); i-- > 0;) {
    const Node& n = t->nodes[i];
    if (n.kind != NodeKind::kPci) keep[i] = true;
    if (keep[i] && n.parent >= 0) keep[static_cast<size_t>(n.parent)] = true;
  }
  std::vector<int> remap(t->nodes.size(), -1);
  std::vector<Node> kept;
  for (size_t i = 0; i < t->nodes.size(); ++i) {
    if (!keep[i]) continue;
    remap[i] = static_cast<int>(kept.size());
    Node n = t->nodes[i];
    if (n.parent >= 0) n.parent = remap[static_cast<size_t>(n.parent)];
    kept.push_back(std::move(n));
  }
  t->nodes = std::move(kept);
}

#endif  // LOOM_HAVE_HWLOC

}  // namespace

Topology ProbeHwloc(const std::string& hostname, bool* hwloc_used) {
  *hwloc_used = false;
#ifdef LOOM_HAVE_HWLOC
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) {
    LOOM_INFO(log::kGraph, "hwloc_topology_init failed; using the CPU count only");
    return Fallback(hostname);
  }
  std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)> owner(topo, hwloc_topology_destroy);
  // Without this, hwloc drops every PCI device and NIC.
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
#if HWLOC_API_VERSION >= 0x00020100
  // PCI devices and bridges from the Linux backend (sysfs) rather than the
  // libpciaccess plugin: it only adds the vendor/device names, which we do
  // not use, and libpciaccess 0.17 leaks ~1 KiB on every load (LeakSanitizer).
  hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
  // The GL plugin opens X displays :0 to :N, over TCP to localhost when no
  // socket exists; behind a firewall that drops the replies each connect
  // hangs for minutes. loom uses nothing it finds, nor OpenCL's.
  hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "gl");
  hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "opencl");
#endif
  if (hwloc_topology_load(topo) != 0) {
    LOOM_INFO(log::kGraph, "hwloc_topology_load failed; using the CPU count only");
    return Fallback(hostname);
  }
  Topology t = Topology::WithMachine(hostname);
  HwlocBuilder(topo, &t).Build();
  PruneEmptyBridges(&t);
  if (t.OfKind(NodeKind::kNuma).empty()) return Fallback(hostname);
  *hwloc_used = true;
  return t;
#else
  LOOM_INFO(log::kGraph, "built without hwloc; the topology has no PCI tree");
  return Fallback(hostname);
#endif
}

}  // namespace loom::topology
