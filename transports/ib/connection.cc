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
      staging_(options.layout.total_bytes()),  // the ring's slots, then answers' records
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
  if (wire->ring_bytes() < options.layout.total_bytes()) {
    return InvalidArgument("IB ring of " + std::to_string(wire->ring_bytes()) +
                           " bytes is smaller than its layout");
  }
  std::unique_ptr<IbConnection> c(
      new IbConnection(peer, std::move(peer_host), std::move(via), std::move(wire), options));
  c->ready_fd_ = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
  if (c->ready_fd_ < 0) return SystemError("eventfd", errno);
  LOOM_ASSIGN_OR_RETURN(c->staging_reg_, c->cache_->Acquire(c->staging_.data(), c->staging_.size()));
  for (uint32_t i = 0; i < 2 * (options.layout.slots + RingLayout::kAnswers); ++i) {
    LOOM_TRY(c->wire_->PostRecv(i).WithContext("posting receives for " + c->Describe()));
  }
  return c;
}

std::string IbConnection::Describe() const {
  return "rank " + std::to_string(peer_) + " (" + peer_host_ + ", via " + via_ + ")";
}

// Receives into GPU memory the connection can take: granted, so larger
// than eager_bytes, with nothing for the CPU to do on arrival.
Status IbConnection::CheckDeviceRecv(const Transfer& t) const {
  if (!opt_.device_recvs) {
    return InternalError("a receive into GPU memory from " + Describe() +
                         ", which has no GPUDirect RDMA: it should have been staged");
  }
  if (!Large(t) || t.reduce_with != nullptr) {
    return InternalError(
        "a receive of " + std::to_string(t.bytes) + " bytes into GPU memory from " + Describe() +
        (t.reduce_with != nullptr ? " reduces" : " is not above the eager size") +
        ": only larger plain receives go straight into GPU memory, the caller stages the rest");
  }
  return Status::Ok();
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
  WriteRequest w;
  if (rec.answer) {
    w.remote_offset = opt_.layout.MailboxOffset(answers_sent_);
    ++answer_out_;
  } else if (rec.send == nullptr) {
    ++credit_out_;
  } else {
    w.remote_offset = opt_.layout.Offset(credits_.Take());
    ++data_out_;
  }
  w.wr_id = writes_.Push(rec);
  w.local = local;
  w.bytes = bytes;
  w.lkey = lkey;
  w.imm = imm;
  return wire_->PostWrite(w).WithContext("posting an RDMA write to " + Describe());
}

Status IbConnection::Handle(const WireCompletion& c) {
  if (c.status != 0) {
    return MapCompletionError(c.status, wire_->StatusText(c.status), c.vendor_err,
                              c.op == WireCompletion::Op::kWrite, Describe());
  }
  if (c.op == WireCompletion::Op::kWrite) {
    LOOM_ASSIGN_OR_RETURN(WriteRecord rec, writes_.Complete(c.wr_id, Describe()));
    if (rec.answer) {
      --answer_out_;
    } else if (rec.send == nullptr) {
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
  switch (info.kind) {
    case ImmInfo::Kind::kCredit:
      return credits_.Return(info.credits, Describe());
    case ImmInfo::Kind::kAnswerRing:
    case ImmInfo::Kind::kAnswerGrant: {
      AnswerRecord a;
      a.seq = info.seq;
      if (info.kind == ImmInfo::Kind::kAnswerGrant) {
        std::memcpy(&a, wire_->ring() + opt_.layout.MailboxOffset(answers_received_), sizeof a);
        if (a.seq != info.seq || a.rkey == 0) {
          return InternalError("IB grant from " + Describe() + " is garbled (message " +
                               std::to_string(a.seq) + " in the record, " +
                               std::to_string(info.seq) + " in the immediate)");
        }
      }
      ++answers_received_;
      answers_in_.push_back(a);
      return Status::Ok();
    }
    case ImmInfo::Kind::kGranted:
      granted_arrived_.push_back(info.seq);
      return Status::Ok();
    default:
      break;
  }
  if (c.bytes > opt_.layout.slot_bytes) {
    return InternalError(Describe() + " wrote " + std::to_string(c.bytes) +
                         " bytes into a ring slot of " + std::to_string(opt_.layout.slot_bytes));
  }
  return ring_.Arrive(c.bytes, c.imm, Describe());
}

// Copies (or reduces) ring arrivals into the posted receives, in order, as
// far as each receive's gates allow; completes granted receives whose last
// write arrived.
Result<bool> IbConnection::Consume() {
  bool moved = false;
  while (!recvs_.empty()) {
    RecvPosted& r = recvs_.front();
    Transfer* t = r.t;
    if (t->header_done && r.granted) {
      // Complete once its last write arrived (RC order: every earlier write
      // of the message landed before it).
      if (granted_arrived_.empty()) break;
      if (granted_arrived_.front() != (t->seq & 0xff)) {
        return InternalError("IB write into a granted buffer from " + Describe() +
                             " ended message " + std::to_string(granted_arrived_.front()) +
                             ", expected " + std::to_string(t->seq & 0xff));
      }
      granted_arrived_.pop_front();
      t->done = t->bytes;
      cache_->Unpin(r.reg);
    } else {
      if (ring_.empty()) break;
      RecvRing::Arrival& a = ring_.front();
      const char* slot = wire_->ring() + opt_.layout.Offset(a.slot);
      if (!t->header_done) {
        const ImmInfo info = DecodeImm(a.imm);
        if (info.kind != ImmInfo::Kind::kHeader || info.seq != (t->seq & 0xff) ||
            a.bytes != sizeof(MessageHeader)) {
          char imm[12];
          std::snprintf(imm, sizeof imm, "%08x", a.imm);
          return InternalError("IB write from " + Describe() +
                               " out of order: expected the header of message " +
                               std::to_string(t->seq & 0xff) + ", got immediate 0x" + imm +
                               " with " + std::to_string(a.bytes) + " bytes");
        }
        MessageHeader h;
        std::memcpy(&h, slot, sizeof h);
        LOOM_TRY(CheckHeader(h, *t, *this));
        t->header_done = true;
        ring_.Free();
      } else {
        if (t->device) {  // never copied by the CPU: granted once answered
          LOOM_TRY(CheckDeviceRecv(*t));
          break;
        }
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
        if (a.used == len) {
          ring_.Free();
          ++r.chunk;
        }
      }
    }
    moved = true;
    if (t->header_done && t->done == t->bytes) {
      if (r.answered) --answers_open_;
      recvs_.pop_front();
    }
  }
  return moved;
}

// This end grants: answers each large receive, in posting order, while
// fewer than kAnswers answered messages are unfinished. A receive into GPU
// memory gets a grant of its buffer, any other "through the ring".
Result<bool> IbConnection::Answer() {
  bool moved = false;
  if (!opt_.device_recvs) return moved;
  for (RecvPosted& r : recvs_) {
    if (r.answered || !Large(*r.t)) continue;
    if (answers_open_ >= RingLayout::kAnswers || answer_out_ >= RingLayout::kAnswers) break;
    Transfer* t = r.t;
    const uint32_t seq = t->seq & 0xff;
    if (!t->device) {
      LOOM_TRY(Write(nullptr, 0, 0, AnswerImm(seq, false), WriteRecord{nullptr, false, true, 0}));
    } else {
      LOOM_TRY(CheckDeviceRecv(*t));
      if (t->Allowed() < t->bytes) break;  // an earlier send still reads the buffer
      auto reg = cache_->Acquire(t->dst, t->bytes, /*device=*/true);
      if (!reg.ok()) {
        return reg.status().WithContext("registering GPU memory to receive from " + Describe());
      }
      r.reg = *reg;
      r.granted = true;
      AnswerRecord a;
      a.addr = reinterpret_cast<uint64_t>(t->dst);
      a.bytes = t->bytes;
      a.rkey = r.reg->key.rkey;
      a.seq = seq;
      char* record = staging_.data() + opt_.layout.MailboxOffset(answers_sent_);
      std::memcpy(record, &a, sizeof a);
      LOOM_TRY(Write(record, sizeof a, staging_reg_->key.lkey, AnswerImm(seq, true),
                     WriteRecord{nullptr, false, true, 0}));
    }
    ++answers_sent_;
    ++answers_open_;
    r.answered = true;
    moved = true;
  }
  return moved;
}

Status IbConnection::ReturnCredits() {
  while (ring_.owed() > 0 && credit_out_ < opt_.layout.slots) {
    LOOM_TRY(Write(nullptr, 0, 0, CreditImm(ring_.TakeCredits()), WriteRecord{}));
  }
  return Status::Ok();
}

// Writes the payload of `s` into the buffer the peer granted: plain
// writes of up to granted_write_bytes, the last with GrantedImm.
Result<bool> IbConnection::PostGranted(SendPosted& s) {
  Transfer* t = s.t;
  bool moved = false;
  while (s.posted < t->bytes) {
    const size_t len = std::min(opt_.granted_write_bytes, t->bytes - s.posted);
    const bool last = s.posted + len == t->bytes;
    if (s.posted + len > t->Allowed() || data_out_ >= opt_.layout.slots) return moved;
    if (s.reg == nullptr) {
      auto reg = cache_->Acquire(t->src, t->bytes, t->device);
      if (!reg.ok()) return reg.status().WithContext("registering a send buffer for " + Describe());
      s.reg = *reg;
    }
    WriteRequest w;
    w.local = static_cast<const char*>(t->src) + s.posted;
    w.bytes = len;
    w.lkey = s.reg->key.lkey;
    w.remote_addr = s.grant.addr + s.posted;
    w.rkey = s.grant.rkey;
    w.with_imm = last;
    w.imm = last ? GrantedImm(t->seq) : 0;
    s.posted += len;
    w.wr_id = writes_.Push(WriteRecord{&s, false, false, s.posted});
    ++data_out_;
    LOOM_TRY(wire_->PostWrite(w).WithContext("posting an RDMA write to " + Describe()));
    moved = true;
  }
  return moved;
}

// Posts the header and chunks of each send in order; stops at the first
// write that has no credit or staging slot, that its gates hold back, or
// whose message waits for the peer's answer (a later message never
// overtakes an earlier one).
Result<bool> IbConnection::PostSends() {
  bool moved = false;
  const size_t slot_bytes = opt_.layout.slot_bytes;
  for (SendPosted& s : sends_) {
    Transfer* t = s.t;
    if (!s.header_posted) {
      // Chunk indices travel in 24 bits of the immediate, the top values
      // reserved for other writes: refuse what would reach them.
      if (t->bytes > static_cast<size_t>(kMaxChunks) * slot_bytes) {
        return InvalidArgument("message of " + std::to_string(t->bytes) + " bytes to " +
                               Describe() + " needs more than " + std::to_string(kMaxChunks) +
                               " chunks of " + std::to_string(slot_bytes) + " bytes");
      }
      if (t->device && !opt_.device_sends) {
        return InternalError("a send from GPU memory to " + Describe() +
                             ", which has no GPUDirect RDMA for sends: it should have been staged");
      }
      if (!CanWrite()) return moved;
      char* stage = staging_.data() + opt_.layout.Offset(staged_++ % opt_.layout.slots);
      const MessageHeader h{t->bytes, t->seq, static_cast<uint8_t>(t->kind), kHeaderMagic, 0};
      std::memcpy(stage, &h, sizeof h);
      LOOM_TRY(Write(stage, sizeof h, staging_reg_->key.lkey, HeaderImm(t->seq),
                     WriteRecord{&s, true, false, 0}));
      s.header_posted = true;
      moved = true;
    }
    if (opt_.peer_grants && Large(*t) && !s.answered) {
      if (answers_in_.empty()) return moved;  // the peer has not posted its receive yet
      const AnswerRecord a = answers_in_.front();
      answers_in_.pop_front();
      if (a.seq != (t->seq & 0xff)) {
        return InternalError("IB answer from " + Describe() + " is for message " +
                             std::to_string(a.seq) + ", expected " + std::to_string(t->seq & 0xff));
      }
      s.granted = a.rkey != 0;
      if (s.granted && a.bytes != t->bytes) {
        // Never write past the granted buffer: its key covers more.
        return InvalidUsage("mismatched operations: " + Describe() + " posted a receive of " +
                            std::to_string(a.bytes) + " bytes but this rank sends " +
                            std::to_string(t->bytes) + " bytes for " + OpKindName(t->kind) +
                            " (message #" + std::to_string(t->seq) +
                            "); Send/Recv counts must match");
      }
      s.answered = true;
      s.grant = a;
      moved = true;
    }
    if (s.granted) {
      LOOM_ASSIGN_OR_RETURN(bool wrote, PostGranted(s));
      moved |= wrote;
      if (s.posted < t->bytes) return moved;
      continue;
    }
    while (s.posted < t->bytes) {
      const size_t len = std::min(slot_bytes, t->bytes - s.posted);
      if (s.posted + len > t->Allowed() || !CanWrite()) return moved;
      const char* src = static_cast<const char*>(t->src) + s.posted;
      uint32_t lkey = 0;
      if (t->bytes <= opt_.eager_bytes && !t->device) {
        char* stage = staging_.data() + opt_.layout.Offset(staged_++ % opt_.layout.slots);
        std::memcpy(stage, src, len);
        src = stage;
        lkey = staging_reg_->key.lkey;
      } else {
        ++staged_;  // keeps staging slots in step with data writes
        if (s.reg == nullptr) {
          auto reg = cache_->Acquire(t->src, t->bytes, t->device);
          if (!reg.ok()) {
            return reg.status().WithContext("registering a send buffer for " + Describe());
          }
          s.reg = *reg;
        }
        lkey = s.reg->key.lkey;
      }
      const uint32_t chunk = static_cast<uint32_t>(s.posted / slot_bytes);
      s.posted += len;
      LOOM_TRY(
          Write(src, len, lkey, EncodeImm(t->seq, chunk), WriteRecord{&s, false, false, s.posted}));
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
  LOOM_ASSIGN_OR_RETURN(bool answered, Answer());
  LOOM_TRY(ReturnCredits());
  LOOM_ASSIGN_OR_RETURN(bool sent, PostSends());
  while (!sends_.empty() && sends_.front().t->complete()) {
    if (sends_.front().reg != nullptr) cache_->Unpin(sends_.front().reg);
    sends_.pop_front();
  }
  if (idle()) cache_->Clear();  // see RegistrationCache: no registration outlives the work
  return moved || consumed || answered || sent;
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
