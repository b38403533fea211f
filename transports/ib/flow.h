// The IB connection's bookkeeping as pure logic: slot credits for writes
// into the peer's ring, the local ring's arrivals and freed slots, the
// FIFO of posted writes their completions settle, and completion errors
// mapped to Status. No verbs calls; tested in ib_test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "base/status.h"

namespace loom::ib {

// The ring geometry, equal on both ends: `slots` slots of `slot_bytes`,
// then a mailbox of kAnswers records where the peer's answers to this end's
// large messages land (connection.h).
struct RingLayout {
  static constexpr uint32_t kAnswers = 8;           // answers outstanding per direction
  static constexpr size_t kAnswerRecordBytes = 24;  // AnswerRecord
  size_t slot_bytes = 128 << 10;
  uint32_t slots = 32;  // at most 255: a credit message carries the count in 8 bits
  size_t bytes() const { return slot_bytes * slots; }
  size_t Offset(uint32_t slot) const { return slot * slot_bytes; }
  size_t MailboxOffset(uint64_t answer) const {
    return bytes() + (answer % kAnswers) * kAnswerRecordBytes;
  }
  // What the registered region holds: the ring and the mailbox.
  size_t total_bytes() const { return bytes() + kAnswers * kAnswerRecordBytes; }
};

// A grant: where the receiver's buffer for message `seq` is, its key, and
// its size (the sender checks it before writing: the key covers more).
struct AnswerRecord {
  uint64_t addr = 0;
  uint64_t bytes = 0;
  uint32_t rkey = 0;
  uint32_t seq = 0;  // modulo 256, checked against the message
};
static_assert(sizeof(AnswerRecord) == RingLayout::kAnswerRecordBytes);

// Sender side: the peer's ring slots this end may write into. A write takes
// the next slot in order (the peer consumes them in order); the peer returns
// freed slots in credit messages. Not thread-safe (one connection's thread).
class SendCredits {
 public:
  explicit SendCredits(uint32_t slots) : slots_(slots), free_(slots) {}
  bool available() const { return free_ > 0; }
  // The ring slot of the next write; only when available().
  uint32_t Take() {
    --free_;
    return static_cast<uint32_t>(taken_++ % slots_);
  }
  // InternalError when the peer returns more than are out (a protocol bug
  // or a corrupted immediate), naming peer_desc.
  Status Return(uint32_t n, const std::string& peer_desc);
  uint32_t free() const { return free_; }

 private:
  uint32_t slots_, free_;
  uint64_t taken_ = 0;
};

// Receiver side: writes land in ring order; the connection consumes the
// oldest arrival first and frees its slot; freed slots are owed to the peer
// as credits until TakeCredits() sends them. Not thread-safe.
class RecvRing {
 public:
  explicit RecvRing(uint32_t slots) : slots_(slots) {}
  // A write arrived (its bytes are in slot SlotOf(arrived-1)). InternalError
  // when more writes arrived than slots are unfreed (the peer overran).
  Status Arrive(uint32_t bytes, uint32_t imm, const std::string& peer_desc);
  bool empty() const { return pending_.empty(); }
  // The oldest unconsumed arrival, its slot, and how far it was consumed.
  struct Arrival {
    uint32_t slot;
    uint32_t bytes;
    uint32_t imm;
    uint32_t used = 0;
  };
  Arrival& front() { return pending_.front(); }
  // Frees the front slot; one more credit is owed.
  void Free();
  // Credits owed, at most 255 per message; they are no longer owed after.
  uint32_t TakeCredits();
  uint32_t owed() const { return owed_; }

 private:
  uint32_t slots_;
  uint64_t arrived_ = 0;
  std::deque<Arrival> pending_;
  uint32_t owed_ = 0;
};

// Posted writes in posting order. A reliable-connected queue pair completes
// them in that order, so each completion must match the oldest; anything
// else (an unknown wr_id) is an InternalError naming peer_desc.
template <typename T>
class WriteFifo {
 public:
  uint64_t Push(T value) {
    q_.push_back({next_id_, std::move(value)});
    return next_id_++;
  }
  Result<T> Complete(uint64_t wr_id, const std::string& peer_desc) {
    if (q_.empty() || q_.front().first != wr_id) {
      return InternalError("IB completion for write " + std::to_string(wr_id) + " from " +
                           peer_desc + " out of order (expected " +
                           (q_.empty() ? std::string("none") : std::to_string(q_.front().first)) +
                           ")");
    }
    T v = std::move(q_.front().second);
    q_.pop_front();
    return v;
  }
  size_t size() const { return q_.size(); }

 private:
  std::deque<std::pair<uint64_t, T>> q_;
  uint64_t next_id_ = 1;
};

// A failed work completion as a Status naming the peer, the verbs status
// string (ibv_wc_status_str) and vendor code, and what to check:
// retry/RNR exhaustion is a RemoteError (peer gone or unreachable: check
// the link, NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT), a flush is a RemoteError
// (an earlier error put the queue pair in ERROR), access/protection errors
// are InternalError (a loom bug). `write` says whether it was our write or
// an incoming one. Pure.
Status MapCompletionError(int status, const char* status_text, uint32_t vendor_err, bool write,
                          const std::string& peer_desc);

}  // namespace loom::ib
