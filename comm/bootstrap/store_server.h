// StoreServer: the rendezvous service of one communicator, served with
// Boost.Asio on a thread of the process that created the UniqueId (or of
// rank 0 under a launcher). It authenticates ranks by the job secret,
// implements all-gather by tag, and watches every rank's connection: a rank
// whose connection drops without a goodbye is reported to all others.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace loom::bootstrap {

class StoreServer {
 public:
  // Binds host:port (port 0 = any). Starts serving on its own thread at once.
  static Result<std::unique_ptr<StoreServer>> Start(const std::string& host, uint16_t port,
                                                    uint64_t secret);
  // Stops at once (pending clients see the connection drop).
  ~StoreServer();

  uint16_t port() const;
  // Serves `fd`, a connected stream socket (a socketpair's end, say), as if
  // it had been accepted; the store owns it from now on. For tests and
  // fuzzing, which need no port.
  void ServeConnection(int fd);
  // Blocks until every registered rank said goodbye or vanished, or deadline.
  // Returns true if the job ended (then the server can be destroyed quietly).
  bool WaitUntilDone(Deadline deadline);

  class Impl;

 private:
  explicit StoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Process-wide home of servers started by UniqueId::Create, so that they
// outlive the call and end when their job ends (or at process exit).
void AdoptServer(std::unique_ptr<StoreServer> server);
// Starts the server for `host:port` if this process is meant to host it and
// none runs yet (rank 0 under a launcher). Idempotent per port.
Status EnsureServer(const std::string& host, uint16_t port, uint64_t secret);

}  // namespace loom::bootstrap
