// UCX setup for one communicator: a UCP context and worker (the worker's
// address is what peers need to reach this rank), then one UcxConnection
// per network peer. No UCX type appears in this header.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/exchange.h"
#include "transports/transport.h"

namespace loom {

class UcxWorker;  // transports/ucx/connection.h

// Whether a UCX_TLS value allows only shared-memory and loopback transports
// (sm, shm, mm, posix, sysv, xpmem, knem, cma, self), which in UCX 1.13 refuse
// UCP_ERR_HANDLING_MODE_PEER. Endpoints then use NONE at once instead of
// having UCX log an error for the PEER attempt. "" and "^..." are false.
bool SharedMemoryOnly(std::string_view tls);

// How to configure UCX for this communicator. Every UCX_* environment
// variable is honoured as UCX itself reads it (UCX_TLS passes straight
// through); these options only fill in what the user left unset.
struct UcxOptions {
  // Pins UCX_NET_DEVICES to this device ("eth0", "mlx5_0:1") unless the user
  // set UCX_NET_DEVICES. Empty: no pin (UCX uses every device it likes).
  std::string net_device;
  // NCCL_IB_DISABLE: excludes UCX's InfiniBand transports ("^ib") unless the
  // user set UCX_TLS, which then wins.
  bool ib_disable = false;
  // The UCP library to dlopen, found by the loader's search path
  // (LD_LIBRARY_PATH can point at another UCX build).
  std::string library = "libucp.so.0";
};

// What Connect needs to know about each rank of the communicator.
struct UcxRankInfo {
  std::string hostname;  // for messages
  std::string host_id;   // equal <=> same host (topology/host.h)
  int pid = 0;           // for the liveness check of same-host peers
};

// Owns the UCP context and worker; the connections it creates share the
// worker (they keep it alive, so the context may be destroyed first).
// Thread-compatible: Create/Connect from one thread; afterwards the
// connections of one context must be driven by one thread at a time (the
// engine's), because they progress the same worker.
class UcxContext {
 public:
  // Loads UCX (options.library, once per process: nothing loads it before),
  // reads its configuration (UCX_* variables), applies `options`, and
  // creates the context (tag matching + wakeup) and a worker. Blocks for a
  // few milliseconds. SystemError naming the library, dlerror()'s text and
  // the remedies when UCX cannot be loaded; naming the UCX status and the
  // UCX_TLS / UCX_NET_DEVICES in effect when UCX refuses.
  static Result<std::unique_ptr<UcxContext>> Create(const UcxOptions& options);
  ~UcxContext();

  // This worker's address (opaque bytes): what peers pass to ucp_ep_create.
  const std::string& address() const { return address_; }
  // What UCX_NET_DEVICES was pinned to ("" when not pinned: unset
  // net_device, or the user set UCX_NET_DEVICES).
  const std::string& pinned_device() const { return pinned_device_; }
  // "NET/UCX/<device>" for messages, as NCCL prints "via ...".
  const std::string& via() const { return via_; }

  // Collective over every rank of `exchange` (each calls it, with an empty
  // `peers` when it has no UCX peer): all-gathers the worker addresses under
  // the tag "ucx-worker-address", then connects as below. `ranks[r]`
  // describes rank r; `rank` is this rank. Returns connections indexed like
  // `peers`.
  Result<std::vector<std::unique_ptr<Connection>>> Connect(Exchange& exchange, int rank,
                                                           const std::vector<int>& peers,
                                                           const std::vector<UcxRankInfo>& ranks,
                                                           Deadline deadline);

  // The same with the addresses already known (e.g. published in the setup
  // record): `addresses[r]` is rank r's address(). Creates one endpoint per
  // peer and exchanges a hello over each, so it blocks until every peer has
  // made its side (each peer calls Connect at about the same time) or the
  // deadline (TimeoutError naming the peers not heard from). A peer that
  // failed is a RemoteError, one UCX cannot reach a SystemError.
  Result<std::vector<std::unique_ptr<Connection>>> Connect(
      int rank, const std::vector<int>& peers, const std::vector<std::string>& addresses,
      const std::vector<UcxRankInfo>& ranks, Deadline deadline);

 private:
  UcxContext() = default;
  Status Handshake(const std::vector<std::unique_ptr<Connection>>& conns, Deadline deadline);

  std::shared_ptr<UcxWorker> worker_;
  std::string address_;
  std::string pinned_device_;
  std::string via_;
};

}  // namespace loom
