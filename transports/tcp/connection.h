// TcpConnection: one or more non-blocking TCP sockets to a peer, carrying
// the messages of both directions. With several sockets (NCCL_SOCKET_NTHREADS
// x NCCL_NSOCKS_PERTHREAD), a message is cut into kStripeBytes units dealt
// round-robin over the sockets; socket 0 also carries every header.
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
  // fds[i] on both sides). `via` names the local interface, as NCCL prints
  // it ("NET/Socket/eth0").
  TcpConnection(int peer, std::string peer_host, std::string via, std::vector<int> fds);
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
    std::vector<size_t> moved;  // per socket: bytes of its share done
  };
  struct Socket {
    int fd = -1;
    // Reduce-on-receive staging: bytes [bounce_head, bounce_head + bounce_fill)
    // arrived and are not reduced yet.
    std::vector<char> bounce;
    size_t bounce_head = 0;
    size_t bounce_fill = 0;
  };

  Result<bool> SendOn(int s);
  Result<bool> RecvOn(int s);
  Result<bool> SendHeader(Posted& p);
  Result<bool> RecvHeader(Posted& p);
  // Updates t->done (the completed prefix) and pops finished transfers.
  void Settle(std::deque<Posted>* q);
  bool Pending(const Posted& p, int s) const;
  Status PeerError(const char* what, int err) const;
  int nsocks() const { return static_cast<int>(socks_.size()); }

  int peer_;
  std::string peer_host_;
  std::string via_;
  std::vector<Socket> socks_;
  std::deque<Posted> sends_, recvs_;
  uint32_t send_seq_ = 0, recv_seq_ = 0;
  MessageHeader send_hdr_{}, recv_hdr_{};
  size_t send_hdr_off_ = 0, recv_hdr_off_ = 0;
};

}  // namespace loom
