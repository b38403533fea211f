// TCP setup for one communicator: a listener on the chosen interface, then
// one connection per network peer (the lower rank accepts, the higher
// connects), authenticated with the communicator's tag.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/base/exchange.h"
#include "transports/transport.h"

namespace loom {

class TcpContext {
 public:
  // Listens on `bind_address` (numeric IPv4/IPv6, port 0 = any free port).
  // `ifname` is only for messages ("NET/Socket/<ifname>").
  static Result<std::unique_ptr<TcpContext>> Create(const std::string& bind_address,
                                                    const std::string& ifname, uint64_t tag);
  ~TcpContext();

  // "address:port" to publish to the other ranks ("[v6]:port" for IPv6).
  std::string address() const;

  // Collective over the ranks that have TCP peers. `addresses[p]` is what
  // rank p published; `nsocks` sockets per peer (the same on every rank).
  // Returns connections indexed like `peers`.
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
