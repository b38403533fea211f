// TcpConnection: one non-blocking TCP socket to a peer, carrying the
// messages of both directions.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "transports/transport.h"

namespace loom {

class TcpConnection final : public Connection {
 public:
  // Takes ownership of `fd` (connected, any blocking mode). `via` names the
  // local interface, as NCCL prints it ("NET/Socket/eth0").
  TcpConnection(int peer, std::string peer_host, std::string via, int fd);
  ~TcpConnection() override;

  void PostSend(Transfer* t) override;
  void PostRecv(Transfer* t) override;
  Result<bool> Progress() override;
  bool idle() const override { return sends_.empty() && recvs_.empty(); }
  void AppendPollFds(std::vector<pollfd>* fds) const override;
  std::string Describe() const override;

 private:
  Result<bool> ProgressSend();
  Result<bool> ProgressRecv();
  Status PeerError(const char* what, int err) const;

  int peer_;
  std::string peer_host_;
  std::string via_;
  int fd_;
  std::deque<Transfer*> sends_, recvs_;
  uint32_t send_seq_ = 0, recv_seq_ = 0;
  MessageHeader send_hdr_{}, recv_hdr_{};
  size_t send_hdr_off_ = 0, recv_hdr_off_ = 0;
  // Reduce-on-receive lands bytes here first; `bounce_fill_` bytes are valid.
  std::vector<char> bounce_;
  size_t bounce_fill_ = 0;
};

}  // namespace loom
