// The doctor's own plain-TCP plumbing, independent of loom's transports so
// that it works exactly when they would not: connect probes that tell
// refused from dropped from unreachable, length-prefixed JSON messages with
// deadlines, and the per-agent listener that answers probes and sinks
// bandwidth streams.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "base/status.h"
#include "topology/json.h"
#include "tools/doctor/facts.h"

namespace loom::doctor {

// An owned socket descriptor; closes on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  int release();
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// One TCP connect to address:port (numeric IPv4/IPv6) within timeout_ms,
// classified: kOk, kRefused (RST), kTimeout (no answer: a DROP rule),
// kUnreachable (EHOSTUNREACH/ENETUNREACH, no route), kError (anything
// else, e.g. a bad address). On kOk the connected socket is returned in
// *connected when it is non-null (else closed). Blocks up to timeout_ms.
Probe ConnectProbe(const std::string& address, int port, int timeout_ms, Fd* connected = nullptr);

// A listening TCP socket on all addresses (IPv6 dual-stack when possible,
// else IPv4) at `port` (0: ephemeral). SystemError naming the port.
Result<Fd> ListenAny(int port);
// The port a bound socket listens on.
int LocalPort(int fd);
// Accepts one connection before the deadline; TimeoutError when none came.
Result<Fd> AcceptBefore(int listen_fd, Deadline deadline);

// Messages: a 4-byte big-endian length, then that many bytes of JSON
// (at most 16 MiB). Both block until done or the deadline; errors name
// `peer`.
Status SendMessage(int fd, const json::Value& msg, Deadline deadline, const std::string& peer);
Result<json::Value> RecvMessage(int fd, Deadline deadline, const std::string& peer);

// Serves probes and streams on its own thread until destroyed. A probe is
// a connection that sends nothing and closes; a stream sends the 8 bytes
// "LOOMBW01", then data until it shuts down its write side, and gets back
// the byte count it sent (8 bytes, big-endian) as the receiver's receipt.
// Connections are handled one at a time: the coordinator runs one stream
// at a time anyway. Not copyable; the destructor joins the thread.
class ProbeListener {
 public:
  static Result<std::unique_ptr<ProbeListener>> Start(int port);
  ~ProbeListener();
  ProbeListener(const ProbeListener&) = delete;
  ProbeListener& operator=(const ProbeListener&) = delete;
  int port() const { return port_; }

 private:
  ProbeListener(Fd fd, int port);
  void Serve();
  Fd fd_;
  int port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Streams data to a ProbeListener at address:port for `seconds` (bounded
// further by max_bytes), then waits for the receipt. Fills bytes/seconds
// from the receipt, or error. Blocks for about `seconds` plus the drain.
Stream StreamTo(const std::string& address, int port, double seconds, int64_t max_bytes,
                int timeout_ms);

}  // namespace loom::doctor
