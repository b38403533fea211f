// Shareable allocations: lookups by address, bad frees named, and a second
// process mapping the memory through /proc/<pid>/fd (what ShmConnection does).
#include "transports/shm/shared_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

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

}  // namespace
}  // namespace loom
