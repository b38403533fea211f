// IbConnection's data path over IbWire (connection.h): completions settle
// writes in posting order, the ring is consumed in arrival order, and sends
// are posted in order as credits, staging and gates allow.
#include "transports/ib/connection.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "transports/ib/qp.h"

namespace loom::ib {

namespace {
constexpr int kPollBatch = 32;
}  // namespace

IbConnection::IbConnection(int peer, std::string peer_host, std::string via,
                           std::unique_ptr<IbWire> wire, const IbConnectionOptions& options)
    : peer_(peer),
      peer_host_(std::move(peer_host)),
      via_(std::move(via)),
      opt_(options),
      wire_(std::move(wire)),
      cache_(std::make_unique<RegistrationCache>(wire_.get(), options.registration_entries)),
      staging_(options.layout.bytes()),
      credits_(options.layout.slots),
      ring_(options.layout.slots) {}

IbConnection::~IbConnection() {
  if (ready_fd_ >= 0) close(ready_fd_);
}

Result<std::unique_ptr<IbConnection>> IbConnection::Create(int peer, std::string peer_host,
                                                           std::string via,
                                                           std::unique_ptr<IbWire> wire,
                                                           const IbConnectionOptions& options) {
  if (options.layout.slots < 1 || options.layout.slots > 255 || options.layout.slot_bytes < 64 ||
      options.layout.slot_bytes % 64 != 0) {
    return InvalidArgument("IB ring layout needs 1..255 slots of a multiple of 64 bytes");
  }
  if (wire->ring_bytes() < options.layout.bytes()) {
    return InvalidArgument("IB ring of " + std::to_string(wire->ring_bytes()) +
                           " bytes is smaller than its layout");
  }
  std::unique_ptr<IbConnection> c(
      new IbConnection(peer, std::move(peer_host), std::move(via), std::move(wire), options));
  c->ready_fd_ = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
  if (c->ready_fd_ < 0) return SystemError("eventfd", errno);
  LOOM_ASSIGN_OR_RETURN(c->staging_reg_, c->cache_->Acquire(c->staging_.data(), c->staging_.size()));
  for (uint32_t i = 0; i < 2 * options.layout.slots; ++i) {
    LOOM_TRY(c->wire_->PostRecv(i).WithContext("posting receives for " + c->Describe()));
  }
  return c;
}

std::string IbConnection::Describe() const {
  return "rank " + std::to_string(peer_) + " (" + peer_host_ + ", via " + via_ + ")";
}

void IbConnection::PostSend(Transfer* t) {
  t->seq = send_seq_++;
  sends_.push_back(SendPosted{t});
}

void IbConnection::PostRecv(Transfer* t) {
  t->seq = recv_seq_++;
  recvs_.push_back(RecvPosted{t});
}

Status IbConnection::Write(const void* local, size_t bytes, uint32_t lkey, uint32_t imm,
                           WriteRecord rec) {
  const bool credit = rec.send == nullptr;
  const uint32_t slot = credit ? 0 : credits_.Take();
  WriteRequest w;
  w.wr_id = writes_.Push(rec);
  w.local = local;
  w.bytes = bytes;
  w.lkey = lkey;
  w.remote_offset = credit ? 0 : opt_.layout.Offset(slot);
  w.imm = imm;
  ++(credit ? credit_out_ : data_out_);
  return wire_->PostWrite(w).WithContext("posting an RDMA write to " + Describe());
}

Status IbConnection::Handle(const WireCompletion& c) {
  if (c.status != 0) {
    return MapCompletionError(c.status, wire_->StatusText(c.status), c.vendor_err,
                              c.op == WireCompletion::Op::kWrite, Describe());
  }
  if (c.op == WireCompletion::Op::kWrite) {
    LOOM_ASSIGN_OR_RETURN(WriteRecord rec, writes_.Complete(c.wr_id, Describe()));
    if (rec.send == nullptr) {
      --credit_out_;
    } else {
      --data_out_;
      if (rec.header) {
        rec.send->t->header_done = true;
      } else {
        rec.send->t->done = rec.end;
      }
    }
    return Status::Ok();
  }
  LOOM_TRY(wire_->PostRecv(c.wr_id).WithContext("reposting a receive for " + Describe()));
  const ImmInfo info = DecodeImm(c.imm);
  if (info.kind == ImmInfo::Kind::kCredit) return credits_.Return(info.credits, Describe());
  if (c.bytes > opt_.layout.slot_bytes) {
    return InternalError(Describe() + " wrote " + std::to_string(c.bytes) +
                         " bytes into a ring slot of " + std::to_string(opt_.layout.slot_bytes));
  }
  return ring_.Arrive(c.bytes, c.imm, Describe());
}

// Copies (or reduces) ring arrivals into the posted receives, in order, as
// far as each receive's gates allow.
Result<bool> IbConnection::Consume() {
  bool moved = false;
  while (!ring_.empty() && !recvs_.empty()) {
    Transfer* t = recvs_.front().t;
    RecvRing::Arrival& a = ring_.front();
    const char* slot = wire_->ring() + opt_.layout.Offset(a.slot);
    if (!t->header_done) {
      const ImmInfo info = DecodeImm(a.imm);
      if (info.kind != ImmInfo::Kind::kHeader || info.seq != (t->seq & 0xff) ||
          a.bytes != sizeof(MessageHeader)) {
        return InternalError("IB write from " + Describe() + " out of order: expected the header of message " +
                             std::to_string(t->seq & 0xff) + ", got immediate 0x" +
                             [&] {
                               char b[12];
                               std::snprintf(b, sizeof b, "%08x", a.imm);
                               return std::string(b);
                             }() + " with " + std::to_string(a.bytes) + " bytes");
      }
      MessageHeader h;
      std::memcpy(&h, slot, sizeof h);
      LOOM_TRY(CheckHeader(h, *t, *this));
      t->header_done = true;
      ring_.Free();
      moved = true;
    } else {
      RecvPosted& r = recvs_.front();
      LOOM_TRY(CheckImm(a.imm, t->seq, r.chunk, Describe()));
      const size_t off = size_t{r.chunk} * opt_.layout.slot_bytes;
      const size_t len = std::min(opt_.layout.slot_bytes, t->bytes - off);
      if (a.bytes != len) {
        return InternalError("IB chunk " + std::to_string(r.chunk) + " from " + Describe() +
                             " has " + std::to_string(a.bytes) + " bytes, expected " +
                             std::to_string(len));
      }
      const size_t from = off + a.used;
      size_t n = std::min(off + len, t->Allowed());
      n = n > from ? n - from : 0;
      if (t->reduce_with != nullptr) n -= n % SizeOf(t->type);
      if (n == 0) break;  // gated
      char* dst = static_cast<char*>(t->dst) + from;
      if (t->reduce_with != nullptr) {
        t->reduce(dst, static_cast<const char*>(t->reduce_with) + from, slot + a.used,
                  n / SizeOf(t->type), t->type, t->op);
      } else {
        std::memcpy(dst, slot + a.used, n);
      }
      a.used += static_cast<uint32_t>(n);
      t->done = from + n;
      moved = true;
      if (a.used == len) {
        ring_.Free();
        ++r.chunk;
      }
    }
    if (t->header_done && t->done == t->bytes) recvs_.pop_front();
  }
  return moved;
}

Status IbConnection::ReturnCredits() {
  while (ring_.owed() > 0 && credit_out_ < opt_.layout.slots) {
    LOOM_TRY(Write(nullptr, 0, 0, CreditImm(ring_.TakeCredits()), WriteRecord{}));
  }
  return Status::Ok();
}

// Posts the header and chunks of each send in order; stops at the first
// write that has no credit or staging slot, or that its gates hold back (a
// later message never overtakes an earlier one).
Result<bool> IbConnection::PostSends() {
  bool moved = false;
  const size_t slot_bytes = opt_.layout.slot_bytes;
  for (SendPosted& s : sends_) {
    Transfer* t = s.t;
    if (!s.header_posted) {
      // Chunk indices travel in 24 bits of the immediate, the top two values
      // reserved for headers and credits: refuse what would reach them.
      if (t->bytes > static_cast<size_t>(kMaxChunks) * slot_bytes) {
        return InvalidArgument("message of " + std::to_string(t->bytes) + " bytes to " +
                               Describe() + " needs more than " + std::to_string(kMaxChunks) +
                               " chunks of " + std::to_string(slot_bytes) + " bytes");
      }
      if (!CanWrite()) return moved;
      char* stage = staging_.data() + opt_.layout.Offset(staged_++ % opt_.layout.slots);
      const MessageHeader h{t->bytes, t->seq, static_cast<uint8_t>(t->kind), kHeaderMagic, 0};
      std::memcpy(stage, &h, sizeof h);
      LOOM_TRY(Write(stage, sizeof h, staging_reg_->key.lkey, HeaderImm(t->seq),
                     WriteRecord{&s, true, 0}));
      s.header_posted = true;
      moved = true;
    }
    while (s.posted < t->bytes) {
      const size_t len = std::min(slot_bytes, t->bytes - s.posted);
      if (s.posted + len > t->Allowed() || !CanWrite()) return moved;
      const char* src = static_cast<const char*>(t->src) + s.posted;
      uint32_t lkey = 0;
      if (t->bytes <= opt_.eager_bytes) {
        char* stage = staging_.data() + opt_.layout.Offset(staged_++ % opt_.layout.slots);
        std::memcpy(stage, src, len);
        src = stage;
        lkey = staging_reg_->key.lkey;
      } else {
        ++staged_;  // keeps staging slots in step with data writes
        if (s.reg == nullptr) {
          auto reg = cache_->Acquire(t->src, t->bytes);
          if (!reg.ok()) {
            return reg.status().WithContext("registering a send buffer for " + Describe());
          }
          s.reg = *reg;
        }
        lkey = s.reg->key.lkey;
      }
      const uint32_t chunk = static_cast<uint32_t>(s.posted / slot_bytes);
      s.posted += len;
      LOOM_TRY(Write(src, len, lkey, EncodeImm(t->seq, chunk), WriteRecord{&s, false, s.posted}));
      moved = true;
    }
  }
  return moved;
}

Result<bool> IbConnection::Progress() {
  if (!stash_error_.ok()) return stash_error_;
  bool moved = false;
  for (const WireCompletion& c : stash_) LOOM_TRY(Handle(c));
  moved |= !stash_.empty();
  stash_.clear();
  WireCompletion wc[kPollBatch];
  for (;;) {
    LOOM_ASSIGN_OR_RETURN(int n, wire_->Poll(wc, kPollBatch));
    for (int i = 0; i < n; ++i) LOOM_TRY(Handle(wc[i]));
    moved |= n > 0;
    if (n < kPollBatch) break;
  }
  LOOM_ASSIGN_OR_RETURN(bool consumed, Consume());
  LOOM_TRY(ReturnCredits());
  LOOM_ASSIGN_OR_RETURN(bool sent, PostSends());
  while (!sends_.empty() && sends_.front().t->complete()) {
    if (sends_.front().reg != nullptr) cache_->Unpin(sends_.front().reg);
    sends_.pop_front();
  }
  if (idle()) cache_->Clear();  // see RegistrationCache: no registration outlives the work
  return moved || consumed || sent;
}

void IbConnection::AppendPollFds(std::vector<pollfd>* fds) const {
  const int fd = wire_->event_fd();
  if (fd < 0) {
    fds->push_back(pollfd{ready_fd_, POLLIN, 0});  // nothing to sleep on: keep polling
    return;
  }
  Status armed = wire_->Arm();
  if (armed.ok()) {
    WireCompletion wc[kPollBatch];
    auto n = wire_->Poll(wc, kPollBatch);
    if (n.ok()) {
      stash_.insert(stash_.end(), wc, wc + *n);
    } else {
      armed = n.status();
    }
  }
  if (!armed.ok() && stash_error_.ok()) stash_error_ = armed;
  fds->push_back(pollfd{stash_.empty() && stash_error_.ok() ? fd : ready_fd_, POLLIN, 0});
}

}  // namespace loom::ib
