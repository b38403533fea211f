// What shared memory a rank leaves in /dev/shm when it dies during setup,
// and how a launcher removes it (RemoveSegmentsLeftBy).
#include "transports/shm/context.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace loom {
namespace {

TEST(ShmTransport, WhatAKilledRankLeftIsRemovedOnceItIsGone) {
  const std::string tag = "dead" + std::to_string(getpid());
  auto exists = [](const std::string& name) {
    return access(("/dev/shm" + name).c_str(), F_OK) == 0;
  };
  // A rank that dies during setup, after naming its mailbox and a FIFO:
  // no destructor runs, the names stay.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto ctx = ShmContext::Create(tag + "-1", 0, 4096);
    const int fd = shm_open(("/loom-" + tag + "-1-f0-1").c_str(), O_CREAT | O_RDWR, 0600);
    _exit(ctx.ok() && fd >= 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(exists("/loom-" + tag + "-1-m0"));
  ASSERT_TRUE(exists("/loom-" + tag + "-1-f0-1"));
  // A live rank's mailbox, of another communicator, stays whatever the list says.
  auto live = ShmContext::Create(tag + "-2", 0, 4096);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_EQ(RemoveSegmentsLeftBy({getpid()}), 0u);
  EXPECT_EQ(RemoveSegmentsLeftBy({}), 0u);
  EXPECT_TRUE(exists("/loom-" + tag + "-1-m0"));  // its creator is not in the list

  EXPECT_EQ(RemoveSegmentsLeftBy({child, getpid()}), 2u);
  EXPECT_FALSE(exists("/loom-" + tag + "-1-m0"));
  EXPECT_FALSE(exists("/loom-" + tag + "-1-f0-1"));
  EXPECT_TRUE(exists("/loom-" + tag + "-2-m0"));
}

}  // namespace
}  // namespace loom
