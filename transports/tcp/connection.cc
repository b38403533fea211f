// TcpConnection: a bulk lane with one set of sockets per direction (the
// header, padded to a cache line, on the direction's first socket, payload
// striped over its sockets in kStripeBytes units) and a small lane of one
// socket both ways; each socket walks its lane's posted transfers in order,
// so its byte stream matches the peer's. Receives that reduce go through a
// per-socket bounce buffer.
#include "transports/tcp/connection.h"

#include <fcntl.h>
#include <linux/tcp.h>  // not netinet/tcp.h: its tcp_info lacks tcpi_notsent_bytes and tcpi_snd_wnd
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "base/log.h"
#include "transports/streaming.h"

namespace loom {

namespace {

constexpr size_t U = TcpConnection::kStripeBytes;

bool WouldBlock(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

// How far one send or plain receive from message offset g may reach: the
// end of g's unit with several sockets (the next unit belongs to another
// socket); with one, the end of the message. Stopping at every unit end
// there split each 256 KiB unit into a send the socket buffer could take and
// a 212-byte remainder, a segment of its own.
size_t UnitEnd(size_t g, size_t bytes, int nsocks) {
  return nsocks == 1 ? bytes : std::min(bytes, (g / U + 1) * U);
}

}  // namespace

bool TcpConnection::StaysOnHost(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof(local), pl = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0 ||
      local.ss_family != peer.ss_family) {
    return false;
  }
  if (peer.ss_family == AF_INET) {
    const in_addr a = reinterpret_cast<const sockaddr_in&>(local).sin_addr;
    const in_addr b = reinterpret_cast<const sockaddr_in&>(peer).sin_addr;
    return a.s_addr == b.s_addr || (ntohl(b.s_addr) >> 24) == 127;
  }
  if (peer.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6&>(local).sin6_addr;
    const in6_addr& b = reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr;
    return IN6_ARE_ADDR_EQUAL(&a, &b) || IN6_IS_ADDR_LOOPBACK(&b);
  }
  return false;
}

// SO_RCVBUF is cut to net.core.rmem_max (212992 bytes by default), and a
// buffer that small slows large transfers below what autotuning gives: where the cap is lower and CAP_NET_ADMIN (which
// SO_RCVBUFFORCE needs) is missing, autotuning stays, once said.
void TcpConnection::FixReceiveBuffer(int fd) {
  const int want = kLocalReceiveBufferBytes;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof(want)) == 0) return;
  // Read once: every socket of every connection comes here when not root.
  static const long cap = [] {
    long v = 0;
    if (FILE* f = std::fopen("/proc/sys/net/core/rmem_max", "r")) {
      if (std::fscanf(f, "%ld", &v) != 1) v = 0;
      std::fclose(f);
    }
    return v;
  }();
  if (cap >= want) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof(want));
    return;
  }
  static std::once_flag said;
  std::call_once(said, [] {
    LOOM_INFO(log::kNet,
              "NET/Socket : receive buffers on this host left to autotuning: net.core.rmem_max "
              "is %ld, below %d, and SO_RCVBUFFORCE is not permitted (raise rmem_max to fix "
              "them, which loopback transfers prefer)",
              cap, kLocalReceiveBufferBytes);
  });
}

// SO_SNDBUF is cut to net.core.wmem_max (212992 bytes by default, below the
// large size): SO_SNDBUFFORCE where permitted, else what the cap allows.
void TcpConnection::SetSendBuffer(int fd, int bytes) {
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) == 0) return;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
}

void TcpConnection::FitSendBuffer(Socket& sock, size_t bytes) {
  if (sock.sndbuf == 0) return;
  const int want = LocalSendBufferFor(bytes);
  if (want == sock.sndbuf) return;
  SetSendBuffer(sock.fd, want);
  sock.sndbuf = want;
}

size_t TcpConnection::Share(size_t bytes, int s, int n) {
  const size_t full = bytes / U, rem = bytes % U;
  size_t units = full / n + (static_cast<size_t>(s) < full % n ? 1 : 0);
  size_t share = units * U;
  if (rem > 0 && full % n == static_cast<size_t>(s)) share += rem;
  return share;
}

size_t TcpConnection::MessageOffset(size_t local, int s, int n) {
  return ((local / U) * n + s) * U + local % U;
}

TcpConnection::TcpConnection(int peer, bool lower, std::string peer_host, std::string via,
                             std::vector<int> fds, int small_fd)
    : peer_(peer), peer_host_(std::move(peer_host)), via_(std::move(via)) {
  const int n = static_cast<int>(fds.size()), half = n / 2;
  Lane& bulk = lanes_.emplace_back();
  for (int i = 0; i < n; ++i) {
    if (n == 1) {
      bulk.send_socks.push_back(i);
      bulk.recv_socks.push_back(i);
    } else {
      ((i < half) == lower ? bulk.send_socks : bulk.recv_socks).push_back(i);
    }
  }
  if (small_fd >= 0) {
    Lane& small = lanes_.emplace_back();
    small.header_bytes = sizeof(MessageHeader);
    small.send_socks.push_back(n);
    small.recv_socks.push_back(n);
    fds.push_back(small_fd);
  }
  for (int fd : fds) {
    int flags = fcntl(fd, F_GETFL, 0);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Socket& sock = socks_.emplace_back();
    sock.fd = fd;
    if (StaysOnHost(fd)) {
      SetSendBuffer(fd, kLocalSendBufferBytes);
      sock.sndbuf = kLocalSendBufferBytes;
      FixReceiveBuffer(fd);
    }
  }
}

TcpConnection::~TcpConnection() {
  for (Socket& s : socks_) close(s.fd);
}

void TcpConnection::PostedQueue::push_back(Transfer* t, size_t nsocks) {
  if (count_ == slots_.size()) {
    // Full (or never used): twice the room, the entries in order from 0.
    std::vector<Posted> grown(std::max<size_t>(4, 2 * slots_.size()));
    for (size_t i = 0; i < count_; ++i) grown[i] = std::move(at(i));
    slots_ = std::move(grown);
    head_ = 0;
  }
  Posted& p = slots_[(head_ + count_) & (slots_.size() - 1)];
  p.t = t;
  p.moved.assign(nsocks, 0);
  ++count_;
}

void TcpConnection::PostSend(Transfer* t) {
  t->seq = send_seq_++;
  Lane& l = LaneFor(t->bytes);
  l.sends.push_back(t, l.send_socks.size());
}

void TcpConnection::PostRecv(Transfer* t) {
  t->seq = recv_seq_++;
  Lane& l = LaneFor(t->bytes);
  l.recvs.push_back(t, l.recv_socks.size());
}

bool TcpConnection::idle() const {
  for (const Lane& l : lanes_) {
    if (!l.sends.empty() || !l.recvs.empty()) return false;
  }
  return true;
}

std::string TcpConnection::Describe() const {
  return "rank " + std::to_string(peer_) + " (" + peer_host_ + ", via " + via_ + ")";
}

std::optional<LinkStall> TcpConnection::SendStall() const {
  std::optional<LinkStall> worst;
  for (const Socket& sock : socks_) {
    tcp_info ti{};
    socklen_t len = sizeof(ti);
    if (getsockopt(sock.fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) continue;
    // Kernels before 5.4 fill less: then the window is unknown, and data
    // that did not leave may only wait for a closed window.
    const bool knows_window = len >= offsetof(tcp_info, tcpi_snd_wnd) + sizeof(ti.tcpi_snd_wnd);
    LinkStall st;
    st.peer = peer_;
    st.silent_ms = ti.tcpi_last_ack_recv;
    if (ti.tcpi_unacked > 0 && ti.tcpi_retransmits > 0) {
      st.retransmits = ti.tcpi_retransmits;
    } else if (knows_window && ti.tcpi_notsent_bytes > 0 && ti.tcpi_snd_wnd > 0 &&
               ti.tcpi_probes > 0) {
      // The peer's window is open, yet the kernel only probes: sending fails here.
      st.unsent = true;
      st.retransmits = ti.tcpi_probes;
    } else {
      continue;
    }
    if (st.silent_ms < kStallSilenceMs) continue;
    int queued = 0;
    if (ioctl(sock.fd, TIOCOUTQ, &queued) == 0 && queued > 0)
      st.bytes = static_cast<uint64_t>(queued);
    if (!worst || st.silent_ms > worst->silent_ms) worst = st;
  }
  return worst;
}

Status TcpConnection::PeerError(const char* what, int err) const {
  if (err == 0 || err == ECONNRESET || err == EPIPE) {
    return RemoteError(Describe() + " closed the connection during " + what +
                       ": that rank exited, crashed or aborted");
  }
  return SystemError(std::string(what) + " with " + Describe(), err);
}

// Does socket s still have bytes of p to move?
bool TcpConnection::Pending(const Posted& p, int s, int n) {
  return p.moved[s] < Share(p.t->bytes, s, n);
}

// A socket that carries both directions (a single one) gets two entries,
// one per direction; poll accepts the same descriptor twice.
void TcpConnection::AppendPollFds(std::vector<pollfd>* fds) const {
  for (const Lane& l : lanes_) {
    for (int s = 0; s < l.nrecv(); ++s) {
      for (const Posted& p : l.recvs) {
        if ((s == 0 && !p.t->header_done) || Pending(p, s, l.nrecv())) {
          fds->push_back(pollfd{socks_[l.recv_socks[s]].fd, POLLIN, 0});
          break;
        }
      }
    }
    for (int s = 0; s < l.nsend(); ++s) {
      for (const Posted& p : l.sends) {
        if (s == 0 && !p.t->header_done) {
          fds->push_back(pollfd{socks_[l.send_socks[s]].fd, POLLOUT, 0});
          break;
        }
        if (!Pending(p, s, l.nsend())) continue;
        // A send waiting on its gate waits for local progress, not the socket.
        if (MessageOffset(p.moved[s], s, l.nsend()) < p.t->Allowed()) {
          fds->push_back(pollfd{socks_[l.send_socks[s]].fd, POLLOUT, 0});
        }
        break;
      }
    }
  }
}

// The header goes out in one sendmsg with the start of socket 0's first
// unit (as far as the gate allows), so a small message is one segment and
// one system call, not two.
Result<bool> TcpConnection::SendHeader(Lane& l, Posted& p) {
  Transfer* t = p.t;
  if (l.send_hdr_off == 0) {
    l.send_hdr.h = MessageHeader{t->bytes, t->seq, static_cast<uint8_t>(t->kind), kHeaderMagic, 0};
  }
  const size_t payload = std::min(UnitEnd(0, t->bytes, l.nsend()), t->Allowed());
  bool moved = false;
  while (l.send_hdr_off < l.header_bytes) {
    iovec iov[2] = {
        {reinterpret_cast<char*>(&l.send_hdr) + l.send_hdr_off, l.header_bytes - l.send_hdr_off},
        {const_cast<void*>(t->src), payload}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = payload > 0 ? 2 : 1;
    ssize_t n = ::sendmsg(socks_[l.send_socks[0]].fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (WouldBlock(errno)) return moved;
      if (errno == EINTR) continue;
      return PeerError("send", errno);
    }
    const size_t to_header = std::min(static_cast<size_t>(n), iov[0].iov_len);
    l.send_hdr_off += to_header;
    p.moved[0] += static_cast<size_t>(n) - to_header;
    moved = true;
  }
  l.send_hdr_off = 0;
  t->header_done = true;
  return moved;
}

// The header is read together with whatever follows it of socket 0's first
// unit, into the destination (or the bounce buffer when reducing) as far as
// the gate allows; the bytes count only once the header has been checked.
Result<bool> TcpConnection::RecvHeader(Lane& l, Posted& p) {
  Transfer* t = p.t;
  Socket& sock = socks_[l.recv_socks[0]];
  const size_t room = std::min({t->bytes, U, t->Allowed()});
  char* into = nullptr;
  if (t->reduce_with == nullptr) {
    into = static_cast<char*>(t->dst);
  } else {
    if (sock.bounce.empty()) sock.bounce.resize(U);
    into = sock.bounce.data();  // empty between messages: head = fill = 0
  }
  bool moved = false;
  size_t extra = 0;
  while (l.recv_hdr_off < l.header_bytes) {
    iovec iov[2] = {
        {reinterpret_cast<char*>(&l.recv_hdr) + l.recv_hdr_off, l.header_bytes - l.recv_hdr_off},
        {into + extra, room - extra}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = room > extra ? 2 : 1;
    ssize_t n = ::recvmsg(sock.fd, &msg, MSG_DONTWAIT);
    if (n == 0) return PeerError("receive", 0);
    if (n < 0) {
      if (WouldBlock(errno)) break;
      if (errno == EINTR) continue;
      return PeerError("receive", errno);
    }
    const size_t to_header = std::min(static_cast<size_t>(n), iov[0].iov_len);
    l.recv_hdr_off += to_header;
    extra += static_cast<size_t>(n) - to_header;
    moved = true;
  }
  if (l.recv_hdr_off < l.header_bytes) {
    // Payload bytes arrive only after the whole header, so none were read.
    return moved;
  }
  l.recv_hdr_off = 0;
  LOOM_TRY(CheckHeader(l.recv_hdr.h, *t, *this));
  t->header_done = true;
  if (t->reduce_with == nullptr) {
    p.moved[0] += extra;
  } else {
    sock.bounce_fill += extra;
  }
  return true;
}

// Socket s moves its share of each posted send in order; it stops at the
// first transfer it cannot finish (socket full, or gated).
Result<bool> TcpConnection::SendOn(Lane& l, int s) {
  bool moved = false;
  const int n = l.nsend();
  Socket& sock = socks_[l.send_socks[s]];
  const int fd = sock.fd;
  for (Posted& p : l.sends) {
    Transfer* t = p.t;
    const size_t share = Share(t->bytes, s, n);
    if (p.moved[s] < share) FitSendBuffer(sock, share);
    if (s == 0 && !t->header_done) {
      LOOM_ASSIGN_OR_RETURN(bool m, SendHeader(l, p));
      moved |= m;
      if (!t->header_done) return moved;
    }
    while (p.moved[s] < share) {
      const size_t g = MessageOffset(p.moved[s], s, n);
      const size_t unit_end = UnitEnd(g, t->bytes, n);
      const size_t limit = std::min(unit_end, t->Allowed());
      if (g >= limit) return moved;  // gated
      ssize_t r =
          ::send(fd, static_cast<const char*>(t->src) + g, limit - g, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r < 0) {
        if (WouldBlock(errno)) return moved;
        if (errno == EINTR) continue;
        return PeerError("send", errno);
      }
      p.moved[s] += static_cast<size_t>(r);
      moved = true;
      // A short send filled the socket buffer: the next would only fail.
      if (static_cast<size_t>(r) < limit - g) return moved;
    }
  }
  return moved;
}

Result<bool> TcpConnection::RecvOn(Lane& l, int s) {
  bool moved = false;
  const int n = l.nrecv();
  Socket& sock = socks_[l.recv_socks[s]];
  for (Posted& p : l.recvs) {
    Transfer* t = p.t;
    if (!t->header_done) {
      // Payload is placed only after socket 0 has checked the header.
      if (s != 0) return moved;
      LOOM_ASSIGN_OR_RETURN(bool m, RecvHeader(l, p));
      moved |= m;
      if (!t->header_done) return moved;
    }
    const size_t share = Share(t->bytes, s, n);
    if (t->reduce_with == nullptr) {
      while (p.moved[s] < share) {
        const size_t g = MessageOffset(p.moved[s], s, n);
        const size_t limit = std::min(UnitEnd(g, t->bytes, n), t->Allowed());
        if (g >= limit) return moved;
        ssize_t r = ::recv(sock.fd, static_cast<char*>(t->dst) + g, limit - g, MSG_DONTWAIT);
        if (r == 0) return PeerError("receive", 0);
        if (r < 0) {
          if (WouldBlock(errno)) return moved;
          if (errno == EINTR) continue;
          return PeerError("receive", errno);
        }
        p.moved[s] += static_cast<size_t>(r);
        moved = true;
        // A short read emptied the socket: the next would only fail.
        if (static_cast<size_t>(r) < limit - g) return moved;
      }
      continue;
    }
    if (sock.bounce.empty()) sock.bounce.resize(U);
    const size_t es = SizeOf(t->type);
    // As for shared memory: a final destination larger than the cache is
    // written around it (transports/streaming.h).
    const bool streaming = StreamsInto(*t);
    bool emptied = false;  // a short read took all the socket had
    while (p.moved[s] < share) {
      // Reduce what has arrived, one unit at a time, as far as the gate allows.
      const size_t g = MessageOffset(p.moved[s], s, n);
      const size_t unit_end = std::min(t->bytes, (g / U + 1) * U);
      const size_t limit = std::min(unit_end, t->Allowed());
      size_t usable = g < limit ? std::min(sock.bounce_fill, limit - g) : 0;
      usable -= usable % es;
      if (usable > 0) {
        char* to = static_cast<char*>(t->dst) + g;
        const char* with = static_cast<const char*>(t->reduce_with) + g;
        const char* from = sock.bounce.data() + sock.bounce_head;
        if (streaming) {
          StreamingReduce(t->reduce, to, with, from, usable / es, t->type, t->op);
        } else {
          t->reduce(to, with, from, usable / es, t->type, t->op);
        }
        p.moved[s] += usable;
        sock.bounce_fill -= usable;
        sock.bounce_head = sock.bounce_fill == 0 ? 0 : sock.bounce_head + usable;
        moved = true;
        continue;
      }
      // Read at most to the end of this unit (the socket's next bytes belong
      // to its next unit, further on in the message). So the bounce buffer
      // holds part of one unit at its unit-relative position: head + fill
      // never passes U, and nothing is ever shifted.
      const size_t want = unit_end - g - sock.bounce_fill;
      if (want == 0 || emptied) return moved;  // gated with the whole unit staged, or nothing there
      ssize_t r = ::recv(sock.fd, sock.bounce.data() + sock.bounce_head + sock.bounce_fill, want,
                         MSG_DONTWAIT);
      if (r == 0) return PeerError("receive", 0);
      if (r < 0) {
        if (WouldBlock(errno)) return moved;
        if (errno == EINTR) continue;
        return PeerError("receive", errno);
      }
      sock.bounce_fill += static_cast<size_t>(r);
      emptied = static_cast<size_t>(r) < want;
      moved = true;
    }
  }
  return moved;
}

void TcpConnection::Settle(PostedQueue* q, int n) {
  for (Posted& p : *q) {
    size_t done = p.t->bytes;
    for (int s = 0; s < n; ++s) {
      if (Pending(p, s, n)) done = std::min(done, MessageOffset(p.moved[s], s, n));
    }
    p.t->done = done;
  }
  while (!q->empty() && q->front().t->header_done && q->front().t->done == q->front().t->bytes) {
    q->pop_front();
  }
}

// Sends first: a receive that finds nothing yet would delay this rank's
// message, which the peer may be waiting for, by a system call.
Result<bool> TcpConnection::ProgressLane(Lane& l) {
  bool sent = false;
  for (int s = 0; s < l.nsend() && !l.sends.empty(); ++s) {
    LOOM_ASSIGN_OR_RETURN(bool m, SendOn(l, s));
    sent |= m;
  }
  if (sent) Settle(&l.sends, l.nsend());
  bool moved = false;
  for (int s = 0; s < l.nrecv() && !l.recvs.empty(); ++s) {
    LOOM_ASSIGN_OR_RETURN(bool r, RecvOn(l, s));
    moved |= r;
  }
  if (moved) Settle(&l.recvs, l.nrecv());
  return moved || sent;
}

// The small lane first: its messages are the ones whose latency shows.
Result<bool> TcpConnection::Progress() {
  bool moved = false;
  for (size_t i = lanes_.size(); i-- > 0;) {
    LOOM_ASSIGN_OR_RETURN(bool m, ProgressLane(lanes_[i]));
    moved |= m;
  }
  if (!moved && lanes_.size() > 1) LOOM_TRY(CheckStrays());
  return moved;
}

// Only on passes that moved nothing: a peer that is ahead leaves its next
// operation's messages waiting too, with later sequence numbers.
Status TcpConnection::CheckStrays() {
  for (Lane& l : lanes_) {
    if (!l.recvs.empty()) continue;
    MessageHeader h{};
    const ssize_t r = ::recv(socks_[l.recv_socks[0]].fd, &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
    if (r < static_cast<ssize_t>(sizeof(h))) continue;  // nothing (or not all of it) yet
    for (Lane& other : lanes_) {
      if (&other == &l || other.recvs.empty()) continue;
      const Posted& p = other.recvs.front();
      if (!p.t->header_done && p.t->seq == h.seq) return CheckHeader(h, *p.t, *this);
    }
  }
  return Status::Ok();
}

}  // namespace loom
