// Live HCA discovery through a dlopen'ed libibverbs (verbs.h). The GID
// types come from sysfs (gid_attrs/types), as NCCL reads them, so an old
// rdma-core without ibv_query_gid_ex still tells RoCEv1 from v2.
#include "transports/ib/verbs.h"

#include <dlfcn.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "base/log.h"

#if __has_include(<infiniband/verbs.h>)
#include "transports/ib/verbs_api.h"
#define LOOM_HAVE_VERBS_TYPES 1
#endif

namespace loom::ib {

#ifdef LOOM_HAVE_VERBS_TYPES

namespace {

template <typename F>
bool Sym(void* handle, const char* name, F* out, std::string* error) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
  if (*out == nullptr && error->empty()) *error = std::string(name) + " missing";
  return *out != nullptr;
}

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

void ReadGids(const Api& api, ibv_context* ctx, int table_len, PortInfo* port) {
  const std::string dir = "/sys/class/infiniband/" + port->device + "/ports/" +
                          std::to_string(port->port) + "/gid_attrs/";
  for (int i = 0; i < table_len; ++i) {
    ibv_gid gid;
    if (api.query_gid(ctx, static_cast<uint8_t>(port->port), i, &gid) != 0) continue;
    GidEntry e;
    e.index = i;
    std::memcpy(e.gid.data(), gid.raw, e.gid.size());
    bool zero = true;
    for (uint8_t b : e.gid) zero &= b == 0;
    if (zero) continue;  // unpopulated
    const std::string type = ReadLine(dir + "types/" + std::to_string(i));
    if (!port->ethernet) {
      e.type = GidEntry::Type::kIb;
    } else {
      e.type = type.find("v2") != std::string::npos ? GidEntry::Type::kRoceV2
                                                     : GidEntry::Type::kRoceV1;
    }
    e.netdev = ReadLine(dir + "ndevs/" + std::to_string(i));
    port->gids.push_back(std::move(e));
  }
}

}  // namespace

const Api& LoadApi(const char* library) {
  static std::mutex mu;
  static std::map<std::string, Api> loaded;  // never unloaded: verbs keeps global state
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = loaded.try_emplace(library);
  Api& api = it->second;
  if (!inserted) return api;
  void* h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    api.error = std::string(library) + " not found (" + (e ? e : "dlopen failed") + ")";
    return api;
  }
  std::string& err = api.error;
  Sym(h, "ibv_get_device_list", &api.get_device_list, &err);
  Sym(h, "ibv_free_device_list", &api.free_device_list, &err);
  Sym(h, "ibv_get_device_name", &api.get_device_name, &err);
  Sym(h, "ibv_open_device", &api.open_device, &err);
  Sym(h, "ibv_close_device", &api.close_device, &err);
  Sym(h, "ibv_query_device", &api.query_device, &err);
  Sym(h, "ibv_query_port", &api.query_port, &err);
  Sym(h, "ibv_query_gid", &api.query_gid, &err);
  Sym(h, "ibv_alloc_pd", &api.alloc_pd, &err);
  Sym(h, "ibv_dealloc_pd", &api.dealloc_pd, &err);
  Sym(h, "ibv_reg_mr", &api.reg_mr, &err);
  Sym(h, "ibv_dereg_mr", &api.dereg_mr, &err);
  Sym(h, "ibv_create_comp_channel", &api.create_comp_channel, &err);
  Sym(h, "ibv_destroy_comp_channel", &api.destroy_comp_channel, &err);
  Sym(h, "ibv_create_cq", &api.create_cq, &err);
  Sym(h, "ibv_destroy_cq", &api.destroy_cq, &err);
  Sym(h, "ibv_get_cq_event", &api.get_cq_event, &err);
  Sym(h, "ibv_ack_cq_events", &api.ack_cq_events, &err);
  Sym(h, "ibv_create_qp", &api.create_qp, &err);
  Sym(h, "ibv_modify_qp", &api.modify_qp, &err);
  Sym(h, "ibv_destroy_qp", &api.destroy_qp, &err);
  Sym(h, "ibv_wc_status_str", &api.wc_status_str, &err);
  api.reg_dmabuf_mr = reinterpret_cast<decltype(api.reg_dmabuf_mr)>(dlsym(h, "ibv_reg_dmabuf_mr"));
  if (!err.empty()) err = std::string(library) + " is unusable: " + err;
  return api;
}

Discovery DiscoverPorts(const char* library) {
  Discovery d;
  const Api& api = LoadApi(library);
  if (!api.error.empty()) {
    d.absent_reason = api.error;
    return d;
  }
  int n = 0;
  errno = 0;
  ibv_device** list = api.get_device_list(&n);
  if (list == nullptr) {
    // ENOSYS: the kernel has no RDMA support at all (containers, this VM).
    const int err = errno;
    d.absent_reason = std::string("ibv_get_device_list failed: ") + std::strerror(err) +
                      (err == ENOSYS ? " (ENOSYS: no RDMA support in this kernel)" : "");
    return d;
  }
  if (n == 0) d.absent_reason = "zero IB devices";
  for (int i = 0; i < n; ++i) {
    const std::string name = api.get_device_name(list[i]);
    ibv_context* ctx = api.open_device(list[i]);
    if (ctx == nullptr) {
      LOOM_INFO(log::kNet, "NET/IB: cannot open %s: %s", name.c_str(), std::strerror(errno));
      continue;
    }
    ibv_device_attr dev{};
    if (api.query_device(ctx, &dev) == 0) {
      for (int p = 1; p <= dev.phys_port_cnt; ++p) {
        ibv_port_attr attr{};
        if (api.query_port(ctx, static_cast<uint8_t>(p), &attr) != 0) continue;
        PortInfo port;
        port.device = name;
        port.port = p;
        port.active = attr.state == IBV_PORT_ACTIVE;
        port.ethernet = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
        port.lid = attr.lid;
        ReadGids(api, ctx, attr.gid_tbl_len, &port);
        d.ports.push_back(std::move(port));
      }
    }
    api.close_device(ctx);
  }
  api.free_device_list(list);
  if (d.ports.empty() && d.absent_reason.empty()) d.absent_reason = "no queryable IB port";
  return d;
}

bool VerbsHasDmaBuf(const char* library) {
  const Api& api = LoadApi(library);
  return api.error.empty() && api.reg_dmabuf_mr != nullptr;
}

#else  // no verbs header at build time

bool VerbsHasDmaBuf(const char* library) {
  (void)library;
  return false;
}

Discovery DiscoverPorts(const char* library) {
  (void)library;
  return Discovery{{}, "loom was built without <infiniband/verbs.h>"};
}

#endif

}  // namespace loom::ib
