// libibverbs, opened with dlopen at run time (loom never links it): the
// function table, and live discovery of HCA ports with their GID tables.
// No verbs type appears here; <infiniband/verbs.h> is needed to compile
// verbs.cc only, and without it discovery reports "built without verbs".
#pragma once

#include <string>
#include <vector>

#include "transports/ib/select.h"

namespace loom::ib {

// What discovery found: ports (possibly none) or why there can be none.
struct Discovery {
  std::vector<PortInfo> ports;
  // Set when IB is absent: "libibverbs.so.1 not found (…)", "zero IB
  // devices", "ibv_get_device_list failed: Function not implemented
  // (ENOSYS)". Empty when ports were found.
  std::string absent_reason;
};

// Loads `library` (once per name; the handle is kept for the process),
// lists devices and queries each port and its GID table. Never fails: every
// problem is an absent_reason or a port left out with an INFO line.
// Thread-safe; blocks briefly (device queries).
Discovery DiscoverPorts(const char* library = "libibverbs.so.1");

// Whether `library` loads and exports ibv_reg_dmabuf_mr (GPUDirect RDMA
// through dma-buf, gdr.h). Thread-safe.
bool VerbsHasDmaBuf(const char* library = "libibverbs.so.1");

}  // namespace loom::ib
