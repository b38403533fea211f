// ShmConnection: FIFO progress. A record starts on a cache line: its header
// takes that line and its payload the lines after, padded to whole lines,
// so payload elements never straddle the wrap-around and a receive can
// reduce straight out of the FIFO (no extra copy).
#include "transports/shm/connection.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>

#include "base/log.h"
#include "transports/copy.h"
#include "transports/streaming.h"
#include "transports/tsan.h"

namespace loom {

namespace {
// Every record in a FIFO starts on a cache line, and its header takes that
// whole line, so every payload starts on a line of the FIFO too. Then a
// line-aligned buffer (any page-aligned one, every ring block) is copied
// line for line; the sender's next header never lands in the line that
// holds the end of the payload the receiver is still reading; and a
// payload's distance from a page-aligned buffer, mod 4096, is a multiple of
// 64, never the 1-15 at which memcpy's rep movsb slows down tenfold on
// some CPUs (transports/copy.h). With 16-byte headers
// and 8-byte padding none of this held. The FIFO's capacity is a multiple
// of the line (ShmContext::Create), so no header wraps.
constexpr uint64_t kRecordAlign = 64;
constexpr uint64_t kHeaderCell = kRecordAlign;
static_assert(sizeof(MessageHeader) <= kHeaderCell);
uint64_t RoundUp(uint64_t v) {
  return (v + kRecordAlign - 1) & ~(kRecordAlign - 1);
}

}  // namespace

uint64_t NewTsanKeys() {
#ifdef LOOM_TSAN
  static std::mutex mu;
  static std::deque<TsanKeys> keys;  // stable addresses, never freed
  std::lock_guard<std::mutex> lock(mu);
  return reinterpret_cast<uint64_t>(&keys.emplace_back());
#else
  return 0;
#endif
}

ShmConnection::ShmConnection(int peer, std::string peer_host, pid_t peer_pid, ShmSegment out,
                             ShmSegment in, ShmSegment peer_mailbox)
    : peer_(peer),
      peer_host_(std::move(peer_host)),
      peer_pid_(peer_pid),
      out_seg_(std::move(out)),
      in_seg_(std::move(in)),
      peer_mailbox_seg_(std::move(peer_mailbox)) {
  out_ = static_cast<ShmFifoControl*>(out_seg_.data());
  in_ = static_cast<ShmFifoControl*>(in_seg_.data());
  out_data_ = static_cast<char*>(out_seg_.data()) + kShmDataOffset;
  in_data_ = static_cast<const char*>(in_seg_.data()) + kShmDataOffset;
  cap_out_ = out_->capacity;
  cap_in_ = in_->capacity;
  peer_bell_ = &static_cast<ShmMailbox*>(peer_mailbox_seg_.data())->doorbell;
  head_ = out_->head.load(std::memory_order_relaxed);
  cached_out_tail_ = out_->tail.load(std::memory_order_acquire);
  tail_ = in_->tail.load(std::memory_order_relaxed);
  cached_in_head_ = in_->head.load(std::memory_order_acquire);
#ifdef LOOM_TSAN
  if (peer_pid_ == getpid()) {
    tsan_out_ = reinterpret_cast<TsanKeys*>(out_->tsan_keys);
    tsan_in_ = reinterpret_cast<TsanKeys*>(in_->tsan_keys);
  }
#endif
}

void ShmConnection::PostSend(Transfer* t) {
  t->seq = send_seq_++;
  sends_.push_back(t);
}

void ShmConnection::PostRecv(Transfer* t) {
  t->seq = recv_seq_++;
  recvs_.push_back(t);
}

std::string ShmConnection::PeerDesc() const {
  return "rank " + std::to_string(peer_) + " (" + peer_host_ + ", pid " +
         std::to_string(peer_pid_) + ", via SHM)";
}

std::string ShmConnection::Describe() const { return PeerDesc(); }

Status ShmConnection::CheckPeerAlive() const {
  if (peer_pid_ != getpid() && kill(peer_pid_, 0) != 0 && errno == ESRCH) {
    return RemoteError(PeerDesc() + " has exited or died while this rank was waiting for it");
  }
  return Status::Ok();
}

namespace {

// Whether process `pid` is stopped: state T (a signal) or t (a tracer) in
// /proc/<pid>/stat, whose state follows the command name's closing ')'.
bool ProcessStopped(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state == 'T' || state == 't';
}

}  // namespace

std::optional<PeerWait> ShmConnection::PeerWaitingOn() const {
  if (peer_pid_ != getpid() && ProcessStopped(peer_pid_)) return PeerWait{-1, false, true};
  int64_t wait = peer_bell_->waiting_on.load(std::memory_order_relaxed);
  if (wait == kNotWaiting || wait < 0) return std::nullopt;
  return PeerWait{static_cast<int>(wait / 2), wait % 2 == 1};
}

PeerMailboxView ShmConnection::PeerMailbox() const {
  const auto* mb = static_cast<const ShmMailbox*>(peer_mailbox_seg_.data());
  void* tsan_key = nullptr;
  if (mb->tsan_keys != 0 && peer_pid_ == getpid()) {
    tsan_key = &reinterpret_cast<TsanKeys*>(mb->tsan_keys)->slots;
  }
  return {mb->small, peer_bell_, tsan_key};
}

std::optional<MessageHeader> ShmConnection::PeekIncoming() {
  if (!recvs_.empty()) return std::nullopt;  // only between receives: tail_ is at a header
  if (cached_in_head_ - tail_ < kHeaderCell) {
    LoadInHead();
    if (cached_in_head_ - tail_ < kHeaderCell) return std::nullopt;
  }
  MessageHeader h;
  std::memcpy(&h, in_data_ + tail_ % cap_in_, sizeof(h));
  return h;
}

bool ShmConnection::RecvStarved() {
  if (recvs_.empty()) return false;
  LoadInHead();
  return cached_in_head_ == tail_;
}

Status ShmConnection::ProbePeerRead(void* dst, uint64_t remote, size_t bytes) const {
  if (bytes == 0) return Status::Ok();
  if (peer_pid_ == getpid()) {
    CopyBytes(dst, reinterpret_cast<const void*>(remote), bytes);
    return Status::Ok();
  }
  // The kernel copies with rep movsb too, so process_vm_readv slows down the
  // same way when destination minus source, mod 4096, is 1-15 (copy.h). Such a read lands in a
  // bounce buffer at the source's page offset, and CopyBytes moves it on.
  const uint64_t skew = (reinterpret_cast<uintptr_t>(dst) - remote) % 4096;
  // Without CopyBytes' vector loop the bounce would only add a copy.
  if (skew == 0 || skew >= 16 || bytes < kVectorCopyMinBytes || !VectorCopyAvailable()) {
    return ReadPeerMemory(dst, remote, bytes);
  }
  constexpr size_t kBounceBytes = 64 << 10;
  thread_local std::unique_ptr<char[]> bounce;
  if (!bounce) bounce = std::make_unique<char[]>(kBounceBytes + 4096);
  char* b = bounce.get() + (remote - reinterpret_cast<uintptr_t>(bounce.get())) % 4096;
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kBounceBytes, bytes - done);
    LOOM_TRY(ReadPeerMemory(b, remote + done, n));
    CopyBytes(static_cast<char*>(dst) + done, b, n);
    done += n;
  }
  return Status::Ok();
}

Status ShmConnection::ReadPeerMemory(void* dst, uint64_t remote, size_t bytes) const {
  // process_vm_readv may copy less than asked (page boundaries, signals).
  size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<char*>(dst) + done, bytes - done};
    iovec far{reinterpret_cast<void*>(remote + done), bytes - done};
    ssize_t n = process_vm_readv(peer_pid_, &local, 1, &far, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ESRCH) {
        return RemoteError(PeerDesc() + " has exited or died during a single-copy read");
      }
      return SystemError("process_vm_readv from " + PeerDesc(), errno);
    }
    if (n == 0) return InternalError("process_vm_readv from " + PeerDesc() + " made no progress");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

ShmConnection::~ShmConnection() {
  for (const PeerMapping& m : mappings_) munmap(const_cast<char*>(m.local), m.bytes);
}

std::string ShmConnection::PeerFdPath(int fd) const {
  return "/proc/" + std::to_string(peer_pid_) + "/fd/" + std::to_string(fd);
}

void ShmConnection::DropFreedMappings() {
  for (auto it = mappings_.begin(); it != mappings_.end();) {
    struct stat st {};
    if (stat(PeerFdPath(it->peer_fd).c_str(), &st) == 0 && st.st_dev == it->dev &&
        st.st_ino == it->ino) {
      ++it;
      continue;
    }
    munmap(const_cast<char*>(it->local), it->bytes);
    it = mappings_.erase(it);
  }
}

const void* ShmConnection::PeerView(uint64_t remote, size_t bytes, const SharedRef& where) {
  if (peer_pid_ == getpid()) return reinterpret_cast<const void*>(remote);
  if (where.frees > peer_frees_) {
    peer_frees_ = where.frees;
    DropFreedMappings();
  }
  if (!where.valid() || cannot_map_ || remote < where.base ||
      remote + bytes > where.base + where.bytes) {
    return nullptr;
  }
  for (const PeerMapping& m : mappings_) {
    if (m.serial == where.serial) return m.local + (remote - m.base);
  }
  // The descriptor number is the peer's, valid while its collective runs
  // (the caller's contract). Open it without blocking or taking a terminal,
  // then check that what we hold is one of loom's memory files.
  const std::string path = PeerFdPath(where.fd);
  std::string why;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  struct stat st {};
  if (fd < 0) {
    why = std::strerror(errno);
  } else {
    char target[64] = {};
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t tl = readlink(self.c_str(), target, sizeof(target) - 1);
    constexpr char kName[] = "/memfd:loom-mem ";  // then "(deleted)"
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || tl < static_cast<ssize_t>(sizeof(kName) - 1) ||
        std::strncmp(target, kName, sizeof(kName) - 1) != 0) {
      why = "the descriptor is not a loom memory file";
    } else if (static_cast<uint64_t>(st.st_size) < where.bytes) {
      why = "the memory file is smaller than announced";
    }
  }
  void* p = MAP_FAILED;
  if (why.empty()) {
    p = mmap(nullptr, where.bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) why = std::strerror(errno);
  }
  if (fd >= 0) close(fd);
  if (p == MAP_FAILED) {
    cannot_map_ = true;
    LOOM_INFO(log::kShm, "cannot map the shareable buffers of %s (%s): reading them with "
              "process_vm_readv instead", PeerDesc().c_str(), why.c_str());
    return nullptr;
  }
  if (mappings_.size() == kMaxPeerMappings) {
    munmap(const_cast<char*>(mappings_.front().local), mappings_.front().bytes);
    mappings_.erase(mappings_.begin());
  }
  mappings_.push_back(PeerMapping{where.serial, where.base, where.bytes, static_cast<char*>(p),
                                  where.fd, st.st_dev, st.st_ino});
  if (!mapping_logged_) {
    mapping_logged_ = true;
    LOOM_INFO(log::kShm, "mapped a shareable buffer of %s (%zu bytes): read without copies "
              "from now on", PeerDesc().c_str(), static_cast<size_t>(where.bytes));
  } else {
    LOOM_TRACE(log::kShm, "mapped a shareable buffer of %s (%zu bytes)", PeerDesc().c_str(),
               static_cast<size_t>(where.bytes));
  }
  return mappings_.back().local + (remote - where.base);
}

Status ShmConnection::ReadPeer(void* dst, uint64_t remote, size_t bytes) {
  if (!peer_read_) return InvalidUsage(Describe() + " cannot read peer memory directly");
  return ProbePeerRead(dst, remote, bytes);
}

// Copies as much of the front sends into the FIFO as space and gates allow.
bool ShmConnection::ProgressSend() {
  const uint64_t start = head_;
  while (!sends_.empty()) {
    Transfer* t = sends_.front();
    uint64_t free = cap_out_ - (head_ - cached_out_tail_);
    if (!t->header_done) {
      if (free < kHeaderCell) {
        LoadOutTail();
        free = cap_out_ - (head_ - cached_out_tail_);
        if (free < kHeaderCell) break;
      }
      const MessageHeader h{t->bytes, t->seq, static_cast<uint8_t>(t->kind), kHeaderMagic, 0};
      std::memcpy(out_data_ + head_ % cap_out_, &h, sizeof(h));
      head_ += kHeaderCell;
      free -= kHeaderCell;
      t->header_done = true;
    }
    const size_t allowed = t->Allowed();
    while (t->done < allowed) {
      if (free == 0) {
        LoadOutTail();
        free = cap_out_ - (head_ - cached_out_tail_);
        if (free == 0) break;
      }
      uint64_t pos = head_ % cap_out_;
      uint64_t n = std::min<uint64_t>({cap_out_ - pos, free, allowed - t->done});
      const char* from = static_cast<const char*>(t->src) + t->done;
      if (stream_sends_ && n >= kStreamSendMinBytes) {
        StreamingCopy(out_data_ + pos, from, n);  // fenced before head is published
      } else {
        CopyBytes(out_data_ + pos, from, n);
      }
      head_ += n;
      free -= n;
      t->done += n;
    }
    if (t->done < t->bytes) break;
    uint64_t pad = RoundUp(head_) - head_;
    if (pad > free) {
      LoadOutTail();
      if (pad > cap_out_ - (head_ - cached_out_tail_)) break;
    }
    head_ += pad;
    sends_.pop_front();
  }
  if (head_ == start) return false;
  TsanRelease(tsan_out_ != nullptr ? &tsan_out_->head : nullptr);
  out_->head.store(head_, std::memory_order_release);
  RingDoorbell(peer_bell_);
  return true;
}

void ShmConnection::LoadOutTail() {
  cached_out_tail_ = out_->tail.load(std::memory_order_acquire);
  TsanAcquire(tsan_out_ != nullptr ? &tsan_out_->tail : nullptr);
}

void ShmConnection::LoadInHead() {
  cached_in_head_ = in_->head.load(std::memory_order_acquire);
  TsanAcquire(tsan_in_ != nullptr ? &tsan_in_->head : nullptr);
}

// Consumes from the peer's FIFO into (or reduces into) the front receives.
Result<bool> ShmConnection::ProgressRecv() {
  const uint64_t start = tail_;
  Status error;
  while (!recvs_.empty()) {
    Transfer* t = recvs_.front();
    uint64_t avail = cached_in_head_ - tail_;
    if (!t->header_done) {
      if (avail < kHeaderCell) {
        LoadInHead();
        avail = cached_in_head_ - tail_;
        if (avail < kHeaderCell) break;
      }
      MessageHeader h;
      std::memcpy(&h, in_data_ + tail_ % cap_in_, sizeof(h));
      error = CheckHeader(h, *t, *this);
      if (!error.ok()) break;
      tail_ += kHeaderCell;
      avail -= kHeaderCell;
      t->header_done = true;
    }
    const size_t allowed = t->Allowed();
    const size_t esize = t->reduce_with != nullptr ? SizeOf(t->type) : 1;
    // A final destination larger than the cache would only evict the FIFO.
    const bool streaming = StreamsInto(*t);
    while (t->done < allowed) {
      if (avail < esize) {
        LoadInHead();
        avail = cached_in_head_ - tail_;
        if (avail < esize) break;
      }
      uint64_t pos = tail_ % cap_in_;
      uint64_t n = std::min<uint64_t>({cap_in_ - pos, avail, allowed - t->done});
      const char* from = in_data_ + pos;
      char* to = static_cast<char*>(t->dst) + t->done;
      if (t->reduce_with != nullptr) {
        n -= n % esize;
        if (n == 0) break;
        const char* with = static_cast<const char*>(t->reduce_with) + t->done;
        if (streaming) {
          StreamingReduce(t->reduce, to, with, from, n / esize, t->type, t->op);
        } else {
          t->reduce(to, with, from, n / esize, t->type, t->op);
        }
      } else if (streaming) {
        StreamingCopy(to, from, n);
      } else {
        CopyBytes(to, from, n);
      }
      tail_ += n;
      avail -= n;
      t->done += n;
    }
    if (t->done < t->bytes) break;
    uint64_t pad = RoundUp(tail_) - tail_;
    if (pad > avail) {
      LoadInHead();
      if (pad > cached_in_head_ - tail_) break;
    }
    tail_ += pad;
    recvs_.pop_front();
  }
  if (tail_ != start) {
    TsanRelease(tsan_in_ != nullptr ? &tsan_in_->tail : nullptr);
    in_->tail.store(tail_, std::memory_order_release);
    RingDoorbell(peer_bell_);
  }
  if (!error.ok()) return error;
  return tail_ != start;
}

Result<bool> ShmConnection::Progress() {
  bool moved = false;
  if (!sends_.empty()) moved |= ProgressSend();
  if (!recvs_.empty()) {
    LOOM_ASSIGN_OR_RETURN(bool r, ProgressRecv());
    moved |= r;
  }
  return moved;
}

}  // namespace loom
