// The libibverbs probe (discover.h): devices, ports, link layer, rate and
// the GID table, through dlopen so that loom never links libibverbs. The
// verbs header supplies types only; every function is looked up by name.
#include <dlfcn.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/log.h"
#include "topology/discover.h"

#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>
#define LOOM_VERBS_TYPES 1
#endif

namespace loom::topology {
namespace {

std::string ReadLine(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  char buf[128] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  std::string s = ok ? buf : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

VerbsProbe NoIb(std::string reason) {
  static std::once_flag once;
  std::call_once(once, [&] { LOOM_INFO(log::kNet, "no IB: %s", reason.c_str()); });
  VerbsProbe p;
  p.no_ib_reason = std::move(reason);
  return p;
}

#ifdef LOOM_VERBS_TYPES

// Active speed code → Gb/s per lane (SDR … XDR, as ibstat prints them).
double LaneGbps(int speed) {
  switch (speed) {
    case 1: return 2.5;
    case 2: return 5;
    case 4: return 10;
    case 8: return 10;  // FDR10
    case 16: return 14;
    case 32: return 25;
    case 64: return 50;
    case 128: return 100;
    case 256: return 200;
    default: return 0;
  }
}

int Lanes(int width) {
  switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
  }
}

// RoCE version and netdev from the GID table in sysfs (what ibv_query_gid_ex
// returns, without needing a recent rdma-core).
void ReadGids(const std::string& dev, VerbsPort* port, int table_len) {
  const std::string dir =
      "/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port->port) + "/gid_attrs/";
  for (int i = 0; i < table_len && i < 128; ++i) {
    const std::string type = ReadLine(dir + "types/" + std::to_string(i));
    if (type.empty()) continue;  // an unpopulated entry reads as EINVAL
    const int version = type.find("v2") != std::string::npos ? 2 : 1;
    if (version > port->roce_version) port->roce_version = version;
    const std::string ndev = ReadLine(dir + "ndevs/" + std::to_string(i));
    if (port->netdev.empty() && !ndev.empty()) port->netdev = ndev;
  }
}

struct VerbsApi {
  ibv_device** (*get_device_list)(int*);
  void (*free_device_list)(ibv_device**);
  const char* (*get_device_name)(ibv_device*);
  ibv_context* (*open_device)(ibv_device*);
  int (*close_device)(ibv_context*);
  int (*query_device)(ibv_context*, ibv_device_attr*);
  int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*);
};

template <typename F>
bool Bind(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

VerbsDevice QueryDevice(const VerbsApi& api, ibv_device* d) {
  VerbsDevice dev;
  dev.name = api.get_device_name(d);
  dev.bus_id = BusIdOfSysfsPath("/sys/class/infiniband/" + dev.name + "/device");
  ibv_context* ctx = api.open_device(d);
  if (ctx == nullptr) {
    LOOM_INFO(log::kNet, "verbs: cannot open %s (errno %d); skipped", dev.name.c_str(), errno);
    return dev;
  }
  ibv_device_attr attr;
  std::memset(&attr, 0, sizeof attr);
  if (api.query_device(ctx, &attr) == 0) {
    for (int p = 1; p <= attr.phys_port_cnt; ++p) {
      // The exported symbol fills the original struct, a prefix of today's.
      ibv_port_attr pa;
      std::memset(&pa, 0, sizeof pa);
      if (api.query_port(ctx, static_cast<uint8_t>(p), &pa) != 0) continue;
      VerbsPort port;
      port.port = p;
      port.active = pa.state == IBV_PORT_ACTIVE;
      port.link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? LinkLayer::kEthernet
                                                                 : LinkLayer::kInfiniBand;
      port.rate_gbps = LaneGbps(pa.active_speed) * Lanes(pa.active_width);
      port.mtu = pa.active_mtu >= 1 && pa.active_mtu <= 5 ? 128 << pa.active_mtu : 0;
      if (port.link_layer == LinkLayer::kEthernet) ReadGids(dev.name, &port, pa.gid_tbl_len);
      dev.ports.push_back(std::move(port));
    }
  }
  api.close_device(ctx);
  return dev;
}

#endif  // LOOM_VERBS_TYPES

}  // namespace

VerbsProbe ProbeVerbs(const char* library) {
#ifndef LOOM_VERBS_TYPES
  (void)library;
  return NoIb("built without infiniband/verbs.h");
#else
  void* lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return NoIb(std::string(library) + " not found");
  // Kept loaded: providers register themselves on load and unloading
  // libibverbs under a live process is not supported by rdma-core.
  VerbsApi api{};
  if (!Bind(lib, "ibv_get_device_list", &api.get_device_list) ||
      !Bind(lib, "ibv_free_device_list", &api.free_device_list) ||
      !Bind(lib, "ibv_get_device_name", &api.get_device_name) ||
      !Bind(lib, "ibv_open_device", &api.open_device) ||
      !Bind(lib, "ibv_close_device", &api.close_device) ||
      !Bind(lib, "ibv_query_device", &api.query_device) ||
      !Bind(lib, "ibv_query_port", &api.query_port)) {
    return NoIb(std::string(library) + " lacks a verbs entry point");
  }
  int n = 0;
  errno = 0;
  ibv_device** list = api.get_device_list(&n);
  if (list == nullptr) {
    return NoIb(errno == ENOSYS ? "the kernel has no RDMA support (ENOSYS)"
                                : "ibv_get_device_list failed: " + std::string(std::strerror(errno)));
  }
  VerbsProbe probe;
  for (int i = 0; i < n; ++i) probe.devices.push_back(QueryDevice(api, list[i]));
  api.free_device_list(list);
  if (probe.devices.empty()) return NoIb("no verbs devices");
  return probe;
#endif
}

}  // namespace loom::topology
