// Plain-TCP probes, messages, the probe listener and bandwidth streams.
#include "tools/doctor/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "topology/inet_address.h"

namespace loom::doctor {

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::string Errno(int e) { return std::strerror(e); }

// Waits for `events` on fd until the deadline; true when ready.
bool WaitFor(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, static_cast<int>(deadline.RemainingMs(1000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
    if (deadline.expired()) return false;
  }
}

Status WriteAll(int fd, const void* data, size_t n, Deadline deadline, const std::string& peer) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (!WaitFor(fd, POLLOUT, deadline)) return TimeoutError("doctor: sending to " + peer + " timed out");
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (w < 0) return SystemError("doctor: sending to " + peer + ": " + Errno(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status ReadAll(int fd, void* data, size_t n, Deadline deadline, const std::string& peer) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (!WaitFor(fd, POLLIN, deadline)) return TimeoutError("doctor: no answer from " + peer + " in time");
    const ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r < 0) return SystemError("doctor: reading from " + peer + ": " + Errno(errno));
    if (r == 0) return RemoteError("doctor: " + peer + " closed the connection");
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

constexpr char kStreamMagic[8] = {'L', 'O', 'O', 'M', 'B', 'W', '0', '1'};

void PutU64(uint64_t v, unsigned char* out) {
  for (int i = 7; i >= 0; --i, v >>= 8) out[i] = static_cast<unsigned char>(v);
}
uint64_t GetU64(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | in[i];
  return v;
}

// Serves one accepted connection: a bare probe or a stream.
void ServeOne(Fd conn, const std::atomic<bool>& stop) {
  char magic[8];
  if (!ReadAll(conn.get(), magic, sizeof magic, Deadline::After(std::chrono::seconds(2)), "prober").ok() ||
      std::memcmp(magic, kStreamMagic, sizeof magic) != 0) {
    return;  // a probe: it connected, which is all it wanted to know
  }
  std::vector<char> buf(1 << 18);
  uint64_t total = 0;
  const Deadline give_up = Deadline::After(std::chrono::seconds(120));
  while (!stop.load() && !give_up.expired()) {
    if (!WaitFor(conn.get(), POLLIN, Deadline::After(std::chrono::milliseconds(200)))) continue;
    const ssize_t r = recv(conn.get(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r <= 0) break;
    total += static_cast<uint64_t>(r);
  }
  unsigned char receipt[8];
  PutU64(total, receipt);
  (void)WriteAll(conn.get(), receipt, sizeof receipt, Deadline::After(std::chrono::seconds(2)), "streamer");
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) close(fd_);
}

int Fd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

Probe ConnectProbe(const std::string& address, int port, int timeout_ms, Fd* connected) {
  Probe p;
  p.address = address;
  p.port = port;
  const auto start = Clock::now();
  auto addr = ParseIpAddress(address);
  if (!addr.ok()) {
    p.outcome = ProbeOutcome::kError;
    p.detail = addr.status().message();
    return p;
  }
  sockaddr_storage ss = addr.value();
  if (ss.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(static_cast<uint16_t>(port));
  }
  const auto* sa = reinterpret_cast<const sockaddr*>(&ss);
  Fd fd(socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  int err = 0;
  if (!fd.valid()) {
    err = errno;
  } else if (connect(fd.get(), sa, SockaddrLen(sa)) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd pf{fd.get(), POLLOUT, 0};
      int rc;
      do {
        rc = poll(&pf, 1, timeout_ms);
      } while (rc < 0 && errno == EINTR);
      if (rc == 0) {
        err = ETIMEDOUT;
      } else {
        socklen_t len = sizeof err;
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
  }
  p.ms = MsSince(start);
  switch (err) {
    case 0: p.outcome = ProbeOutcome::kOk; break;
    case ECONNREFUSED: p.outcome = ProbeOutcome::kRefused; break;
    case ETIMEDOUT: p.outcome = ProbeOutcome::kTimeout; break;
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EADDRNOTAVAIL: p.outcome = ProbeOutcome::kUnreachable; break;
    default: p.outcome = ProbeOutcome::kError;
  }
  if (err == ETIMEDOUT) {
    p.detail = "no answer within " + std::to_string(timeout_ms) + " ms";
  } else if (err != 0) {
    p.detail = Errno(err);
  }
  if (err == 0 && connected != nullptr) *connected = std::move(fd);
  return p;
}

Result<Fd> ListenAny(int port) {
  for (int family : {AF_INET6, AF_INET}) {
    Fd fd(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) continue;
    const int one = 1, zero = 0;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage ss{};
    if (family == AF_INET6) {
      setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_any;
      a->sin6_port = htons(static_cast<uint16_t>(port));
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_ANY);
      a->sin_port = htons(static_cast<uint16_t>(port));
    }
    const auto* sa = reinterpret_cast<const sockaddr*>(&ss);
    if (bind(fd.get(), sa, SockaddrLen(sa)) != 0) {
      if (errno == EADDRINUSE) {
        return SystemError("doctor: TCP port " + std::to_string(port) +
                           " is in use here (a running job or another doctor?); pick another port");
      }
      continue;
    }
    if (listen(fd.get(), 128) != 0) continue;
    return fd;
  }
  return SystemError("doctor: cannot listen on TCP port " + std::to_string(port) + ": " + Errno(errno));
}

int LocalPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  return SockaddrPort(reinterpret_cast<const sockaddr*>(&ss));
}

Result<Fd> AcceptBefore(int listen_fd, Deadline deadline) {
  while (WaitFor(listen_fd, POLLIN, deadline)) {
    const int c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c >= 0) return Fd(c);
    if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN) {
      return SystemError("doctor: accept: " + Errno(errno));
    }
  }
  return TimeoutError("doctor: no connection before the deadline");
}

Status SendMessage(int fd, const json::Value& msg, Deadline deadline, const std::string& peer) {
  const std::string body = json::Dump(msg);
  unsigned char len[4];
  const uint32_t n = static_cast<uint32_t>(body.size());
  len[0] = static_cast<unsigned char>(n >> 24), len[1] = static_cast<unsigned char>(n >> 16);
  len[2] = static_cast<unsigned char>(n >> 8), len[3] = static_cast<unsigned char>(n);
  LOOM_TRY(WriteAll(fd, len, sizeof len, deadline, peer));
  return WriteAll(fd, body.data(), body.size(), deadline, peer);
}

Result<json::Value> RecvMessage(int fd, Deadline deadline, const std::string& peer) {
  unsigned char len[4];
  LOOM_TRY(ReadAll(fd, len, sizeof len, deadline, peer));
  const uint32_t n = (uint32_t{len[0]} << 24) | (uint32_t{len[1]} << 16) | (uint32_t{len[2]} << 8) | len[3];
  if (n > (16u << 20)) {
    return InvalidArgument("doctor: " + peer + " sent a " + std::to_string(n) +
                           "-byte message: not a loom doctor (wrong port?)");
  }
  std::string body(n, '\0');
  LOOM_TRY(ReadAll(fd, body.data(), n, deadline, peer));
  auto v = json::Parse(body);
  if (!v.ok()) return InvalidArgument("doctor: " + peer + " sent a malformed message: " + v.status().message());
  return v;
}

Result<std::unique_ptr<ProbeListener>> ProbeListener::Start(int port) {
  LOOM_ASSIGN_OR_RETURN(Fd fd, ListenAny(port));
  const int bound = LocalPort(fd.get());
  return std::unique_ptr<ProbeListener>(new ProbeListener(std::move(fd), bound));
}

ProbeListener::ProbeListener(Fd fd, int port) : fd_(std::move(fd)), port_(port) {
  thread_ = std::thread([this] { Serve(); });
}

ProbeListener::~ProbeListener() {
  stop_ = true;
  thread_.join();
}

void ProbeListener::Serve() {
  while (!stop_.load()) {
    auto conn = AcceptBefore(fd_.get(), Deadline::After(std::chrono::milliseconds(200)));
    if (conn.ok()) ServeOne(std::move(conn).value(), stop_);
  }
}

Stream StreamTo(const std::string& address, int port, double seconds, int64_t max_bytes, int timeout_ms) {
  Stream s;
  Fd fd;
  Probe p = ConnectProbe(address, port, timeout_ms, &fd);
  if (p.outcome != ProbeOutcome::kOk) {
    s.error = "connect " + address + ":" + std::to_string(port) + " " + Name(p.outcome) + " (" + p.detail + ")";
    return s;
  }
  const std::string peer = address + ":" + std::to_string(port);
  const auto start = Clock::now();
  const Deadline send_until = Deadline::After(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  const Deadline hard = Deadline::After(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000) + timeout_ms));
  Status st = WriteAll(fd.get(), kStreamMagic, sizeof kStreamMagic, hard, peer);
  std::vector<char> buf(1 << 18, 'x');
  int64_t sent = 0;
  while (st.ok() && !send_until.expired() && sent < max_bytes) {
    if (!WaitFor(fd.get(), POLLOUT, send_until)) break;
    const ssize_t w = send(fd.get(), buf.data(), buf.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (w < 0) st = SystemError("doctor: streaming to " + peer + ": " + Errno(errno));
    else sent += w;
  }
  unsigned char receipt[8];
  if (st.ok()) {
    shutdown(fd.get(), SHUT_WR);
    // The receiver drains what is still queued, so the receipt time covers it.
    st = ReadAll(fd.get(), receipt, sizeof receipt,
                 Deadline::After(std::chrono::milliseconds(timeout_ms + static_cast<int64_t>(seconds * 4000))), peer);
  }
  if (!st.ok()) {
    s.error = st.message();
    return s;
  }
  s.seconds = MsSince(start) / 1000;
  s.bytes = static_cast<int64_t>(GetU64(receipt));
  return s;
}

}  // namespace loom::doctor
