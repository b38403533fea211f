// IbWire: the few verbs operations an IbConnection performs on its queue
// pair, completion queue and memory, as an interface. VerbsWire (verbs_wire.cc)
// is the real one; tests drive IbConnection over an in-memory fake pair.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "transports/ib/reg_cache.h"

namespace loom::ib {

// One work completion, as much of ibv_wc as the connection reads.
struct WireCompletion {
  enum class Op : uint8_t { kWrite, kRecv };
  uint64_t wr_id = 0;
  Op op = Op::kWrite;   // kWrite: our RDMA write finished; kRecv: a peer's write-with-imm landed
  int status = 0;       // ibv_wc_status; 0 = IBV_WC_SUCCESS
  uint32_t vendor_err = 0;
  uint32_t imm = 0;     // kRecv only
  uint32_t bytes = 0;   // kRecv only: bytes written into our ring
};

// An RDMA write with immediate of [local, local + bytes) (registered under
// lkey) into the peer's ring (and mailbox) at `remote_offset`; bytes may be
// 0. With rkey set, into a buffer the peer granted instead: at remote_addr
// under rkey. Without `with_imm`, a plain write: the peer sees no
// completion (the connection's last write of the message tells it).
struct WriteRequest {
  uint64_t wr_id = 0;
  const void* local = nullptr;
  size_t bytes = 0;
  uint32_t lkey = 0;
  uint64_t remote_offset = 0;
  uint32_t imm = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  bool with_imm = true;
};

// Owned by one IbConnection and used only from the thread driving it.
// Posting never blocks; Poll never blocks.
class IbWire : public Registrar {
 public:
  ~IbWire() override = default;
  virtual Status PostWrite(const WriteRequest& w) = 0;
  // A receive with no buffer: it only takes one incoming immediate.
  virtual Status PostRecv(uint64_t wr_id) = 0;
  // Up to `max` completions into `out`; returns how many (0 = none now).
  virtual Result<int> Poll(WireCompletion* out, int max) = 0;
  // The registered ring and mailbox the peer writes into (ring_bytes long).
  virtual char* ring() = 0;
  virtual size_t ring_bytes() const = 0;
  // ibv_wc_status_str for a completion status.
  virtual const char* StatusText(int status) const = 0;
  // For sleeping: a descriptor readable once a completion arrives after
  // Arm() (-1: none, the caller must poll). Arm consumes pending events and
  // requests the next one; a completion that raced it is found by Poll.
  virtual int event_fd() const { return -1; }
  virtual Status Arm() { return Status::Ok(); }
};

}  // namespace loom::ib
