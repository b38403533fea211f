// TCP setup for one communicator: a listener on each chosen interface, then
// one connection per network peer (the lower rank accepts, the higher
// connects), authenticated with the communicator's tag. With several data
// NICs the sockets of a peer are spread over the NIC pairs on shared subnets.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/exchange.h"
#include "transports/tcp/nics.h"
#include "transports/transport.h"

namespace loom {

// One interface to listen on.
struct TcpListen {
  std::string address;  // numeric IPv4/IPv6, no port
  std::string ifname;   // for messages ("NET/Socket/<ifname>")
  int prefix_len = 0;   // for matching the peer's NIC on the same subnet
};

// Thread-compatible: Create and Connect from one thread.
class TcpContext {
 public:
  // Listens on `bind_address` (numeric IPv4/IPv6) on a free port.
  // `ifname` is only for messages ("NET/Socket/<ifname>").
  static Result<std::unique_ptr<TcpContext>> Create(const std::string& bind_address,
                                                    const std::string& ifname, uint64_t tag);
  // Listens on each of `nics` (at least one; the first is the primary).
  static Result<std::unique_ptr<TcpContext>> Create(const std::vector<TcpListen>& nics,
                                                    uint64_t tag);
  ~TcpContext();

  // What to publish to the other ranks (FormatNicList): "address:port"
  // ("[v6]:port") with one NIC, a list with prefixes with several.
  std::string address() const;

  // Collective over the ranks that have TCP peers. `addresses[p]` is what
  // rank p published; at least `nsocks` sockets per peer and direction (the
  // same on every rank). With several NICs on both ends the pair uses
  // max(nsocks, number of NIC pairs on shared subnets) sockets each way,
  // socket i on pair i mod pairs,
  // each bound to the local NIC's address and connected to the peer's NIC
  // on that subnet; the connection's via lists the local NICs
  // ("NET/Socket/data0,data1"). Returns connections indexed like `peers`.
  Result<std::vector<std::unique_ptr<Connection>>> Connect(int rank, const std::vector<int>& peers,
                                                           const std::vector<std::string>& addresses,
                                                           const std::vector<std::string>& hosts,
                                                           int nsocks, Deadline deadline);

 private:
  TcpContext() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
