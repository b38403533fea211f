// UcxConnection: messages to and from one peer over UCP tag matching, and
// UcxWorker, the UCP context + worker its connections share. Each message is
// a 16-byte header message followed by the payload in kChunkBytes chunks;
// every piece has its own tag (sender rank, per-direction piece number), so
// both sides post them in the same order.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "transports/transport.h"

namespace loom {

struct UcxApi;  // transports/ucx/ucx_api.h

// RAII owner of a UCP context and one worker with wakeup support. Shared
// (shared_ptr) by the UcxContext and its connections, so the last user
// destroys it. Thread-compatible, like the worker (UCS_THREAD_MODE_SERIALIZED).
class UcxWorker {
 public:
  // Takes ownership of `context` and `worker`, both made through `api`
  // (loaded for the process, so it outlives this); `event_fd` is the
  // worker's (ucp_worker_get_efd), owned by UCX.
  UcxWorker(const UcxApi& api, ucp_context_h context, ucp_worker_h worker, int event_fd);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h get() const { return worker_; }
  // The UCX functions, for the connections on this worker.
  const UcxApi& api() const { return api_; }
  // Progresses until UCX reports nothing more to do (bounded); true if any
  // callback may have run. Never blocks.
  bool Progress();
  // Arms the worker for a poll() and appends the descriptor to wait on:
  // the worker's event fd, or, when UCX says events are already pending
  // (ucp_worker_arm: BUSY) or the caller says so (`ready`), an
  // always-readable descriptor so the engine does not sleep on work that is
  // already there.
  void AppendPollFd(std::vector<pollfd>* fds, bool ready);

 private:
  const UcxApi& api_;
  ucp_context_h context_;
  ucp_worker_h worker_;
  int event_fd_;
  int ready_fd_ = -1;  // eventfd, readable while `ready_` is set
  bool ready_ = false;
};

class UcxConnection final : public Connection {
 public:
  // Payload chunk: the unit of gating (a gated send goes out chunk by chunk
  // as its gate covers whole chunks) and of the reduce bounce buffers. A
  // multiple of every element size, so chunks start element-aligned.
  static constexpr size_t kChunkBytes = 256 << 10;
  // Pieces in flight per direction, and bounce buffers per connection.
  static constexpr size_t kMaxInflight = 16;
  static constexpr size_t kMaxBounce = 8;

  // How this connection learns that the peer is gone.
  //   kPeer: UCP_ERR_HANDLING_MODE_PEER; UCX calls back on failure.
  //   kPid:  UCP_ERR_HANDLING_MODE_NONE (UCX 1.13's shared-memory transports
  //          refuse PEER); a same-host peer's pid is checked while waiting.
  enum class FailureDetection : uint8_t { kPeer, kPid };

  struct Peer {
    int rank = -1;     // the peer's rank
    int my_rank = -1;  // this rank: the sender field of our tags
    std::string host;  // for messages
    std::string via;   // "NET/UCX/eth0"
    int pid = 0;       // checked with kPid; 0 = unknown (no check)
  };

  // Creates the endpoint to `address` (the peer's worker address), asking
  // for PEER error handling first when `prefer_peer_mode`, and falling back
  // to NONE (+ pid checks) when no transport can honour it. Non-blocking.
  static Result<std::unique_ptr<UcxConnection>> Create(std::shared_ptr<UcxWorker> worker,
                                                       const std::string& address, Peer peer,
                                                       bool prefer_peer_mode);
  // Cancels what is still posted and closes the endpoint, progressing the
  // worker for at most ~1 s so UCX stops touching buffers before they go.
  ~UcxConnection() override;

  void PostSend(Transfer* t) override;
  void PostRecv(Transfer* t) override;
  Result<bool> Progress() override;
  bool idle() const override { return sends_.empty() && recvs_.empty(); }
  void AppendPollFds(std::vector<pollfd>* fds) const override;
  Status CheckPeerAlive() const override;
  std::string Describe() const override;

  FailureDetection failure_detection() const { return detection_; }

  // Setup handshake (UcxContext::Connect): a 4-byte hello each way, so that
  // UCX wires the endpoint up while both ranks progress, not later while one
  // waits for a peer that does not progress (UCX 1.13's tcp transport then
  // keeps the worker's event fd readable and a sleeping engine would spin).
  // PostHello once; HelloDone reports completion (it does not progress the
  // worker) and names a failed or misaddressed peer.
  Status PostHello();
  Result<bool> HelloDone();

  // Tag of a piece: the sender's rank in the high 32 bits, the per-direction
  // piece number (wrapping) in the low 32 (public for tests).
  static uint64_t Tag(int sender, uint32_t piece) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(sender)) << 32) | piece;
  }
  // The setup hello's tag: bit 63 set, which no rank (< 2^31) has in Tag().
  static uint64_t HelloTag(int sender) { return Tag(sender, 0) | (uint64_t{1} << 63); }

 private:
  // One UCX request: a header, a payload chunk or the setup hello.
  // Heap-allocated so the completion callback's pointer stays valid while
  // the queues move.
  struct Piece {
    UcxConnection* conn = nullptr;
    Transfer* t = nullptr;  // null for the setup hello
    bool recv = false;
    bool header = false;
    size_t off = 0, len = 0;         // payload range of the message
    std::unique_ptr<char[]> bounce;  // recv landing when not placed in dst
    size_t applied = 0;              // recv via bounce: bytes copied/reduced into dst
    void* request = nullptr;         // UCX request until finished
    bool finished = false;
    ucs_status_t status = UCS_OK;
    ucp_tag_recv_info_t info{};  // recv: what arrived (length)
    MessageHeader hdr{};
  };
  struct Posted {
    Transfer* t;
    bool header_posted = false;
    size_t posted = 0;  // payload bytes whose pieces are posted
  };

  UcxConnection(std::shared_ptr<UcxWorker> worker, Peer peer);
  const UcxApi& ucx() const { return worker_->api(); }

  static void SendDone(void* request, ucs_status_t status, void* user_data);
  static void RecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                       void* user_data);
  static void EndpointFailed(void* arg, ucp_ep_h ep, ucs_status_t status);

  // Issue one UCX request for `piece` and queue it on `queue`.
  Status StartSend(std::unique_ptr<Piece> piece, const void* buffer, size_t bytes, uint64_t tag,
                   std::deque<std::unique_ptr<Piece>>* queue);
  Status StartRecv(std::unique_ptr<Piece> piece, void* buffer, size_t bytes, uint64_t tag,
                   std::deque<std::unique_ptr<Piece>>* queue);
  Result<bool> PostSends();
  Result<bool> PostRecvs();
  Result<bool> SettleSends();
  Result<bool> SettleRecvs();
  std::unique_ptr<char[]> TakeBounce();
  Status PeerError(const char* what, ucs_status_t status) const;
  void Shutdown();

  std::shared_ptr<UcxWorker> worker_;
  Peer peer_;
  ucp_ep_h ep_ = nullptr;
  FailureDetection detection_ = FailureDetection::kPeer;
  ucs_status_t failed_ = UCS_OK;  // set by EndpointFailed
  // Set by callbacks (possibly while another connection progressed the
  // shared worker): a finished piece awaits settling, so do not sleep.
  bool pending_settle_ = false;
  std::deque<Posted> sends_, recvs_;
  std::deque<std::unique_ptr<Piece>> send_pieces_, recv_pieces_, hello_;
  uint32_t send_seq_ = 0, recv_seq_ = 0;      // message numbers (header seq)
  uint32_t send_piece_ = 0, recv_piece_ = 0;  // piece numbers (tags)
  std::vector<std::unique_ptr<char[]>> free_bounce_;
  size_t bounce_count_ = 0;  // allocated, free or in use
  mutable std::chrono::steady_clock::time_point next_pid_check_{};
};

}  // namespace loom
