// UcxConnection: pieces (a header, then payload chunks) posted in message
// order per direction, each completion settled in posting order so `done`
// is always a completed prefix. Receives land in dst directly, or in a
// bounce buffer when they reduce or when dst is still gated.
#include "transports/ucx/connection.h"

#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "base/log.h"
#include "transports/ucx/ucx_api.h"

namespace loom {

namespace {

constexpr auto kPidCheckEvery = std::chrono::milliseconds(100);
constexpr auto kShutdownBudget = std::chrono::seconds(1);

// Statuses with which UCX reports that the peer (or the path to it) is gone.
bool IsPeerFailure(ucs_status_t s) {
  switch (s) {
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CANCELED:  // outstanding sends of a failed endpoint
      return true;
    default:
      return false;
  }
}

}  // namespace

UcxWorker::UcxWorker(const UcxApi& api, ucp_context_h context, ucp_worker_h worker, int event_fd)
    : api_(api), context_(context), worker_(worker), event_fd_(event_fd) {
  ready_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

UcxWorker::~UcxWorker() {
  api_.worker_destroy(worker_);
  api_.cleanup(context_);
  if (ready_fd_ >= 0) close(ready_fd_);
}

bool UcxWorker::Progress() {
  if (ready_) {
    uint64_t v;
    (void)!read(ready_fd_, &v, sizeof(v));
    ready_ = false;
  }
  // Bounded: a worker that always has something to do must not starve the
  // engine's abort and deadline checks.
  bool any = false;
  for (int i = 0; i < 64 && api_.worker_progress(worker_) != 0; ++i) any = true;
  return any;
}

void UcxWorker::AppendPollFd(std::vector<pollfd>* fds, bool ready) {
  if (!ready && !ready_ && api_.worker_arm(worker_) == UCS_OK) {
    fds->push_back(pollfd{event_fd_, POLLIN, 0});
    return;
  }
  // Work already waiting (or UCX says BUSY: events not yet progressed).
  if (!ready_) {
    uint64_t one = 1;
    (void)!write(ready_fd_, &one, sizeof(one));
    ready_ = true;
  }
  fds->push_back(pollfd{ready_fd_, POLLIN, 0});
}

UcxConnection::UcxConnection(std::shared_ptr<UcxWorker> worker, Peer peer)
    : worker_(std::move(worker)), peer_(std::move(peer)) {}

Result<std::unique_ptr<UcxConnection>> UcxConnection::Create(std::shared_ptr<UcxWorker> worker,
                                                             const std::string& address, Peer peer,
                                                             bool prefer_peer_mode) {
  std::unique_ptr<UcxConnection> c(new UcxConnection(std::move(worker), std::move(peer)));
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ep.err_handler.cb = &UcxConnection::EndpointFailed;
  ep.err_handler.arg = c.get();
  ucs_status_t s = UCS_ERR_UNREACHABLE;
  if (prefer_peer_mode) {
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    s = c->ucx().ep_create(c->worker_->get(), &ep, &c->ep_);
    c->detection_ = FailureDetection::kPeer;
  }
  if (s == UCS_ERR_UNREACHABLE) {
    // No transport to this peer can report peer failure (UCX 1.13's
    // shared-memory ones cannot): take what can, and watch the pid instead.
    if (prefer_peer_mode) {
      LOOM_INFO(log::kInit | log::kNet,
                "UCX: no transport to %s handles peer failure; a crash of that rank is detected "
                "by its pid (same host) or else by LOOM_TIMEOUT_MS",
                c->Describe().c_str());
    }
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    s = c->ucx().ep_create(c->worker_->get(), &ep, &c->ep_);
    c->detection_ = FailureDetection::kPid;
  }
  if (s != UCS_OK) {
    c->ep_ = nullptr;
    const char* tls = getenv("UCX_TLS");
    return SystemError("UCX cannot reach " + c->Describe() + ": " + c->ucx().status_string(s) +
                       " (UCX_TLS=" + (tls != nullptr ? tls : "(unset)") +
                       "; both ends need a transport in common, e.g. UCX_TLS=tcp)");
  }
  return c;
}

UcxConnection::~UcxConnection() {
  Shutdown();
}

// Stops UCX from touching our buffers before they are freed: posted
// receives are cancelled, the endpoint flushed and closed (FORCE cancels its
// sends; only allowed with PEER error handling, otherwise a local flush), the
// worker progressed until every callback ran, for a bounded time. What is
// still outstanding then is leaked rather than freed under UCX's feet.
void UcxConnection::Shutdown() {
  ucp_worker_h w = worker_->get();
  for (auto* q : {&recv_pieces_, &hello_}) {
    for (auto& pc : *q) {
      if (pc->recv && !pc->finished && pc->request != nullptr) ucx().request_cancel(w, pc->request);
    }
  }
  const auto give_up = std::chrono::steady_clock::now() + kShutdownBudget;
  if (ep_ != nullptr) {
    // A send completes here once UCX has buffered it, not once the peer has
    // it, and the FORCE close below drops what is still queued: flush first
    // (bounded; a dead peer fails it at once in PEER mode) so that the last
    // bytes of the last collective reach a peer that is still receiving.
    ucp_request_param_t fp{};
    ucs_status_ptr_t f = ucx().ep_flush_nbx(ep_, &fp);
    if (f != nullptr && !UCS_PTR_IS_ERR(f)) {
      while (ucx().request_check_status(f) == UCS_INPROGRESS &&
             std::chrono::steady_clock::now() < give_up) {
        if (!worker_->Progress()) std::this_thread::yield();
      }
      ucx().request_free(f);  // released by UCX when it completes, if it has not
    }
  }
  void* close_req = nullptr;
  if (ep_ != nullptr) {
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = detection_ == FailureDetection::kPeer ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t r = ucx().ep_close_nbx(ep_, &prm);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) close_req = r;
    ep_ = nullptr;
  }
  auto outstanding = [&] {
    if (close_req != nullptr && ucx().request_check_status(close_req) == UCS_INPROGRESS)
      return true;
    for (auto* q : {&send_pieces_, &recv_pieces_, &hello_}) {
      for (auto& pc : *q) {
        if (!pc->finished) return true;
      }
    }
    return false;
  };
  while (outstanding() && std::chrono::steady_clock::now() < give_up) {
    if (!worker_->Progress()) std::this_thread::yield();
  }
  if (close_req != nullptr) ucx().request_free(close_req);
  bool leaked = false;
  for (auto* q : {&send_pieces_, &recv_pieces_, &hello_}) {
    for (auto& pc : *q) {
      if (pc->finished) {
        if (pc->request != nullptr) ucx().request_free(pc->request);
      } else {
        // Its callback may still run and write into the piece and its bounce
        // buffer; it must no longer reach this connection.
        pc->conn = nullptr;
        (void)pc.release();
        leaked = true;
      }
    }
  }
  if (leaked) {
    LOOM_WARN(log::kNet, "UCX: requests to %s did not finish at close; their buffers are leaked",
              Describe().c_str());
  }
}

void UcxConnection::PostSend(Transfer* t) {
  t->seq = send_seq_++;
  sends_.push_back(Posted{t});
}

void UcxConnection::PostRecv(Transfer* t) {
  t->seq = recv_seq_++;
  recvs_.push_back(Posted{t});
}

std::string UcxConnection::Describe() const {
  return "rank " + std::to_string(peer_.rank) + " (" + peer_.host + ", via " + peer_.via + ")";
}

Status UcxConnection::PeerError(const char* what, ucs_status_t status) const {
  if (IsPeerFailure(status)) {
    return RemoteError(Describe() + " failed during " + what +
                       " (UCX: " + ucx().status_string(status) +
                       "): that rank exited, crashed or aborted, or the network to it failed");
  }
  if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    return InternalError("a UCX message from " + Describe() +
                         " is longer than expected: the message streams are out of step");
  }
  return SystemError(std::string("UCX ") + what + " with " + Describe() + ": " +
                     ucx().status_string(status));
}

void UcxConnection::EndpointFailed(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  auto* c = static_cast<UcxConnection*>(arg);
  if (c->failed_ == UCS_OK) c->failed_ = status;
  c->pending_settle_ = true;
}

void UcxConnection::SendDone(void* request, ucs_status_t status, void* user_data) {
  (void)request;
  auto* pc = static_cast<Piece*>(user_data);
  pc->status = status;
  pc->finished = true;
  if (pc->conn != nullptr) pc->conn->pending_settle_ = true;
}

void UcxConnection::RecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                             void* user_data) {
  (void)request;
  auto* pc = static_cast<Piece*>(user_data);
  pc->status = status;
  if (info != nullptr) pc->info = *info;
  pc->finished = true;
  if (pc->conn != nullptr) pc->conn->pending_settle_ = true;
}

Status UcxConnection::StartSend(std::unique_ptr<Piece> piece, const void* buffer, size_t bytes,
                                uint64_t tag, std::deque<std::unique_ptr<Piece>>* queue) {
  Piece* raw = piece.get();
  raw->conn = this;
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  prm.cb.send = &UcxConnection::SendDone;
  prm.user_data = raw;
  ucs_status_ptr_t r = ucx().tag_send_nbx(ep_, buffer, bytes, tag, &prm);
  if (UCS_PTR_IS_ERR(r)) return PeerError("send", UCS_PTR_STATUS(r));
  if (r == nullptr) {
    raw->finished = true;  // completed in place; no callback comes
  } else {
    raw->request = r;
  }
  queue->push_back(std::move(piece));
  return Status::Ok();
}

Status UcxConnection::StartRecv(std::unique_ptr<Piece> piece, void* buffer, size_t bytes,
                                uint64_t tag, std::deque<std::unique_ptr<Piece>>* queue) {
  Piece* raw = piece.get();
  raw->conn = this;
  raw->recv = true;
  ucp_request_param_t prm{};
  // NO_IMM_CMPL: UCX 1.13 does not fill recv_info on an immediate
  // completion, and the arrived length is what proves the streams in step;
  // the callback always gets it.
  prm.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  prm.cb.recv = &UcxConnection::RecvDone;
  prm.user_data = raw;
  ucs_status_ptr_t r = ucx().tag_recv_nbx(worker_->get(), buffer, bytes, tag, ~ucp_tag_t{0}, &prm);
  if (UCS_PTR_IS_ERR(r)) return PeerError("receive", UCS_PTR_STATUS(r));
  if (r == nullptr) {
    return InternalError("UCX completed a receive from " + Describe() +
                         " in place despite UCP_OP_ATTR_FLAG_NO_IMM_CMPL");
  }
  raw->request = r;
  queue->push_back(std::move(piece));
  return Status::Ok();
}

Status UcxConnection::PostHello() {
  auto out = std::make_unique<Piece>();
  out->hdr.seq = static_cast<uint32_t>(peer_.my_rank);  // the hello carries the sender's rank
  const uint32_t* mine = &out->hdr.seq;
  LOOM_TRY(StartSend(std::move(out), mine, sizeof(uint32_t), HelloTag(peer_.my_rank), &hello_));
  auto in = std::make_unique<Piece>();
  uint32_t* theirs = &in->hdr.seq;
  return StartRecv(std::move(in), theirs, sizeof(uint32_t), HelloTag(peer_.rank), &hello_);
}

Result<bool> UcxConnection::HelloDone() {
  if (failed_ != UCS_OK) return PeerError("connection setup", failed_);
  for (auto& pc : hello_) {
    if (!pc->finished) {
      if (detection_ == FailureDetection::kPid) LOOM_TRY(CheckPeerAlive());
      return false;
    }
    if (pc->status != UCS_OK) return PeerError("connection setup", pc->status);
  }
  for (auto& pc : hello_) {
    if (pc->recv &&
        (pc->info.length != sizeof(uint32_t) || pc->hdr.seq != static_cast<uint32_t>(peer_.rank))) {
      return InternalError("UCX hello from " + Describe() +
                           " names another rank: the worker "
                           "addresses were not exchanged indexed by rank");
    }
  }
  for (auto& pc : hello_) {
    if (pc->request != nullptr) ucx().request_free(pc->request);
  }
  hello_.clear();
  return true;
}

std::unique_ptr<char[]> UcxConnection::TakeBounce() {
  if (!free_bounce_.empty()) {
    auto b = std::move(free_bounce_.back());
    free_bounce_.pop_back();
    return b;
  }
  if (bounce_count_ >= kMaxBounce) return nullptr;
  ++bounce_count_;
  return std::make_unique<char[]>(kChunkBytes);
}

// Posts headers and chunks in message order. A chunk goes out once the
// send's gates cover all of it; a gated chunk holds back every later piece,
// because the receiver posts its pieces in the same order.
Result<bool> UcxConnection::PostSends() {
  bool moved = false;
  for (Posted& p : sends_) {
    Transfer* t = p.t;
    if (!p.header_posted) {
      if (send_pieces_.size() >= kMaxInflight) return moved;
      auto pc = std::make_unique<Piece>();
      pc->t = t;
      pc->header = true;
      pc->hdr = MessageHeader{t->bytes, t->seq, static_cast<uint8_t>(t->kind), kHeaderMagic, 0};
      const MessageHeader* h = &pc->hdr;
      LOOM_TRY(StartSend(std::move(pc), h, sizeof(MessageHeader), Tag(peer_.my_rank, send_piece_++),
                         &send_pieces_));
      p.header_posted = true;
      moved = true;
    }
    while (p.posted < t->bytes) {
      if (send_pieces_.size() >= kMaxInflight) return moved;
      const size_t end = std::min(t->bytes, p.posted + kChunkBytes);
      if (t->Allowed() < end) return moved;
      auto pc = std::make_unique<Piece>();
      pc->t = t;
      pc->off = p.posted;
      pc->len = end - p.posted;
      LOOM_TRY(StartSend(std::move(pc), static_cast<const char*>(t->src) + p.posted, end - p.posted,
                         Tag(peer_.my_rank, send_piece_++), &send_pieces_));
      p.posted = end;
      moved = true;
    }
  }
  return moved;
}

// Posts receives in the same order as the peer's sends. Chunks are posted
// only after the header checked out (a mismatch must not land in dst), into
// dst when nothing gates or reduces them, else into a bounce buffer.
Result<bool> UcxConnection::PostRecvs() {
  bool moved = false;
  for (Posted& p : recvs_) {
    Transfer* t = p.t;
    if (!p.header_posted) {
      if (recv_pieces_.size() >= kMaxInflight) return moved;
      auto pc = std::make_unique<Piece>();
      pc->t = t;
      pc->header = true;
      MessageHeader* h = &pc->hdr;
      LOOM_TRY(StartRecv(std::move(pc), h, sizeof(MessageHeader), Tag(peer_.rank, recv_piece_++),
                         &recv_pieces_));
      p.header_posted = true;
      moved = true;
    }
    if (!t->header_done) return moved;
    while (p.posted < t->bytes) {
      if (recv_pieces_.size() >= kMaxInflight) return moved;
      const size_t end = std::min(t->bytes, p.posted + kChunkBytes);
      auto pc = std::make_unique<Piece>();
      pc->t = t;
      pc->off = p.posted;
      pc->len = end - p.posted;
      void* landing = static_cast<char*>(t->dst) + p.posted;
      if (t->reduce_with != nullptr || t->Allowed() < end) {
        pc->bounce = TakeBounce();
        if (pc->bounce == nullptr) return moved;  // all in use: wait for one to drain
        landing = pc->bounce.get();
      }
      LOOM_TRY(StartRecv(std::move(pc), landing, end - p.posted, Tag(peer_.rank, recv_piece_++),
                         &recv_pieces_));
      p.posted = end;
      moved = true;
    }
  }
  return moved;
}

Result<bool> UcxConnection::SettleSends() {
  bool moved = false;
  while (!send_pieces_.empty() && send_pieces_.front()->finished) {
    std::unique_ptr<Piece> pc = std::move(send_pieces_.front());
    send_pieces_.pop_front();
    if (pc->request != nullptr) ucx().request_free(pc->request);
    if (pc->status != UCS_OK) return PeerError("send", pc->status);
    if (pc->header) {
      pc->t->header_done = true;
    } else {
      pc->t->done = pc->off + pc->len;
    }
    moved = true;
  }
  while (!sends_.empty() && sends_.front().t->complete()) sends_.pop_front();
  return moved;
}

// Settles finished receives in posting order: checks headers, and copies or
// reduces bounce buffers into dst as far as the gates allow (reductions in
// whole elements), so `done` only ever covers finished bytes.
Result<bool> UcxConnection::SettleRecvs() {
  bool moved = false;
  while (!recv_pieces_.empty() && recv_pieces_.front()->finished) {
    Piece& pc = *recv_pieces_.front();
    Transfer* t = pc.t;
    if (pc.request != nullptr) {
      ucx().request_free(pc.request);
      pc.request = nullptr;
    }
    if (pc.status != UCS_OK) {
      const ucs_status_t s = pc.status;
      recv_pieces_.pop_front();
      return PeerError("receive", s);
    }
    const size_t expect = pc.header ? sizeof(MessageHeader) : pc.len;
    if (pc.info.length != expect) {
      return InternalError("a UCX message from " + Describe() + " has " +
                           std::to_string(pc.info.length) + " bytes where " +
                           std::to_string(expect) +
                           " were due: the message streams are out of step");
    }
    if (pc.header) {
      LOOM_TRY(CheckHeader(pc.hdr, *t, *this));
      t->header_done = true;
    } else if (pc.bounce == nullptr) {
      t->done = pc.off + pc.len;
    } else {
      const size_t from = pc.off + pc.applied;
      const size_t limit = std::min(pc.off + pc.len, t->Allowed());
      size_t n = limit > from ? limit - from : 0;
      if (t->reduce_with != nullptr) {
        const size_t es = SizeOf(t->type);
        if (limit < pc.off + pc.len) n -= n % es;  // a gate may cut an element
        if (n > 0) {
          t->reduce(static_cast<char*>(t->dst) + from,
                    static_cast<const char*>(t->reduce_with) + from, pc.bounce.get() + pc.applied,
                    n / es, t->type, t->op);
        }
      } else if (n > 0) {
        std::memcpy(static_cast<char*>(t->dst) + from, pc.bounce.get() + pc.applied, n);
      }
      if (n > 0) {
        pc.applied += n;
        t->done = from + n;
        moved = true;
      }
      if (pc.applied < pc.len) break;  // gated: the rest waits in the bounce buffer
      free_bounce_.push_back(std::move(pc.bounce));
    }
    recv_pieces_.pop_front();
    moved = true;
  }
  while (!recvs_.empty() && recvs_.front().t->complete()) recvs_.pop_front();
  return moved;
}

Result<bool> UcxConnection::Progress() {
  worker_->Progress();
  pending_settle_ = false;
  if (failed_ != UCS_OK) return PeerError("a transfer", failed_);
  LOOM_ASSIGN_OR_RETURN(bool r, SettleRecvs());
  LOOM_ASSIGN_OR_RETURN(bool s, SettleSends());
  LOOM_ASSIGN_OR_RETURN(bool pr, PostRecvs());
  LOOM_ASSIGN_OR_RETURN(bool ps, PostSends());
  const bool moved = r || s || pr || ps;
  if (!moved && detection_ == FailureDetection::kPid && !idle()) LOOM_TRY(CheckPeerAlive());
  return moved;
}

void UcxConnection::AppendPollFds(std::vector<pollfd>* fds) const {
  // pending_settle_: a callback ran after our last settle (another
  // connection progressed the worker), so the poll must return at once.
  worker_->AppendPollFd(fds, pending_settle_);
}

// kPid only (PEER endpoints hear of failure from UCX), rate-limited: a pid
// that no longer exists on this host means the peer process is gone.
Status UcxConnection::CheckPeerAlive() const {
  if (detection_ != FailureDetection::kPid || peer_.pid <= 0) return Status::Ok();
  const auto now = std::chrono::steady_clock::now();
  if (now < next_pid_check_) return Status::Ok();
  next_pid_check_ = now + kPidCheckEvery;
  if (kill(peer_.pid, 0) != 0 && errno == ESRCH) {
    return RemoteError(Describe() + ": process " + std::to_string(peer_.pid) +
                       " no longer exists: that rank exited, crashed or was killed");
  }
  return Status::Ok();
}

}  // namespace loom
