// Shareable allocations: lookups by address, bad frees named, a second
// process mapping the memory through /proc/<pid>/fd, and ShmConnection's
// views of a peer process's allocations (mapping, cache, bounds, refusal of
// other files, release after the peer frees).
#include "transports/shm/shared_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "transports/shm/connection.h"

namespace loom {
namespace {

TEST(SharedMemory, FindsTheAllocationHoldingARange) {
  auto a = AllocShared(10000);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = AllocShared(4096);
  ASSERT_TRUE(b.ok());
  char* p = static_cast<char*>(*a);
  EXPECT_EQ(p[0], 0);  // zeroed
  SharedRef whole = FindShared(p, 10000);
  ASSERT_TRUE(whole.valid());
  EXPECT_EQ(whole.base, reinterpret_cast<uint64_t>(p));
  EXPECT_EQ(whole.bytes, 10000u);
  SharedRef inner = FindShared(p + 100, 50);
  EXPECT_EQ(inner.serial, whole.serial);
  EXPECT_EQ(inner.fd, whole.fd);
  EXPECT_NE(FindShared(*b, 1).serial, whole.serial);
  EXPECT_FALSE(FindShared(p + 9999, 2).valid());  // runs past the end
  EXPECT_NE(FindShared(p - 1, 1).serial, whole.serial);  // b may sit right below
  int local = 0;
  EXPECT_FALSE(FindShared(&local, sizeof(local)).valid());
  ASSERT_TRUE(FreeShared(*a).ok());
  ASSERT_TRUE(FreeShared(*b).ok());
  EXPECT_FALSE(FindShared(p, 1).valid());
}

TEST(SharedMemory, SerialsAreNeverReused) {
  auto a = AllocShared(4096);
  ASSERT_TRUE(a.ok());
  const SharedRef first = FindShared(*a, 1);
  ASSERT_TRUE(FreeShared(*a).ok());
  auto b = AllocShared(4096);  // may get the same address and descriptor
  ASSERT_TRUE(b.ok());
  EXPECT_NE(FindShared(*b, 1).serial, first.serial);
  ASSERT_TRUE(FreeShared(*b).ok());
}

TEST(SharedMemory, BadRequestsAreNamed) {
  auto zero = AllocShared(0);
  EXPECT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("0 bytes"), std::string::npos);
  int local = 0;
  Status s = FreeShared(&local);
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  auto a = AllocShared(64);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(FreeShared(*a).ok());
  EXPECT_FALSE(FreeShared(*a).ok());  // twice
}

// Another process of this host reads what this one wrote, through the
// descriptor number and size FindShared describes.
TEST(SharedMemory, AnotherProcessMapsIt) {
  auto a = AllocShared(1 << 20);
  ASSERT_TRUE(a.ok());
  char* p = static_cast<char*>(*a);
  for (size_t i = 0; i < (1 << 20); ++i) p[i] = static_cast<char>(i * 7);
  const SharedRef ref = FindShared(p, 1 << 20);
  const pid_t owner = getpid();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string path = "/proc/" + std::to_string(owner) + "/fd/" + std::to_string(ref.fd);
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) _exit(2);
    void* m = mmap(nullptr, ref.bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) _exit(3);
    const char* q = static_cast<const char*>(m);
    for (size_t i = 0; i < (1 << 20); ++i) {
      if (q[i] != static_cast<char>(i * 7)) _exit(4);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ASSERT_TRUE(FreeShared(p).ok());
}

// A child process that owns shareable memory and obeys one-byte commands
// from a pipe, answering each with a SharedRef on another.
class Owner {
 public:
  Owner() {
    EXPECT_EQ(pipe(to_), 0);
    EXPECT_EQ(pipe(from_), 0);
    pid_ = fork();
    if (pid_ == 0) Serve();
  }
  ~Owner() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    for (int fd : {to_[0], to_[1], from_[0], from_[1]}) close(fd);
  }
  pid_t pid() const { return pid_; }
  // 'a': allocate 1 MiB, fill it with i*3 and describe it; 'f': free the
  // last allocation and describe "nothing" (with the new free count);
  // 'n': describe /dev/null, opened in the child, as if it were shareable.
  SharedRef Ask(char command) {
    SharedRef ref;
    EXPECT_EQ(write(to_[1], &command, 1), 1);
    EXPECT_EQ(read(from_[0], &ref, sizeof(ref)), static_cast<ssize_t>(sizeof(ref)));
    return ref;
  }

 private:
  [[noreturn]] void Serve() {
    void* last = nullptr;
    char c;
    while (read(to_[0], &c, 1) == 1) {
      SharedRef ref;
      if (c == 'a') {
        auto p = AllocShared(1 << 20);
        if (!p.ok()) _exit(2);
        last = *p;
        for (size_t i = 0; i < (1 << 20); ++i) static_cast<char*>(last)[i] = static_cast<char>(i * 3);
        ref = FindShared(last, 1 << 20);
      } else if (c == 'f') {
        if (!FreeShared(last).ok()) _exit(3);
        ref = FindShared(last, 1);
      } else if (c == 'n') {
        ref = SharedRef{open("/dev/null", O_RDONLY), 0, 0x10000, 4096, 999, SharedFrees()};
      }
      if (write(from_[1], &ref, sizeof(ref)) != static_cast<ssize_t>(sizeof(ref))) _exit(4);
    }
    _exit(0);
  }
  int to_[2], from_[2];
  pid_t pid_ = -1;
};

// A connection to `peer` whose FIFOs are never used: PeerView needs none.
std::unique_ptr<ShmConnection> ViewOnlyConnection(pid_t peer) {
  std::vector<ShmSegment> segs;
  for (const char* part : {"out", "in", "mbox"}) {
    auto seg = ShmSegment::Create("/loom-viewtest-" + std::to_string(getpid()) + "-" + part, 4096);
    EXPECT_TRUE(seg.ok()) << seg.status().ToString();
    seg->Unlink();
    segs.push_back(std::move(*seg));
  }
  return std::make_unique<ShmConnection>(1, "here", peer, std::move(segs[0]), std::move(segs[1]),
                                         std::move(segs[2]));
}

TEST(SharedMemory, ConnectionViewsAPeerProcessesAllocation) {
  Owner owner;
  ASSERT_GT(owner.pid(), 0);
  auto conn = ViewOnlyConnection(owner.pid());
  const SharedRef a = owner.Ask('a');
  ASSERT_TRUE(a.valid());
  const auto* v = static_cast<const char*>(conn->PeerView(a.base + 100, 1000, a));
  ASSERT_NE(v, nullptr);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(v[i], static_cast<char>((100 + i) * 3)) << i;
  EXPECT_EQ(conn->PeerView(a.base + 100, 1000, a), v);  // cached, not mapped again
  EXPECT_EQ(conn->mapped_allocations(), 1u);
  EXPECT_EQ(conn->PeerView(a.base + (1 << 20) - 10, 20, a), nullptr);  // past the end
  EXPECT_EQ(conn->PeerView(a.base, 10, SharedRef{}), nullptr);         // not shareable
  // A second allocation maps too; after the owner frees it, the next view
  // (which carries the new free count) drops its mapping and keeps the first.
  const SharedRef b = owner.Ask('a');
  ASSERT_NE(conn->PeerView(b.base, 8, b), nullptr);
  EXPECT_EQ(conn->mapped_allocations(), 2u);
  const SharedRef freed = owner.Ask('f');
  EXPECT_FALSE(freed.valid());
  EXPECT_GT(freed.frees, b.frees);
  EXPECT_EQ(conn->PeerView(0, 8, freed), nullptr);
  EXPECT_EQ(conn->mapped_allocations(), 1u);
  EXPECT_EQ(conn->PeerView(a.base, 8, a), v - 100);  // the first one is still there
}

// process_vm_readv is slow at some distances between destination and source
// (mod 4096: 1-15), which ProbePeerRead reads through a bounce buffer: every
// distance, and lengths across the bounce buffer's chunks, land intact.
TEST(SharedMemory, ReadsOfAPeerProcessLandIntactAtEveryDistance) {
  Owner owner;
  ASSERT_GT(owner.pid(), 0);
  auto conn = ViewOnlyConnection(owner.pid());
  const SharedRef a = owner.Ask('a');
  ASSERT_TRUE(a.valid());
  const uint64_t remote = a.base + 37;
  std::vector<char> buf((1 << 20) + 3 * 4096), want(1 << 20);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<char>((37 + i) * 3);
  for (size_t skew : {0, 1, 8, 15, 16, 100, 4095}) {
    for (size_t bytes : {size_t{100}, size_t{4096}, size_t{200003}, (size_t{1} << 20) - 37}) {
      std::fill(buf.begin(), buf.end(), 'x');
      // dst - remote = skew (mod 4096), past a guard byte.
      const uintptr_t base = reinterpret_cast<uintptr_t>(buf.data()) + 1;
      const size_t at = 1 + (remote + skew - base) % 4096;
      ASSERT_TRUE(conn->ProbePeerRead(buf.data() + at, remote, bytes).ok());
      ASSERT_EQ(std::memcmp(buf.data() + at, want.data(), bytes), 0) << skew << " " << bytes;
      EXPECT_EQ(buf[at - 1], 'x');
      EXPECT_EQ(buf[at + bytes], 'x');
    }
  }
}

TEST(SharedMemory, ConnectionRefusesAFileThatIsNotLoomMemory) {
  Owner owner;
  ASSERT_GT(owner.pid(), 0);
  auto conn = ViewOnlyConnection(owner.pid());
  const SharedRef fake = owner.Ask('n');
  ASSERT_TRUE(fake.valid());
  EXPECT_EQ(conn->PeerView(fake.base, 8, fake), nullptr);
  EXPECT_EQ(conn->mapped_allocations(), 0u);
  // From then on it does not try again (ReadPeer serves this peer).
  const SharedRef real = owner.Ask('a');
  EXPECT_EQ(conn->PeerView(real.base, 8, real), nullptr);
}

}  // namespace
}  // namespace loom
