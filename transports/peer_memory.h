// PeerMemory: what a connection to a peer on this host can do beyond
// messages — read the peer's memory (a mapped view or a cross-memory copy),
// see its mailbox, and look into its FIFO for diagnostics. Only shared
// memory has it: Connection::peer_memory() is null for every other
// transport, and callers then use messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "base/status.h"
#include "transports/transport.h"

namespace loom {

class PeerMemory {
 public:
  virtual ~PeerMemory() = default;

  // The peer's mailbox: its doorbell and small-collective slots.
  virtual PeerMailboxView PeerMailbox() const = 0;
  // The header of the next message the peer sent that this side has not
  // read yet, if any (only meaningful while no receive is posted: mismatch
  // diagnostics).
  virtual std::optional<MessageHeader> PeekIncoming() = 0;
  // A receive is posted and not one unread byte of the peer's has arrived
  // (mismatch diagnostics).
  virtual bool RecvStarved() = 0;

  // Single-copy reads: copies `bytes` at `remote` in the peer's address
  // space into `dst` (process_vm_readv between processes). Blocking,
  // thread-compatible; kInvalidUsage unless can_read_peer().
  virtual bool can_read_peer() const = 0;
  virtual Status ReadPeer(void* dst, uint64_t remote, size_t bytes) = 0;
  // Zero-copy: a local read-only address for `bytes` at `remote` in the
  // peer, or null when there is none (then use ReadPeer): there is one when
  // the peer is this process, or when `where` says the bytes are in the
  // peer's shareable memory (loom::AllocShared) and it could be mapped. The
  // view stays valid until the connection is destroyed or has mapped many
  // other allocations; use it within the operation. Thread-compatible.
  virtual const void* PeerView(uint64_t remote, size_t bytes, const SharedRef& where) = 0;

  // How sends into the peer's FIFO write: through this core's cache, or
  // streaming (non-temporal stores), which the dispatcher chooses per call
  // from measured times. Thread-compatible; takes effect at the next send.
  virtual void set_streaming_sends(bool on) = 0;
  virtual bool streaming_sends() const = 0;
};

// The shareable allocation (loom::AllocShared) holding [p, p + bytes) in
// this process, if any (fd < 0 otherwise): what a peer's PeerView needs to
// map it. Thread-safe.
SharedRef FindShared(const void* p, size_t bytes);

}  // namespace loom
