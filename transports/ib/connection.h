// IbConnection: one peer over an RC queue pair. Every message is a header
// write and payload chunks, each an RDMA write with immediate into the next
// slot of the peer's receive ring; the receiver copies (or reduces) out of
// its ring and returns freed slots as credits. With GPUDirect RDMA a large
// message into GPU memory is written straight into the receiver's buffer
// after the receiver granted it. Written against IbWire, so the whole data
// path runs in tests over an in-memory fake.
#pragma once

#include <sys/types.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "transports/ib/flow.h"
#include "transports/ib/reg_cache.h"
#include "transports/ib/wire.h"
#include "transports/transport.h"

namespace loom::ib {

struct IbConnectionOptions {
  RingLayout layout;                // must equal the peer's
  size_t eager_bytes = 64 << 10;    // messages up to this size are copied into staging
  size_t registration_entries = 64; // registration cache capacity
  // GPUDirect RDMA (gdr.h): sends may come from GPU memory (the wire
  // registers it); this end grants receives into GPU memory; the peer
  // grants (its device_recvs), so this end's large messages wait for its
  // answer. device_recvs and the peer's peer_grants must agree.
  bool device_sends = false;
  bool device_recvs = false;
  bool peer_grants = false;
  size_t granted_write_bytes = 1 << 20;  // the largest single write into a granted buffer
};

// Protocol, per direction:
//  - a message is its 16-byte MessageHeader (imm HeaderImm(seq)) then
//    chunks of at most slot_bytes (imm EncodeImm(seq, i), i < kMaxChunks);
//    each write takes one credit (a slot of the peer's ring, in order);
//  - sources up to eager_bytes are copied into a registered staging ring;
//    larger ones are written from the user's buffer, registered through the
//    cache and pinned until the transfer's writes complete;
//  - a send's `done` advances as its writes complete (the source may then be
//    reused), a receive's as bytes are copied or reduced out of the ring,
//    as far as Allowed() permits; a freed slot is owed to the peer and
//    returned at the end of the Progress that freed it (CreditImm);
//  - the receive queue always holds 2 x (slots + kAnswers) zero-length
//    receives (one per incoming immediate: at most `slots` data writes,
//    `slots` credit messages, kAnswers answers and kAnswers last writes
//    into granted buffers can be outstanding).
// Rendezvous, when this end grants (device_recvs): each receive larger
// than eager_bytes is answered, in posting order, as soon as it is posted
// and fewer than kAnswers answered messages are unfinished: a receive into
// GPU memory with a grant (its address and key, written into the sender's
// mailbox), any other with "through the ring". The sender posts the header,
// waits for the answer, then either writes the payload into the granted
// buffer (plain writes, the last one with GrantedImm) or goes through the
// ring as above. Both ends tell large from small by `bytes`, which the
// header check compares, so a mismatch is named, not a hang. A receive
// into GPU memory must be larger than eager_bytes and not reduce (the
// caller stages the others).
// Thread-compatible: one thread (the engine's) calls everything.
class IbConnection final : public Connection {
 public:
  // Posts the initial receives; the wire's queue pair must be in RTR or RTS.
  static Result<std::unique_ptr<IbConnection>> Create(int peer, std::string peer_host,
                                                      std::string via, std::unique_ptr<IbWire> wire,
                                                      const IbConnectionOptions& options);
  ~IbConnection() override;

  void PostSend(Transfer* t) override;
  void PostRecv(Transfer* t) override;
  Result<bool> Progress() override;
  bool idle() const override { return sends_.empty() && recvs_.empty(); }
  // Arms the completion channel; gives an always-readable descriptor when a
  // completion already raced the arm (kept for the next Progress).
  void AppendPollFds(std::vector<pollfd>* fds) const override;
  std::string Describe() const override;
  bool sends_device_memory() const override { return opt_.device_sends; }
  size_t receives_device_memory_from() const override {
    return opt_.device_recvs ? opt_.eager_bytes + 1 : 0;
  }

  const RegistrationCache& registrations() const { return *cache_; }

 private:
  struct SendPosted {
    Transfer* t;
    bool header_posted = false;
    bool answered = false;  // the peer's answer was taken (only when it is awaited)
    bool granted = false;   // ... and it granted: write into grant
    AnswerRecord grant;
    size_t posted = 0;  // payload bytes handed to writes
    RegistrationCache::Ref reg = nullptr;
  };
  struct RecvPosted {
    Transfer* t;
    uint32_t chunk = 0;  // next payload chunk expected
    bool answered = false;
    bool granted = false;
    RegistrationCache::Ref reg = nullptr;  // the granted buffer's
  };
  struct WriteRecord {
    SendPosted* send = nullptr;  // null: a credit message or an answer
    bool header = false;
    bool answer = false;
    size_t end = 0;  // payload bytes complete once this write is
  };

  IbConnection(int peer, std::string peer_host, std::string via, std::unique_ptr<IbWire> wire,
               const IbConnectionOptions& options);
  Status Handle(const WireCompletion& c);
  Result<bool> Consume();
  Result<bool> PostSends();
  Status ReturnCredits();
  Result<bool> Answer();
  bool Large(const Transfer& t) const { return t.bytes > opt_.eager_bytes; }
  Status CheckDeviceRecv(const Transfer& t) const;
  // The payload of `s` into the peer's granted buffer; false while it waits.
  Result<bool> PostGranted(SendPosted& s);
  bool CanWrite() const { return credits_.available() && data_out_ < opt_.layout.slots; }
  Status Write(const void* local, size_t bytes, uint32_t lkey, uint32_t imm, WriteRecord rec);

  int peer_;
  std::string peer_host_, via_;
  IbConnectionOptions opt_;
  std::unique_ptr<IbWire> wire_;
  std::unique_ptr<RegistrationCache> cache_;  // declared after wire_: deregisters first
  std::vector<char> staging_;
  RegistrationCache::Ref staging_reg_ = nullptr;
  SendCredits credits_;
  RecvRing ring_;
  WriteFifo<WriteRecord> writes_;
  uint32_t data_out_ = 0, credit_out_ = 0, answer_out_ = 0;
  // Rendezvous: answers taken from the mailbox, not yet matched to a send;
  // answers received and sent so far (their mailbox indices); this end's
  // answered receives not yet complete; granted messages whose last write
  // arrived (their seq), not yet matched to the receive.
  std::deque<AnswerRecord> answers_in_;
  uint64_t answers_received_ = 0, answers_sent_ = 0;
  uint32_t answers_open_ = 0;
  std::deque<uint32_t> granted_arrived_;
  uint64_t staged_ = 0;  // data writes posted, for the staging slot
  std::deque<SendPosted> sends_;
  std::deque<RecvPosted> recvs_;
  uint32_t send_seq_ = 0, recv_seq_ = 0;
  int ready_fd_ = -1;  // an eventfd that is always readable
  mutable std::vector<WireCompletion> stash_;  // polled while arming
  mutable Status stash_error_;
};

}  // namespace loom::ib
