// TcpConnection: non-blocking TCP sockets to a peer, one set for each
// direction, as NCCL's network connections are one-way. On loopback a
// socket carrying both directions fell into a slow mode far more often
// (perf/tcp_exchange_bench), and the 2-rank all-reduce and all-gather of
// 2-16 MiB were 1.23-1.33x faster with a socket per direction (medians of
// 8, docs/PERFORMANCE.md). With several sockets per direction
// (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD), a message is cut into
// kStripeBytes units dealt round-robin over its direction's sockets; the
// first of them also carries every header.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "transports/transport.h"

namespace loom {

class TcpConnection final : public Connection {
 public:
  static constexpr size_t kStripeBytes = 256 << 10;

  // Takes ownership of the connected `fds` (socket i of the peer pair is
  // fds[i] on both sides). With two or more, the first half carries the
  // lower rank's messages to the higher rank and the rest the other way
  // (`lower`: this end is the lower rank); a single socket carries both.
  // `via` names the local interface, as NCCL prints it ("NET/Socket/eth0").
  TcpConnection(int peer, bool lower, std::string peer_host, std::string via, std::vector<int> fds);
  ~TcpConnection() override;

  void PostSend(Transfer* t) override;
  void PostRecv(Transfer* t) override;
  Result<bool> Progress() override;
  bool idle() const override { return sends_.empty() && recvs_.empty(); }
  void AppendPollFds(std::vector<pollfd>* fds) const override;
  std::string Describe() const override;

  // Striping arithmetic (public for tests): the bytes of a `bytes`-long
  // message that socket s carries, and the message offset of byte `local`
  // of socket s's share.
  static size_t Share(size_t bytes, int s, int nsocks);
  static size_t MessageOffset(size_t local, int s, int nsocks);
  // Whether connected socket `fd` never leaves this host (its peer address
  // is its own, or loopback): such sockets get a small send buffer.
  static bool StaysOnHost(int fd);

 private:
  struct Posted {
    Transfer* t;
    std::vector<size_t> moved;  // per socket of its direction: bytes of its share done
  };
  struct Socket {
    int fd = -1;
    // Reduce-on-receive staging: bytes [bounce_head, bounce_head + bounce_fill)
    // arrived and are not reduced yet.
    std::vector<char> bounce;
    size_t bounce_head = 0;
    size_t bounce_fill = 0;
  };

  // s: the socket's index among its direction's (socks_[send_socks_[s]]).
  Result<bool> SendOn(int s);
  Result<bool> RecvOn(int s);
  Result<bool> SendHeader(Posted& p);
  Result<bool> RecvHeader(Posted& p);
  // Updates t->done (the completed prefix) and pops finished transfers.
  void Settle(std::deque<Posted>* q, int n);
  // Whether socket s (of n in the transfer's direction) has bytes of p left.
  static bool Pending(const Posted& p, int s, int n);
  Status PeerError(const char* what, int err) const;
  int nsend() const { return static_cast<int>(send_socks_.size()); }
  int nrecv() const { return static_cast<int>(recv_socks_.size()); }

  int peer_;
  std::string peer_host_;
  std::string via_;
  std::vector<Socket> socks_;
  std::vector<int> send_socks_, recv_socks_;  // indices into socks_, per direction
  std::deque<Posted> sends_, recvs_;
  uint32_t send_seq_ = 0, recv_seq_ = 0;
  MessageHeader send_hdr_{}, recv_hdr_{};
  size_t send_hdr_off_ = 0, recv_hdr_off_ = 0;
};

}  // namespace loom
