// IbContext: one HCA port for a communicator (device, protection domain)
// and, per IB peer, a reliable-connected queue pair walked to RTS with the
// endpoint records exchanged through the bootstrap; yields IbConnections.
// Runs only with an RDMA device (none on the machine it was written on).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/exchange.h"
#include "transports/ib/connection.h"
#include "transports/ib/gdr.h"
#include "transports/ib/qp.h"
#include "transports/ib/select.h"
#include "transports/transport.h"

namespace loom::ib {

struct IbOptions {
  PortInfo port;                      // from SelectPorts: the port to use
  int gid_index = -1;                 // NCCL_IB_GID_INDEX; -1 = ChooseGid's automatic rule
  std::optional<Ipv4Subnet> subnet;   // RoCE: prefer the GID on this subnet
  QpKnobs knobs;                      // NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT (port is filled in)
  IbConnectionOptions connection;     // device_sends/device_recvs follow `gdr`
  // GPUDirect RDMA (gdr.h): how GPU memory is registered (kNone: it never
  // reaches the connections), and where its allocations are.
  GdrChoice gdr;
  DeviceAllocationFn device_allocation;
};

// Thread-compatible: Create and Connect from the init thread; the
// connections are then driven by the engine's thread. Outlives nothing: each
// connection keeps the device objects it uses alive.
class IbContext {
 public:
  // Opens the device of options.port and allocates a protection domain.
  // SystemError naming the device when verbs fails; InvalidUsage when the
  // GID choice fails (NCCL_IB_GID_INDEX names a missing entry).
  static Result<std::unique_ptr<IbContext>> Create(const IbOptions& options);
  ~IbContext();

  // "NET/IB/0" as NCCL prints it (loom uses one port: device index 0).
  std::string via() const { return "NET/IB/0"; }

  // Collective over every rank of the communicator (ranks without IB peers
  // call it with `peers` empty): creates a queue pair and ring per peer,
  // all-gathers the endpoint records (tag "ib-endpoints"), moves each queue
  // pair INIT -> RTR -> RTS and posts its receives. The peers must not write
  // before everyone returned (setup's "connected" barrier sees to it).
  // Connections are indexed like `peers`.
  Result<std::vector<std::unique_ptr<Connection>>> Connect(Exchange& exchange, int rank,
                                                           const std::vector<int>& peers,
                                                           const std::vector<std::string>& hosts,
                                                           Deadline deadline);

  struct Impl;  // the device objects; defined and used in context.cc only

 private:
  IbContext() = default;
  std::shared_ptr<Impl> impl_;
};

}  // namespace loom::ib
