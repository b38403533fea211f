// ShmContext: create, exchange-barrier, open, barrier, unlink.
#include "transports/shm/context.h"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "base/log.h"

namespace loom {

namespace {
// Changed with the layouts: a peer built with another layout is refused.
constexpr uint64_t kFifoMagic = 0x6c6f6f6d66696631ull;     // "loomfif1"
constexpr uint64_t kMailboxMagic = 0x6c6f6f6d6d627832ull;  // "loommbx2"

// This process's PID namespace, as the inode of /proc/self/ns/pid; 0 when
// /proc does not say.
uint64_t PidNamespace() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// A mailbox untouched for less than this is left alone by the sweep of
// ShmContext::Create: whoever made it may be a moment from being reaped and
// its names inspected (a launcher, a test), and nothing is lost by waiting.
constexpr std::chrono::seconds kLeftForAtLeast{10};

// Removes every name of each communicator whose mailbox `gone` judges left
// behind (the creator's pid and PID namespace); how many names it removed.
// With a `min_age`, so too a mailbox at least that old that was never
// finished (its creator was killed before sizing it or writing its magic:
// no loom of any version leaves one so for a moment longer).
template <class Gone>
size_t RemoveSegmentsWhere(Gone gone, std::chrono::seconds min_age) {
  std::vector<std::string> names;  // in /dev/shm, as readdir gives them
  if (DIR* dir = opendir("/dev/shm")) {
    while (const dirent* e = readdir(dir)) {
      if (std::strncmp(e->d_name, "loom-", 5) == 0) names.emplace_back(e->d_name);
    }
    closedir(dir);
  }
  // A mailbox, "loom-<tag>-m<rank>", names its creator.
  std::vector<std::string> tags;
  for (const std::string& name : names) {
    const size_t m = name.rfind("-m");
    if (m == std::string::npos || m + 2 == name.size() ||
        name.find_first_not_of("0123456789", m + 2) != std::string::npos) {
      continue;
    }
    struct stat st {};
    if (min_age.count() > 0 &&
        (stat(("/dev/shm/" + name).c_str(), &st) != 0 || time(nullptr) - st.st_mtime < min_age.count())) {
      continue;
    }
    Result<ShmSegment> seg = ShmSegment::Open("/" + name, 4096);
    const auto* mb = seg.ok() ? static_cast<const ShmMailbox*>(seg->data()) : nullptr;
    const bool unfinished = min_age.count() > 0 && (mb == nullptr ? st.st_size < 4096 : mb->magic == 0);
    if (!unfinished && (mb == nullptr || mb->magic != kMailboxMagic || !gone(mb->pid, mb->pid_ns))) {
      continue;
    }
    tags.push_back(name.substr(0, m + 1));  // "loom-<tag>-"
  }
  size_t removed = 0;
  for (const std::string& name : names) {
    for (const std::string& prefix : tags) {
      if (name.compare(0, prefix.size(), prefix) == 0 && shm_unlink(("/" + name).c_str()) == 0) {
        ++removed;
        break;
      }
    }
  }
  return removed;
}

// Gone, or a zombie nobody reaps (a launcher killed with its ranks leaves
// them to an init that may never wait for them).
bool NotRunning(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[32];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  char buf[512] = {};
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  // "pid (comm) S ...": the state follows the last ')' (comm may hold one).
  const char* close = static_cast<const char*>(memrchr(buf, ')', n));
  return close != nullptr && close + 2 < buf + n && (close[2] == 'Z' || close[2] == 'X');
}
}  // namespace

std::string ShmContext::FifoName(int from, int to) const {
  return "/loom-" + tag_ + "-f" + std::to_string(from) + "-" + std::to_string(to);
}

std::string ShmContext::MailboxName(int rank) const {
  return "/loom-" + tag_ + "-m" + std::to_string(rank);
}

Result<std::unique_ptr<ShmContext>> ShmContext::Create(const std::string& tag, int rank,
                                                       size_t fifo_bytes) {
  if (const size_t removed = RemoveSegmentsOfDeadCreators()) {
    LOOM_INFO(log::kInit | log::kShm,
              "removed %zu shared-memory name(s) in /dev/shm left by ranks that no longer run",
              removed);
  }
  std::unique_ptr<ShmContext> ctx(new ShmContext());
  ctx->tag_ = tag;
  ctx->rank_ = rank;
  ctx->fifo_bytes_ = (fifo_bytes + 63) & ~size_t{63};
  static_assert(sizeof(ShmMailbox) <= 4096);
  LOOM_ASSIGN_OR_RETURN(ctx->mailbox_, ShmSegment::Create(ctx->MailboxName(rank), 4096));
  auto* mb = new (ctx->mailbox_.data()) ShmMailbox();
  mb->pid = getpid();
  mb->pid_ns = PidNamespace();
  mb->magic = kMailboxMagic;
  mb->tsan_keys = NewTsanKeys();
  return ctx;
}

Result<std::vector<std::unique_ptr<Connection>>> ShmContext::Connect(
    Exchange& exchange, const std::vector<int>& peers, const std::vector<std::string>& hosts,
    const std::vector<int>& pids, Deadline deadline) {
  const size_t seg_bytes = kShmDataOffset + fifo_bytes_;
  std::vector<ShmSegment> outs;
  for (int p : peers) {
    LOOM_ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::Create(FifoName(rank_, p), seg_bytes));
    auto* c = new (seg.data()) ShmFifoControl();
    c->head.store(0);
    c->tail.store(0);
    c->capacity = fifo_bytes_;
    c->magic = kFifoMagic;
    c->tsan_keys = NewTsanKeys();
    outs.push_back(std::move(seg));
  }
  LOOM_TRY(exchange.Barrier("shm-created-" + tag_, deadline));

  std::vector<std::unique_ptr<Connection>> conns;
  Status failure;
  for (size_t i = 0; i < peers.size() && failure.ok(); ++i) {
    int p = peers[i];
    auto in = ShmSegment::Open(FifoName(p, rank_), seg_bytes);
    auto mb = ShmSegment::Open(MailboxName(p), 4096);
    if (!in.ok() || !mb.ok()) {
      failure = (in.ok() ? mb.status() : in.status())
                    .WithContext("mapping shared memory of rank " + std::to_string(p) + " (" +
                                 hosts[p] + ")");
      break;
    }
    auto* ctl = static_cast<ShmFifoControl*>(in.value().data());
    if (ctl->magic != kFifoMagic || ctl->capacity != fifo_bytes_) {
      failure = InternalError("shared-memory FIFO from rank " + std::to_string(p) +
                              " has a different layout (NCCL_BUFFSIZE differs between ranks?)");
      break;
    }
    conns.push_back(std::make_unique<ShmConnection>(p, hosts[p], pids[p], std::move(outs[i]),
                                                    std::move(in).value(), std::move(mb).value()));
    LOOM_INFO(log::kInit | log::kShm, "rank %d -> rank %d via SHM (fifo %zu bytes)", rank_, p,
              fifo_bytes_);
  }
  // Everyone has mapped what it needs (or failed): names can go.
  Status barrier = exchange.Barrier("shm-mapped-" + tag_, deadline);
  mailbox_.Unlink();
  for (auto& seg : outs) seg.Unlink();
  // Connections own the out segments now; unlink those names too.
  for (int p : peers) shm_unlink(FifoName(rank_, p).c_str());
  LOOM_TRY(failure);
  LOOM_TRY(barrier);
  return conns;
}

size_t RemoveSegmentsLeftBy(const std::vector<pid_t>& exited) {
  if (exited.empty()) return 0;
  return RemoveSegmentsWhere([&](pid_t pid, uint64_t) {
    return std::find(exited.begin(), exited.end(), pid) != exited.end() && NotRunning(pid);
  }, std::chrono::seconds(0));
}

size_t RemoveSegmentsOfDeadCreators() {
  const uint64_t ns = PidNamespace();
  if (ns == 0) return 0;  // no way to tell whose pids these are
  return RemoveSegmentsWhere([&](pid_t pid, uint64_t pid_ns) {
    return pid_ns == ns && NotRunning(pid);
  }, kLeftForAtLeast);
}

}  // namespace loom
