// TcpConnection: non-blocking TCP sockets to a peer in two lanes. The bulk
// lane has one set of sockets for each direction, as NCCL's network
// connections are one-way: a socket carrying both directions falls into a
// slow mode far more often (perf/tcp_exchange_bench shows it). With several
// sockets per direction (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD), a
// message is cut into kStripeBytes units dealt round-robin over its
// direction's sockets; the first of them also carries every header. The
// small lane, when given, is one socket carrying messages of up to
// kSmallLaneBytes both ways, so a reply carries the acknowledgement of what
// it answers and small exchanges save a round trip. Both ends choose a message's lane by
// its size; the sequence numbers are the connection's, so a message that
// arrives on the other lane than its receive was posted on is named as a
// mismatch rather than waited for.
#pragma once

#include <string>
#include <vector>

#include "transports/transport.h"

namespace loom {

class TcpConnection final : public Connection {
 public:
  static constexpr size_t kStripeBytes = 256 << 10;
  static constexpr size_t kSmallLaneBytes = 16 << 10;
  // The bulk lane's header is padded to a cache line (WireHeader); the small
  // lane's is the bare MessageHeader.
  static constexpr size_t kBulkHeaderBytes = 64;
  // Send buffer for a connection that never leaves this host (kernel bytes;
  // the kernel doubles it). Autotuned, the buffer grows to megabytes and every
  // send copies into socket pages that have left the cache; much smaller
  // stalls on delayed ACKs. Doubled, 128 KiB holds exactly four loopback
  // segments, which would leave a 256 KiB message's tail waiting for an
  // acknowledgement: 4 KiB more lets a fifth segment start. Connections
  // between hosts keep autotuning, which the bandwidth-delay product needs.
  static constexpr int kLocalSendBufferBytes = 132 << 10;
  // A socket's send buffer while it carries a message share of at least
  // kLargeSendMessageBytes: large messages move faster with a larger buffer,
  // while messages of 256 KiB slow down with it, so they keep
  // kLocalSendBufferBytes.
  static constexpr int kLocalLargeSendBufferBytes = 384 << 10;
  static constexpr size_t kLargeSendMessageBytes = size_t{512} << 10;
  // The send buffer a socket that stays on the host gets for a message
  // share of `bytes`.
  static constexpr int LocalSendBufferFor(size_t bytes) {
    return bytes >= kLargeSendMessageBytes ? kLocalLargeSendBufferBytes : kLocalSendBufferBytes;
  }
  // Receive buffer for such a connection, fixed too (which turns the
  // kernel's autotuning off): autotuned, it grows to tens of MiB and some
  // processes then run their whole life in a slow mode, with the kernel
  // queueing thousands of segments on a busy socket's backlog; a smaller
  // window slows large transfers (FixReceiveBuffer).
  static constexpr int kLocalReceiveBufferBytes = 1 << 20;

  // Takes ownership of the connected `fds` (socket i of the peer pair is
  // fds[i] on both sides), the bulk lane. With two or more, the first half
  // carries the lower rank's messages to the higher rank and the rest the
  // other way (`lower`: this end is the lower rank); a single socket carries
  // both. `small_fd`, when not -1, is the small lane's socket (owned too).
  // `via` names the local interface, as NCCL prints it ("NET/Socket/eth0").
  TcpConnection(int peer, bool lower, std::string peer_host, std::string via, std::vector<int> fds,
                int small_fd = -1);
  ~TcpConnection() override;

  void PostSend(Transfer* t) override;
  void PostRecv(Transfer* t) override;
  Result<bool> Progress() override;
  bool idle() const override;
  void AppendPollFds(std::vector<pollfd>* fds) const override;
  std::string Describe() const override;
  // The socket whose sent data has waited longest for an acknowledgement,
  // once that is kStallSilenceMs: retransmitted unanswered, or kept
  // unsent (only probed) while the peer's window is open.
  std::optional<LinkStall> SendStall() const override;
  // Twice the kernel's least retransmission timeout (200 ms) and more: an
  // ordinary lost segment is repaired sooner.
  static constexpr uint32_t kStallSilenceMs = 500;

  // Striping arithmetic (public for tests): the bytes of a `bytes`-long
  // message that socket s carries, and the message offset of byte `local`
  // of socket s's share.
  static size_t Share(size_t bytes, int s, int nsocks);
  static size_t MessageOffset(size_t local, int s, int nsocks);
  // Whether connected socket `fd` never leaves this host (its peer address
  // is its own, or loopback): such sockets get fixed buffers.
  static bool StaysOnHost(int fd);
  // Sets SO_SNDBUF, past net.core.wmem_max where the kernel allows it, and
  // kLocalReceiveBufferBytes as the receive buffer where the kernel allows
  // it (public for perf/tcp_exchange_bench, which mirrors loom's setup).
  static void SetSendBuffer(int fd, int bytes);
  static void FixReceiveBuffer(int fd);

 private:
  struct Posted {
    Transfer* t = nullptr;
    std::vector<size_t> moved;  // per socket of its direction: bytes of its share done
  };
  // The transfers posted in one direction of a lane, oldest first: a ring
  // whose entries are reused, each keeping its `moved` vector's storage for
  // the next transfer, so that posting and completing allocate nothing once
  // it has grown to the depth in use: a fresh allocation per transfer is a
  // visible share of a small TCP collective's user-space time.
  class PostedQueue {
   public:
    template <typename Q, typename P>
    class Iter {
     public:
      Iter(Q* q, size_t i) : q_(q), i_(i) {}
      P& operator*() const { return q_->at(i_); }
      Iter& operator++() {
        ++i_;
        return *this;
      }
      bool operator!=(const Iter& o) const { return i_ != o.i_; }

     private:
      Q* q_;
      size_t i_;
    };
    void push_back(Transfer* t, size_t nsocks);
    void pop_front() {
      head_ = (head_ + 1) & (slots_.size() - 1);
      --count_;
    }
    bool empty() const { return count_ == 0; }
    Posted& front() { return at(0); }
    Posted& at(size_t i) { return slots_[(head_ + i) & (slots_.size() - 1)]; }
    const Posted& at(size_t i) const { return slots_[(head_ + i) & (slots_.size() - 1)]; }
    Iter<PostedQueue, Posted> begin() { return {this, 0}; }
    Iter<PostedQueue, Posted> end() { return {this, count_}; }
    Iter<const PostedQueue, const Posted> begin() const { return {this, 0}; }
    Iter<const PostedQueue, const Posted> end() const { return {this, count_}; }

   private:
    std::vector<Posted> slots_;  // a power of two of them, or none
    size_t head_ = 0, count_ = 0;
  };
  struct Socket {
    int fd = -1;
    // The send buffer set on a socket that stays on the host (one of the
    // LocalSendBufferFor sizes); 0 on one left to autotuning.
    int sndbuf = 0;
    // Reduce-on-receive staging: bytes [bounce_head, bounce_head + bounce_fill)
    // arrived and are not reduced yet.
    std::vector<char> bounce;
    size_t bounce_head = 0;
    size_t bounce_fill = 0;
  };
  // Gives a socket that stays on the host the send buffer for a message
  // share of `bytes` (a system call only when that changes it).
  static void FitSendBuffer(Socket& sock, size_t bytes);
  // A header as it travels: its lane's first header_bytes of this. The
  // kernel copies a send into its socket pages where the previous one ended,
  // so after a 16-byte header a payload lands 16 bytes off its buffer's
  // alignment, and the kernel's copy of a misaligned payload is several
  // times slower; a cache-line header keeps the payload aligned.
  struct WireHeader {
    MessageHeader h;
    char pad[kBulkHeaderBytes - sizeof(MessageHeader)];
  };
  // One lane: its sockets per direction (indices into socks_; the same one
  // for both when a single socket carries both), the transfers posted on it
  // in order, and the headers half sent or half received.
  struct Lane {
    std::vector<int> send_socks, recv_socks;
    PostedQueue sends, recvs;
    size_t header_bytes = kBulkHeaderBytes;
    WireHeader send_hdr{}, recv_hdr{};
    size_t send_hdr_off = 0, recv_hdr_off = 0;
    int nsend() const { return static_cast<int>(send_socks.size()); }
    int nrecv() const { return static_cast<int>(recv_socks.size()); }
  };

  Lane& LaneFor(size_t bytes) {
    return lanes_.size() > 1 && bytes <= kSmallLaneBytes ? lanes_[1] : lanes_[0];
  }
  // s: the socket's index among its lane's direction's (socks_[l.send_socks[s]]).
  Result<bool> SendOn(Lane& l, int s);
  Result<bool> RecvOn(Lane& l, int s);
  Result<bool> SendHeader(Lane& l, Posted& p);
  Result<bool> RecvHeader(Lane& l, Posted& p);
  Result<bool> ProgressLane(Lane& l);
  // A message waiting on a lane where no receive is posted while a receive
  // with its sequence number waits on another: the two ends disagree on its
  // size. Returns that mismatch, else OK.
  Status CheckStrays();
  // Updates t->done (the completed prefix) and pops finished transfers.
  static void Settle(PostedQueue* q, int n);
  // Whether socket s (of n in the transfer's direction) has bytes of p left.
  static bool Pending(const Posted& p, int s, int n);
  Status PeerError(const char* what, int err) const;

  int peer_;
  std::string peer_host_;
  std::string via_;
  std::vector<Socket> socks_;
  std::vector<Lane> lanes_;  // [0] bulk, [1] small (if any)
  uint32_t send_seq_ = 0, recv_seq_ = 0;
};

}  // namespace loom
