// What TCP over loopback gives a plain exchange, measured in the same run as
// loom and the anchors: two "ranks" (threads, or processes with
// --processes) each sending `bytes` to the other and receiving as many at
// once over 127.0.0.1 (non-blocking sockets, TCP_NODELAY, spinning on the
// sockets for 50 us before a poll), at every power of two from 32 KiB to
// 128 MiB, plus the time of one 8-byte exchange back to back (left out when
// --min-bytes is given). No protocol, no reduction, no copies of our own:
// the kernel's cost of moving the bytes, which every 2-rank collective over
// TCP pays. A 2-rank all-reduce of S bytes sends and receives at least S per
// rank (its ring: two halves), a reduce-scatter or all-gather S/2; so
// perf/compare_report.py sets each one's busbw against this exchange of the
// same bytes. It is the link as a plain program sees it, not a strict
// bound: more sockets could do better.
//
// Each size runs in four setups and the fastest is printed (all four with
// --verbose): the kernel's default socket buffers or loom's for connections
// that stay on the host (fixed, the send buffer by message size:
// transports/tcp/connection.h), and one socket carrying both directions or
// one socket per direction (what loom does since this tool showed the
// difference). Each size is also timed
// with a copy of the sent bytes into a third buffer, before the exchange,
// each piece as the socket takes it, or a slice at a time while the sockets
// are idle ("us +copy", the fastest in any setup): an out-of-place
// all-gather must also copy its own block, and on loopback both cores are
// busy in the kernel's copies.
//
// --setup I times only setup I (0-3, in --verbose's order; 3 is loom's
// own) and leaves the +copy timings out: one way alone, to profile it or
// count its system calls (perf stat) against loom's.
//
//   tcp_exchange_bench [--min-bytes N] [--max-bytes N] [--reps R] [--processes] [--verbose]
//                      [--setup I]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transports/tcp/connection.h"

namespace {

using loom::TcpConnection;

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "tcp_exchange_bench: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, FreeDeleter>;

Buffer MakeTouched(size_t bytes) {
  Buffer b(static_cast<char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)));
  if (!b) Die("cannot allocate the buffers");
  std::memset(b.get(), 1, bytes);
  return b;
}

// A connected pair over 127.0.0.1, both ends non-blocking with TCP_NODELAY;
// loom_buffers: the send and receive buffers loom gives a connection that
// stays on the host (TcpConnection's: the send buffer then follows the
// message size, LoomSendBuffer); otherwise the kernel's defaults,
// autotuned.
std::pair<int, int> ConnectedPair(bool loom_buffers) {
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  if (lfd < 0) Die("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), len) != 0) Die("bind 127.0.0.1");
  if (listen(lfd, 1) != 0) Die("listen");
  if (getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) Die("getsockname");
  const int a = socket(AF_INET, SOCK_STREAM, 0);
  if (a < 0) Die("socket");
  if (connect(a, reinterpret_cast<sockaddr*>(&addr), len) != 0) Die("connect 127.0.0.1");
  const int b = accept(lfd, nullptr, nullptr);
  if (b < 0) Die("accept");
  close(lfd);
  for (int fd : {a, b}) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (loom_buffers) {
      TcpConnection::SetSendBuffer(fd, TcpConnection::kLocalSendBufferBytes);
      TcpConnection::FixReceiveBuffer(fd);
    }
    const int flags = fcntl(fd, F_GETFL, 0);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  }
  return {a, b};
}

// The send buffer loom gives such a socket while it sends messages of
// `bytes` (TcpConnection::LocalSendBufferFor).
void LoomSendBuffer(int fd, size_t bytes) {
  TcpConnection::SetSendBuffer(fd, TcpConnection::LocalSendBufferFor(bytes));
}

// A copy of the rank's own block into its output, made with an exchange
// (an out-of-place all-gather's): before it, each piece right after the
// socket took it (still in cache; loom's way), or a slice at a time while
// the sockets have nothing to give or take.
struct OwnCopy {
  enum class When { kNone, kBefore, kAsSent, kWhileIdle };
  When when = When::kNone;
  char* dst = nullptr;
  size_t bytes = 0;
};

// Sends n bytes on send_fd and receives n on recv_fd at once (the same
// socket, or one per direction); spins on the sockets for up to 50 us
// without progress, then polls. Copies send_buf into copy.dst as `copy` says.
void Exchange(int send_fd, int recv_fd, const char* send_buf, char* recv_buf, size_t n,
              const OwnCopy& copy = {}) {
  constexpr size_t kCopySlice = size_t{64} << 10;
  size_t sent = 0, got = 0, copied = 0;
  if (copy.when == OwnCopy::When::kBefore) {
    std::memcpy(copy.dst, send_buf, copy.bytes);
    copied = copy.bytes;
  }
  auto copy_slice = [&] {
    const size_t k = std::min(kCopySlice, copy.bytes - copied);
    std::memcpy(copy.dst + copied, send_buf + copied, k);
    copied += k;
  };
  auto idle_since = Clock::time_point{};
  while (sent < n || got < n) {
    bool moved = false;
    if (sent < n) {
      const ssize_t w = send(send_fd, send_buf + sent, n - sent, MSG_NOSIGNAL);
      if (w > 0) {
        if (copy.when == OwnCopy::When::kAsSent) {
          std::memcpy(copy.dst + sent, send_buf + sent, static_cast<size_t>(w));
          copied += static_cast<size_t>(w);
        }
        sent += static_cast<size_t>(w);
        moved = true;
      } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        Die("send");
      }
    }
    if (got < n) {
      const ssize_t r = recv(recv_fd, recv_buf + got, n - got, 0);
      if (r > 0) {
        got += static_cast<size_t>(r);
        moved = true;
      } else if (r == 0) {
        errno = ECONNRESET;
        Die("recv: the peer closed");
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        Die("recv");
      }
    }
    if (moved) {
      idle_since = {};
      continue;
    }
    if (copy.when == OwnCopy::When::kWhileIdle && copied < copy.bytes) {
      copy_slice();
      continue;
    }
    const auto now = Clock::now();
    if (idle_since == Clock::time_point{}) idle_since = now;
    if (now - idle_since < std::chrono::microseconds(50)) continue;
    pollfd p[2] = {{send_fd, static_cast<short>(sent < n ? POLLOUT : 0), 0},
                   {recv_fd, static_cast<short>(got < n ? POLLIN : 0), 0}};
    if (poll(p, 2, 1000) < 0 && errno != EINTR) Die("poll");
  }
  while (copied < copy.bytes) copy_slice();  // kWhileIdle: what idle time did not cover
}

// Median seconds per exchange of `bytes` on one side: `reps` timed regions
// of `rounds` exchanges each after one to warm up; `sync` lines both sides
// up before a region and after it, so side 0's region ends when the slower
// side is done.
template <typename Sync>
double TimeExchange(int send_fd, int recv_fd, const char* send_buf, char* recv_buf, size_t bytes,
                    int rounds, int reps, Sync&& sync, const OwnCopy& copy = {}) {
  std::vector<double> per_round;
  for (int rep = 0; rep < reps + 1; ++rep) {
    sync();
    const auto t0 = Clock::now();
    for (int i = 0; i < rounds; ++i) Exchange(send_fd, recv_fd, send_buf, recv_buf, bytes, copy);
    sync();
    if (rep > 0)
      per_round.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / rounds);
  }
  std::sort(per_round.begin(), per_round.end());
  return per_round[per_round.size() / 2];
}

// "256K", "16M", "1G" or plain bytes; 0 when it is none of these.
size_t ParseBytes(const std::string& s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  const std::string unit = end;
  if (unit.empty()) return v;
  if (unit == "K") return v << 10;
  if (unit == "M") return v << 20;
  if (unit == "G") return v << 30;
  return 0;
}

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "tcp_exchange_bench: %s\nusage: tcp_exchange_bench [--min-bytes N] [--max-bytes N] "
               "[--reps R] [--processes] [--verbose] [--setup I]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  size_t min_bytes = size_t{32} << 10, max_bytes = size_t{128} << 20;
  int reps = 5, only = -1;
  bool processes = false, latency = true, verbose = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--processes" || arg == "--verbose") {
      (arg == "--processes" ? processes : verbose) = true;
      continue;
    }
    if (i + 1 >= argc) Usage(("missing value for " + arg).c_str());
    const std::string value = argv[++i];
    if (arg == "--min-bytes") {
      min_bytes = ParseBytes(value);
      latency = false;
    } else if (arg == "--max-bytes") {
      max_bytes = ParseBytes(value);
    } else if (arg == "--reps") {
      reps = std::atoi(value.c_str());
    } else if (arg == "--setup") {
      only = std::atoi(value.c_str());
      if (only < 0 || only > 3 || value.find_first_not_of("0123") != std::string::npos) {
        Usage("--setup takes 0, 1, 2 or 3");
      }
    } else {
      Usage(("unknown flag " + arg).c_str());
    }
  }
  if (min_bytes == 0 || max_bytes < min_bytes) {
    Usage("--min-bytes and --max-bytes: sizes in bytes, or with K, M or G, the least first");
  }
  if (reps < 1) Usage("--reps must be at least 1");

  // Each configuration has two connected pairs. With one socket, side i
  // sends and receives on its end of pair 0; with a socket per direction,
  // side 0 sends on pair 0 and receives on pair 1, side 1 the other way.
  struct Config {
    const char* name;
    bool loom_buffers;
    bool per_direction;
    int fds[2][2];  // [pair][end]
    int send_fd(int me) const { return per_direction ? fds[me][0] : fds[0][me]; }
    int recv_fd(int me) const { return per_direction ? fds[1 - me][1] : fds[0][me]; }
  };
  Config configs[] = {{"default", false, false, {}},
                      {"loom's buffers", true, false, {}},
                      {"default, a socket per direction", false, true, {}},
                      {"loom's buffers, a socket per direction", true, true, {}}};
  for (Config& c : configs) {
    for (auto& pair : c.fds) {
      const auto [a, b] = ConnectedPair(c.loom_buffers);
      pair[0] = a;
      pair[1] = b;
    }
  }
  std::vector<size_t> sizes;
  if (latency) sizes.push_back(8);  // the 8-byte exchange, unless --min-bytes is given
  for (size_t s = min_bytes; s <= max_bytes; s *= 2) sizes.push_back(s);
  // Every side runs the same sweep; side 0 prints. Buffers are allocated
  // and touched by the side that uses them (after the fork: no copy-on-write).
  constexpr int kConfigs = sizeof(configs) / sizeof(configs[0]);
  auto side = [&](int me, auto&& sync) {
    const Buffer send_buf = MakeTouched(max_bytes), recv_buf = MakeTouched(max_bytes),
                 own_buf = MakeTouched(max_bytes);
    if (me == 0) {
      std::printf(
          "# TCP over 127.0.0.1: 2 %s, each sends and receives the bytes at once; "
          "median of %d, the fastest of %d setups; +copy: each also copies the bytes it "
          "sends into another buffer (an out-of-place all-gather's own block), before the "
          "exchange, as the socket takes them or while the sockets are idle, the fastest\n",
          processes ? "processes" : "threads", reps, only >= 0 ? 1 : kConfigs);
      std::printf("# %11s %12s %9s %12s  %s\n", "bytes", "us", "GB/s", "us +copy",
                  "the fastest: socket buffers, sockets");
    }
    for (size_t bytes : sizes) {
      // About 64 MiB per timed region, at least one exchange; 8 B gets 10000.
      const int rounds =
          bytes <= 8 ? 10000 : static_cast<int>(std::max<size_t>(1, (size_t{64} << 20) / bytes));
      double best = 0, best_copy = 0;
      const char* best_name = "";
      for (int c = 0; c < kConfigs; ++c) {
        if (only >= 0 && c != only) continue;
        const Config& config = configs[c];
        if (config.loom_buffers) LoomSendBuffer(config.send_fd(me), bytes);
        auto time = [&](OwnCopy::When when) {
          const OwnCopy copy{when, own_buf.get(), when == OwnCopy::When::kNone ? 0 : bytes};
          return TimeExchange(
              config.send_fd(me), config.recv_fd(me), send_buf.get(), recv_buf.get(), bytes, rounds,
              reps, [&] { sync(c); }, copy);
        };
        const double t = time(OwnCopy::When::kNone);
        // The 8-byte row is a latency: a copy of 8 bytes adds nothing to time.
        const bool copies = bytes > 8 && only < 0;
        const double before = copies ? time(OwnCopy::When::kBefore) : t;
        const double as_sent = copies ? time(OwnCopy::When::kAsSent) : t;
        const double idle = copies ? time(OwnCopy::When::kWhileIdle) : t;
        const double with_copy = std::min({before, as_sent, idle});
        if (me == 0 && verbose && copies) {
          std::printf(
              "# %11zu %12.2f %9s %12.2f  %s (+copy before %.2f, as sent %.2f, while idle %.2f)\n",
              bytes, t * 1e6, "", with_copy * 1e6, config.name, before * 1e6, as_sent * 1e6,
              idle * 1e6);
        } else if (me == 0 && verbose) {
          std::printf("# %11zu %12.2f %9s %12s  %s\n", bytes, t * 1e6, "", "-", config.name);
        }
        if (best == 0 || t < best) {
          best = t;
          best_name = config.name;
        }
        best_copy = best_copy == 0 ? with_copy : std::min(best_copy, with_copy);
      }
      if (me == 0) {
        char copy_us[32] = "-";
        if (only < 0) std::snprintf(copy_us, sizeof(copy_us), "%.2f", best_copy * 1e6);
        std::printf("  %11zu %12.2f %9.3f %12s  %s\n", bytes, best * 1e6,
                    static_cast<double>(bytes) / best / 1e9, copy_us, best_name);
        std::fflush(stdout);
      }
    }
  };
  if (processes) {
    // The sides line up by exchanging one byte over the pair they time.
    auto token = [&](int me) {
      return [&, me](int c) {
        char out = 1, in = 0;
        Exchange(configs[c].send_fd(me), configs[c].recv_fd(me), &out, &in, 1);
      };
    };
    const pid_t child = fork();
    if (child < 0) Die("fork");
    if (child == 0) {
      side(1, token(1));
      std::_Exit(0);
    }
    side(0, token(0));
    int wstatus = 0;
    if (waitpid(child, &wstatus, 0) != child || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      std::fprintf(stderr, "tcp_exchange_bench: the second process failed\n");
      return 1;
    }
  } else {
    std::barrier barrier(2);
    auto sync = [&](int) { barrier.arrive_and_wait(); };
    std::thread other([&] { side(1, sync); });
    side(0, sync);
    other.join();
  }
  for (Config& c : configs) {
    for (auto& pair : c.fds) {
      for (int fd : pair) close(fd);
    }
  }
  return 0;
}
