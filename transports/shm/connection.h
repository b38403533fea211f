// ShmConnection: two single-producer/single-consumer byte FIFOs in shared
// memory (one per direction) between two ranks of one host.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "transports/engine.h"
#include "transports/shm/segment.h"
#include "transports/peer_memory.h"
#include "transports/transport.h"

namespace loom {

// Control block at the start of each FIFO segment; data follows at
// kShmDataOffset. Head and tail are written by different ranks: a line pair
// apart (kLinePairBytes, transports/engine.h).
struct ShmFifoControl {
  alignas(kLinePairBytes) std::atomic<uint64_t> head;  // bytes ever written (sender only)
  alignas(kLinePairBytes) std::atomic<uint64_t> tail;  // bytes ever consumed (receiver only)
  alignas(kLinePairBytes) uint64_t capacity;           // multiple of 64
  uint64_t magic;
  // TSan builds: the address, in the creating (sending) process, of this
  // FIFO's TsanKeys (NewTsanKeys); 0 in other builds.
  uint64_t tsan_keys;
};
inline constexpr size_t kShmDataOffset = 3 * kLinePairBytes;
static_assert(sizeof(ShmFifoControl) <= kShmDataOffset);

// Ranks that are threads of one process map a FIFO or a mailbox twice, at
// different addresses, so TSan cannot pair a store with the load that reads
// it (transports/tsan.h). Both ends announce each release and acquire on
// these keys instead: a FIFO on head and tail, a mailbox's small-collective
// slots on `slots`. They live in ordinary memory for the life of the
// process, not in the mapping: TSan forgets what it knew of unmapped memory,
// and a sender may finish and unmap its end before the receiver has read
// its last message.
struct TsanKeys {
  char head;
  char tail;
  char slots;
};
uint64_t NewTsanKeys();  // 0 without TSan

// Per-rank mailbox segment: the doorbell peers ring, the pid for liveness,
// and the rank's slots for small collectives (Engine::SmallExchange). The
// doorbell (written by the peers) and the slots (by this rank) are a line
// pair apart.
struct ShmMailbox {
  Doorbell doorbell;
  pid_t pid;
  uint64_t pid_ns;  // the creator's PID namespace (the inode of /proc/self/ns/pid); 0 unknown
  uint64_t magic;
  uint64_t tsan_keys;  // TSan builds: the creating process's TsanKeys; else 0
  alignas(kLinePairBytes) SmallSlot small[2];
};

class ShmConnection final : public Connection, public PeerMemory {
 public:
  // `out` is this rank's FIFO to the peer, `in` the peer's FIFO to us;
  // `peer_mailbox` is mapped from the peer (we ring its doorbell).
  ShmConnection(int peer, std::string peer_host, pid_t peer_pid, ShmSegment out, ShmSegment in,
                ShmSegment peer_mailbox);

  void PostSend(Transfer* t) override;
  void PostRecv(Transfer* t) override;
  Result<bool> Progress() override;
  bool idle() const override { return sends_.empty() && recvs_.empty(); }
  bool uses_doorbell() const override { return true; }
  Status CheckPeerAlive() const override;
  std::optional<PeerWait> PeerWaitingOn() const override;
  PeerMailboxView PeerMailbox() const override;
  std::optional<MessageHeader> PeekIncoming() override;
  bool RecvStarved() override;
  std::string Describe() const override;
  PeerMemory* peer_memory() override { return this; }
  bool can_read_peer() const override { return peer_read_; }
  Status ReadPeer(void* dst, uint64_t remote, size_t bytes) override;
  // Maps the peer's shareable allocation read-only through
  // /proc/<pid>/fd/<fd> (pre-faulted, kept for later calls, the oldest
  // dropped beyond kMaxPeerMappings). A peer whose descriptors cannot be
  // opened (another user, a hardened /proc) is logged once and read with
  // ReadPeer from then on.
  // When `where.frees` shows the peer has freed shareable memory since the
  // last call, mappings whose descriptor no longer names the file mapped
  // are dropped first, so freed memory is released.
  const void* PeerView(uint64_t remote, size_t bytes, const SharedRef& where) override;
  ~ShmConnection() override;
  // How many of the peer's allocations are mapped now (tests, diagnostics).
  size_t mapped_allocations() const { return mappings_.size(); }
  // Bytes this end has ever written into its FIFO, headers and padding
  // included (tests): a multiple of 64 between messages.
  uint64_t fifo_bytes_written() const { return head_; }
  ShmConnection(const ShmConnection&) = delete;
  ShmConnection& operator=(const ShmConnection&) = delete;

  // Enables ReadPeer once setup has verified (on every rank) that the peer's
  // memory is readable: same process, or cross-memory attach permitted.
  void EnablePeerRead() { peer_read_ = true; }
  // Sends write pieces of kStreamSendMinBytes or more into the FIFO with
  // streaming stores (StreamingCopy): the receiver then reads them from
  // memory instead of from this core's cache, which is faster when the two
  // cores share no cache level. Setup picks the first way, the
  // communicator then each call's (comm/stream_chooser.h, LOOM_SHM_STREAM).
  // Call between transfers, from the thread that progresses this connection.
  void set_streaming_sends(bool on) override { stream_sends_ = on; }
  bool streaming_sends() const override { return stream_sends_; }
  static constexpr size_t kStreamSendMinBytes = 4096;
  // Tries one read of `bytes` at `remote` (setup's probe); no state change.
  Status ProbePeerRead(void* dst, uint64_t remote, size_t bytes) const;
  // process_vm_readv of `bytes` at `remote` into dst, to the last byte.
  Status ReadPeerMemory(void* dst, uint64_t remote, size_t bytes) const;

 private:
  bool ProgressSend();
  Result<bool> ProgressRecv();
  void LoadOutTail();  // cached_out_tail_ = the peer's tail (acquire)
  void LoadInHead();   // cached_in_head_ = the peer's head (acquire)
  std::string PeerDesc() const;
  std::string PeerFdPath(int fd) const;  // /proc/<peer pid>/fd/<fd>
  void DropFreedMappings();

  int peer_;
  std::string peer_host_;
  pid_t peer_pid_;
  ShmSegment out_seg_, in_seg_, peer_mailbox_seg_;
  ShmFifoControl* out_;
  ShmFifoControl* in_;
  char* out_data_;
  const char* in_data_;
  uint64_t cap_out_, cap_in_;
  Doorbell* peer_bell_;
  std::deque<Transfer*> sends_, recvs_;
  uint32_t send_seq_ = 0, recv_seq_ = 0;
  // Local copies: the only writer of head (out) / tail (in) is this side.
  uint64_t head_ = 0, tail_ = 0;
  uint64_t cached_out_tail_ = 0, cached_in_head_ = 0;
  bool peer_read_ = false;
  bool stream_sends_ = false;
  struct PeerMapping {
    uint64_t serial;
    uint64_t base;  // in the peer
    size_t bytes;
    const char* local;
    int peer_fd;  // the allocation's descriptor number in the peer
    dev_t dev;    // and the file it named when mapped
    ino_t ino;
  };
  static constexpr size_t kMaxPeerMappings = 16;
  std::vector<PeerMapping> mappings_;  // oldest first
  uint64_t peer_frees_ = 0;            // the peer's FreeShared count last seen
  bool cannot_map_ = false;
  bool mapping_logged_ = false;        // INFO for the first mapping, TRACE after
  // Same-process peer under TSan only (else null): the keys of each FIFO.
  TsanKeys* tsan_out_ = nullptr;
  TsanKeys* tsan_in_ = nullptr;
};

}  // namespace loom
