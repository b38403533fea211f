// TcpConnection: header + payload per message on a non-blocking socket;
// receives that reduce go through a persistent bounce buffer.
#include "transports/tcp/connection.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace loom {

namespace {
constexpr size_t kBounceBytes = 1 << 20;
}

TcpConnection::TcpConnection(int peer, std::string peer_host, std::string via, int fd)
    : peer_(peer), peer_host_(std::move(peer_host)), via_(std::move(via)), fd_(fd) {
  int flags = fcntl(fd_, F_GETFL, 0);
  fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

TcpConnection::~TcpConnection() {
  if (fd_ >= 0) close(fd_);
}

void TcpConnection::PostSend(Transfer* t) {
  t->seq = send_seq_++;
  sends_.push_back(t);
}

void TcpConnection::PostRecv(Transfer* t) {
  t->seq = recv_seq_++;
  recvs_.push_back(t);
}

std::string TcpConnection::Describe() const {
  return "rank " + std::to_string(peer_) + " (" + peer_host_ + ", via " + via_ + ")";
}

Status TcpConnection::PeerError(const char* what, int err) const {
  if (err == 0 || err == ECONNRESET || err == EPIPE) {
    return RemoteError(Describe() + " closed the connection during " + what +
                       ": that rank exited, crashed or aborted");
  }
  return SystemError(std::string(what) + " with " + Describe(), err);
}

void TcpConnection::AppendPollFds(std::vector<pollfd>* fds) const {
  short events = 0;
  if (!recvs_.empty()) events |= POLLIN;
  if (!sends_.empty()) {
    const Transfer* t = sends_.front();
    // A send waiting on its gate waits for local progress, not the socket.
    if (send_hdr_off_ < sizeof(MessageHeader) || t->Allowed() > t->done) events |= POLLOUT;
  }
  if (events != 0) fds->push_back(pollfd{fd_, events, 0});
}

Result<bool> TcpConnection::ProgressSend() {
  bool moved = false;
  while (!sends_.empty()) {
    Transfer* t = sends_.front();
    if (send_hdr_off_ == 0 && !t->header_done) {
      send_hdr_ = MessageHeader{t->bytes, t->seq, static_cast<uint8_t>(t->kind), kHeaderMagic, 0};
    }
    while (send_hdr_off_ < sizeof(MessageHeader)) {
      ssize_t n = ::send(fd_, reinterpret_cast<const char*>(&send_hdr_) + send_hdr_off_,
                         sizeof(MessageHeader) - send_hdr_off_, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
        if (errno == EINTR) continue;
        return PeerError("send", errno);
      }
      send_hdr_off_ += static_cast<size_t>(n);
      moved = true;
    }
    t->header_done = true;
    const size_t allowed = t->Allowed();
    while (t->done < allowed) {
      ssize_t n = ::send(fd_, static_cast<const char*>(t->src) + t->done, allowed - t->done,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
        if (errno == EINTR) continue;
        return PeerError("send", errno);
      }
      t->done += static_cast<size_t>(n);
      moved = true;
    }
    if (t->done < t->bytes) return moved;
    send_hdr_off_ = 0;
    sends_.pop_front();
  }
  return moved;
}

Result<bool> TcpConnection::ProgressRecv() {
  bool moved = false;
  while (!recvs_.empty()) {
    Transfer* t = recvs_.front();
    while (!t->header_done) {
      ssize_t n = ::recv(fd_, reinterpret_cast<char*>(&recv_hdr_) + recv_hdr_off_,
                         sizeof(MessageHeader) - recv_hdr_off_, MSG_DONTWAIT);
      if (n == 0) return PeerError("receive", 0);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
        if (errno == EINTR) continue;
        return PeerError("receive", errno);
      }
      recv_hdr_off_ += static_cast<size_t>(n);
      moved = true;
      if (recv_hdr_off_ == sizeof(MessageHeader)) {
        LOOM_TRY(CheckHeader(recv_hdr_, *t, Describe()));
        t->header_done = true;
        recv_hdr_off_ = 0;
      }
    }
    if (t->reduce_with == nullptr) {
      const size_t allowed = t->Allowed();
      while (t->done < allowed) {
        ssize_t n = ::recv(fd_, static_cast<char*>(t->dst) + t->done, allowed - t->done,
                           MSG_DONTWAIT);
        if (n == 0) return PeerError("receive", 0);
        if (n < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
          if (errno == EINTR) continue;
          return PeerError("receive", errno);
        }
        t->done += static_cast<size_t>(n);
        moved = true;
      }
    } else {
      if (bounce_.empty()) bounce_.resize(kBounceBytes);
      const size_t esize = SizeOf(t->type);
      for (;;) {
        // Reduce what the gate allows out of the bounce buffer first.
        size_t usable = std::min(bounce_fill_, t->Allowed() - t->done);
        usable -= usable % esize;
        if (usable > 0) {
          t->reduce(static_cast<char*>(t->dst) + t->done,
                    static_cast<const char*>(t->reduce_with) + t->done, bounce_.data(),
                    usable / esize, t->type, t->op);
          t->done += usable;
          bounce_fill_ -= usable;
          std::memmove(bounce_.data(), bounce_.data() + usable, bounce_fill_);
          moved = true;
        }
        size_t want = std::min(bounce_.size() - bounce_fill_, t->bytes - t->done - bounce_fill_);
        if (want == 0) break;
        ssize_t n = ::recv(fd_, bounce_.data() + bounce_fill_, want, MSG_DONTWAIT);
        if (n == 0) return PeerError("receive", 0);
        if (n < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
          if (errno == EINTR) continue;
          return PeerError("receive", errno);
        }
        bounce_fill_ += static_cast<size_t>(n);
        moved = true;
      }
    }
    if (t->done < t->bytes) return moved;
    recvs_.pop_front();
  }
  return moved;
}

Result<bool> TcpConnection::Progress() {
  bool moved = false;
  if (!recvs_.empty()) {
    LOOM_ASSIGN_OR_RETURN(bool r, ProgressRecv());
    moved |= r;
  }
  if (!sends_.empty()) {
    LOOM_ASSIGN_OR_RETURN(bool s, ProgressSend());
    moved |= s;
  }
  return moved;
}

}  // namespace loom
