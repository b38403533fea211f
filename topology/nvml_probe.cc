// The NVML probe (discover.h): GPUs, their PCI addresses and NVLinks,
// through dlopen of libnvidia-ml.so.1. The CUDA toolkit here has no nvml.h,
// so the few types and functions used are declared below with NVML's ABI.
#include <dlfcn.h>

#include <mutex>

#include "base/log.h"
#include "topology/discover.h"

namespace loom::topology {
namespace {

// NVML's ABI (nvml.h): return 0 is NVML_SUCCESS; handles are opaque.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlPciInfo {  // nvmlPciInfo_t as of the _v3 entry points
  char bus_id_legacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pci_device_id;
  unsigned pci_subsystem_id;
  char bus_id[32];
};
constexpr unsigned kNvmlMaxNvLinks = 18;  // NVML_NVLINK_MAX_LINKS
constexpr int kNvmlEnabled = 1;           // NVML_FEATURE_ENABLED
constexpr int kNvLinkDeviceSwitch = 2;    // NVML_NVLINK_DEVICE_TYPE_SWITCH

struct NvmlApi {
  NvmlReturn (*init)();
  NvmlReturn (*shutdown)();
  NvmlReturn (*count)(unsigned*);
  NvmlReturn (*handle)(unsigned, NvmlDevice*);
  NvmlReturn (*pci)(NvmlDevice, NvmlPciInfo*);
  NvmlReturn (*name)(NvmlDevice, char*, unsigned);
  NvmlReturn (*cc)(NvmlDevice, int*, int*);
  // Optional: absent on old drivers, which then report no NVLinks.
  NvmlReturn (*link_state)(NvmlDevice, unsigned, int*);
  NvmlReturn (*link_remote_pci)(NvmlDevice, unsigned, NvmlPciInfo*);
  NvmlReturn (*link_remote_type)(NvmlDevice, unsigned, int*);
};

template <typename F>
bool Bind(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

NvmlProbe NoGpu(std::string reason) {
  static std::once_flag once;
  std::call_once(once, [&] { LOOM_INFO(log::kInit, "NVML: 0 GPUs (%s)", reason.c_str()); });
  NvmlProbe p;
  p.no_gpu_reason = std::move(reason);
  return p;
}

std::string Normalized(const char* bus_id) {
  auto r = NormalizeBusId(bus_id);
  return r.ok() ? *r : "";
}

NvmlGpu QueryGpu(const NvmlApi& api, unsigned index, NvmlDevice dev) {
  NvmlGpu g;
  g.index = static_cast<int>(index);
  NvmlPciInfo pci{};
  if (api.pci(dev, &pci) == 0) g.bus_id = Normalized(pci.bus_id);
  char name[96] = {};
  if (api.name(dev, name, sizeof name) == 0) g.model = name;
  int major = 0;
  int minor = 0;
  if (api.cc(dev, &major, &minor) == 0) g.sm = major * 10 + minor;
  if (api.link_state == nullptr || api.link_remote_pci == nullptr) return g;
  for (unsigned link = 0; link < kNvmlMaxNvLinks; ++link) {
    int state = 0;
    if (api.link_state(dev, link, &state) != 0 || state != kNvmlEnabled) continue;
    NvmlPciInfo remote{};
    if (api.link_remote_pci(dev, link, &remote) != 0) continue;
    int type = 0;
    NvmlGpu::NvLink l;
    l.peer_bus_id = Normalized(remote.bus_id);
    l.to_switch = api.link_remote_type != nullptr && api.link_remote_type(dev, link, &type) == 0 &&
                  type == kNvLinkDeviceSwitch;
    if (!l.peer_bus_id.empty()) g.nvlinks.push_back(std::move(l));
  }
  return g;
}

}  // namespace

NvmlProbe ProbeNvml(const char* library) {
  void* lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return NoGpu(std::string(library) + " not found (no NVIDIA driver)");
  NvmlApi api{};
  const bool core = Bind(lib, "nvmlInit_v2", &api.init) && Bind(lib, "nvmlShutdown", &api.shutdown) &&
                    Bind(lib, "nvmlDeviceGetCount_v2", &api.count) &&
                    Bind(lib, "nvmlDeviceGetHandleByIndex_v2", &api.handle) &&
                    Bind(lib, "nvmlDeviceGetPciInfo_v3", &api.pci) &&
                    Bind(lib, "nvmlDeviceGetName", &api.name) &&
                    Bind(lib, "nvmlDeviceGetCudaComputeCapability", &api.cc);
  if (!core) {
    dlclose(lib);
    return NoGpu(std::string(library) + " is too old (missing entry points)");
  }
  Bind(lib, "nvmlDeviceGetNvLinkState", &api.link_state);
  Bind(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &api.link_remote_pci);
  Bind(lib, "nvmlDeviceGetNvLinkRemoteDeviceType", &api.link_remote_type);
  if (const NvmlReturn r = api.init(); r != 0) {
    dlclose(lib);
    return NoGpu("nvmlInit failed with NVML error " + std::to_string(r));
  }
  NvmlProbe probe;
  unsigned n = 0;
  if (api.count(&n) != 0) n = 0;
  for (unsigned i = 0; i < n; ++i) {
    NvmlDevice dev = nullptr;
    if (api.handle(i, &dev) == 0) probe.gpus.push_back(QueryGpu(api, i, dev));
  }
  api.shutdown();
  dlclose(lib);
  if (probe.gpus.empty()) return NoGpu("the driver reports no GPU");
  return probe;
}

}  // namespace loom::topology
