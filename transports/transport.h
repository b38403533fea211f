// The transport interface: how bytes move between this rank and one peer.
//
// Every backend (shm, tcp, later ucx/ib/cuda) implements Connection in the
// same file names (context.{h,cc} for per-communicator setup, connection.{h,cc}
// for one peer). Algorithms never see a backend: they post Transfers and let
// the Engine progress them.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "loom/types.hpp"

namespace loom {

// What kind of operation a message belongs to; carried in every message
// header so a rank that issued a different collective is named, not a hang.
enum class OpKind : uint8_t {
  kAllReduce = 1,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSendRecv,
  kBarrier,
  kInternal,
};
const char* OpKindName(OpKind kind);

// One posted send or receive of a contiguous byte range to/from one peer.
// Owned by the caller, who keeps it (and its buffers) alive until complete.
// Transfers posted to one connection complete in posting order per direction,
// and the n-th send of a rank to a peer matches the n-th receive of that
// peer from the rank: both sides must agree on `bytes` and `kind` (checked).
struct Transfer {
  enum class Dir : uint8_t { kSend, kRecv };
  Dir dir = Dir::kSend;
  int peer = -1;
  OpKind kind = OpKind::kInternal;
  const void* src = nullptr;  // send: bytes to send
  void* dst = nullptr;        // recv: where the bytes land
  size_t bytes = 0;
  // recv only: when reduce_with is set, dst[i] = reduce(reduce_with[i], incoming[i])
  // element-wise for `type`/`op` (reduce_with may equal dst). The kernel is
  // passed in so transports need not know the reduction library.
  const void* reduce_with = nullptr;
  using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count, DataType type,
                            RedOp op);
  ReduceFn reduce = nullptr;
  DataType type = DataType::kUint8;
  RedOp op = RedOp::kSum;
  // Optional: this transfer may only move bytes [0, gate->done) (and
  // [0, also->done)): a send of a block that an earlier receive is still
  // filling, or a receive into a buffer an earlier send is still reading,
  // so that steps pipeline without overwriting anything in flight.
  const Transfer* gate = nullptr;
  const Transfer* also = nullptr;
  // recv only: dst is final (nothing in this operation reads it again), so a
  // transport may write a large one around the cache (transports/streaming.h).
  bool nontemporal = false;
  // src (send) or dst (recv) is GPU memory, which the NIC reads or writes
  // directly (GPUDirect RDMA, transports/ib/gdr.h): only a connection whose
  // sends_device_memory() / receives_device_memory_from() allow it may take
  // such a transfer, and nothing else may touch those bytes on the CPU (no
  // reduce_with, no copy_to).
  bool device = false;
  // send only: the bytes that have left are also copied here (`bytes` of
  // room, not overlapping src), by the engine, soon after the transport
  // read them, while they are still in cache (an out-of-place all-gather's
  // own block). The copy is complete when the transfer is.
  void* copy_to = nullptr;
  // With copy_to: write the copy around the cache (transports/streaming.h),
  // which pays once the operation's whole output no longer stays cached.
  bool copy_nontemporal = false;
  size_t copied = 0;  // engine bookkeeping for copy_to

  size_t done = 0;  // bytes completed (received and reduced, or handed to the wire)
  bool complete() const { return done == bytes && header_done; }
  // Bytes this transfer may move now given its gates.
  size_t Allowed() const {
    size_t n = bytes;
    if (gate != nullptr && gate->done < n) n = gate->done;
    if (also != nullptr && also->done < n) n = also->done;
    return n;
  }

  // Transport bookkeeping.
  bool header_done = false;
  uint32_t seq = 0;
};

// Wire header in front of every message (16 bytes), so mismatches are named.
struct MessageHeader {
  uint64_t bytes;
  uint32_t seq;     // per connection and direction: n-th message
  uint8_t kind;     // OpKind
  uint8_t magic;    // kHeaderMagic
  uint16_t reserved;
};
static_assert(sizeof(MessageHeader) == 16);
inline constexpr uint8_t kHeaderMagic = 0x6c;  // 'l'

class Connection;
class PeerMemory;  // transports/peer_memory.h

// Checks a received header against the posted receive; the message names
// both sides' view so the user sees which rank diverged. `from` is asked to
// describe itself only when the check fails (this runs for every message).
Status CheckHeader(const MessageHeader& h, const Transfer& t, const Connection& from);

// Where a buffer lives inside a shareable allocation, as its owner process
// describes it to peers: the allocation's descriptor number there, its base
// address and length there, and a serial no other allocation of that
// process ever reuses (descriptor numbers and addresses are reused after a
// free). fd < 0: the buffer is not in shareable memory. `frees` counts the
// owner's FreeShared calls so far (set either way): a peer that sees it
// change drops its mappings of allocations the owner has freed.
struct SharedRef {
  int32_t fd = -1;
  uint32_t reserved = 0;
  uint64_t base = 0;
  uint64_t bytes = 0;
  uint64_t serial = 0;
  uint64_t frees = 0;
  bool valid() const { return fd >= 0; }
};

struct Doorbell;   // transports/engine.h
struct SmallSlot;  // transports/engine.h

// A shared-memory peer's mailbox as this rank sees it: its doorbell and its
// small-collective slots (Engine::SmallExchange).
struct PeerMailboxView {
  const SmallSlot* slots = nullptr;  // two, used alternately
  Doorbell* bell = nullptr;
  void* tsan_key = nullptr;  // TSan builds, a peer in this process: its slots' key
};

// What a same-host peer published as blocking it (see Doorbell::waiting_on),
// or that its process is stopped (SIGSTOP, a debugger): then what it
// published is stale and `peer` is -1.
struct PeerWait {
  int peer;
  bool over_network;
  bool stopped = false;
};

// Evidence that data this rank sent a peer does not get through: the
// kernel retransmits it without an acknowledgement (the peer's side of the
// link is cut), or cannot send it at all while the peer's window is open (no
// route, a down interface or a firewall here). A stopped peer is no such
// case: its kernel still acknowledges, or closes its window.
struct LinkStall {
  int peer = -1;
  bool unsent = false;       // the data never left this host
  uint32_t retransmits = 0;  // unanswered retransmissions (or probes, when unsent)
  uint32_t silent_ms = 0;    // since the last acknowledgement from the peer
  uint64_t bytes = 0;        // waiting in the socket
};

class Connection {
 public:
  virtual ~Connection() = default;

  // Posting never blocks; the transfer is queued behind earlier ones.
  virtual void PostSend(Transfer* t) = 0;
  virtual void PostRecv(Transfer* t) = 0;
  // Moves what can move without blocking; returns whether anything moved.
  // An error names the peer (rank, host) and the transport.
  virtual Result<bool> Progress() = 0;
  virtual bool idle() const = 0;  // nothing posted

  // For sleeping: descriptors to poll (none for shared memory, which uses the
  // rank's doorbell instead).
  virtual void AppendPollFds(std::vector<pollfd>* fds) const { (void)fds; }
  virtual bool uses_doorbell() const { return false; }
  // GPUDirect RDMA: whether sends may come straight from GPU memory, and
  // the smallest receive that may land straight in GPU memory (0: none).
  virtual bool sends_device_memory() const { return false; }
  virtual size_t receives_device_memory_from() const { return 0; }
  // Called while sleeping (rarely): a dead peer process found here is an error.
  virtual Status CheckPeerAlive() const { return Status::Ok(); }
  // For timeout messages: whom the peer itself is blocked on, when it says
  // (shared memory peers publish it while they sleep), or that its process
  // is stopped; nullopt otherwise.
  virtual std::optional<PeerWait> PeerWaitingOn() const { return std::nullopt; }
  // For a long wait's report: whether what this rank sent the peer is stuck
  // on the link (TCP reads it from TCP_INFO); nullopt when it is not, or the
  // transport cannot tell.
  virtual std::optional<LinkStall> SendStall() const { return std::nullopt; }
  // "SHM", "NET/Socket/lo", as NCCL prints "via ...".
  virtual std::string Describe() const = 0;

  // Optional capability of a peer on this host (transports/peer_memory.h):
  // its memory, mailbox and FIFO. Null (the default) for every transport
  // but shared memory; the connection owns it.
  virtual PeerMemory* peer_memory() { return nullptr; }
};

}  // namespace loom
