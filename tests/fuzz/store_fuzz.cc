// The rendezvous store's wire format, as any client of the network may send
// it: every input is the bytes of one connection to a fresh store (job
// secret 0), written whole, then the write side closed; the fuzzer waits
// until the store has closed its side. The connection is a socketpair the
// store serves as if accepted, so no port is used up per input. The seed
// corpus holds a valid hello and the frames that follow it, so inputs reach
// past the hello's checks. A crash, a leak, or a store that keeps a
// half-closed connection open fails.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "comm/bootstrap/store_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto server = loom::bootstrap::StoreServer::Start("127.0.0.1", 0, /*secret=*/0);
  int fds[2];
  if (!server.ok() || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  (*server)->ServeConnection(fds[1]);
  const int fd = fds[0];
  for (size_t sent = 0; sent < size;) {
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the store closed on us: a refusal
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  // The store must close its side once the client's bytes end: it never
  // waits for more from a half-closed client.
  char sink[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) std::abort();  // libFuzzer's timer interrupts it
    if (ready <= 0) {
      if (std::chrono::steady_clock::now() > deadline) std::abort();  // the store kept it open
      continue;
    }
    const ssize_t n = recv(fd, sink, sizeof(sink), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
  }
  close(fd);
  return 0;
}
