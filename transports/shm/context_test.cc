// What shared memory a rank leaves in /dev/shm when it dies during setup,
// and how it is removed: by a launcher that reaped it (RemoveSegmentsLeftBy)
// or by the next communicator on the host (RemoveSegmentsOfDeadCreators).
#include "transports/shm/context.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace loom {
namespace {

bool Exists(const std::string& name) { return access(("/dev/shm" + name).c_str(), F_OK) == 0; }

// A rank that dies during setup, after naming its mailbox and a FIFO: no
// destructor runs, the names stay. Returns the dead child's pid.
pid_t LeaveNamesAndDie(const std::string& tag) {
  const pid_t child = fork();
  if (child == 0) {
    auto ctx = ShmContext::Create(tag, 0, 4096);
    const int fd = shm_open(("/loom-" + tag + "-f0-1").c_str(), O_CREAT | O_RDWR, 0600);
    _exit(ctx.ok() && fd >= 0 ? 0 : 1);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    return -1;
  }
  return child;
}

// Makes a name look written `seconds` ago.
void Age(const std::string& name, int seconds) {
  const timespec then[2] = {{time(nullptr) - seconds, 0}, {time(nullptr) - seconds, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, ("/dev/shm" + name).c_str(), then, 0), 0) << name;
}

TEST(ShmTransport, WhatAKilledRankLeftIsRemovedOnceItIsGone) {
  const std::string tag = "dead" + std::to_string(getpid());
  // A live rank's mailbox, of another communicator, stays whatever the list says.
  auto live = ShmContext::Create(tag + "-2", 0, 4096);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  const pid_t child = LeaveNamesAndDie(tag + "-1");
  ASSERT_GT(child, 0);
  ASSERT_TRUE(Exists("/loom-" + tag + "-1-m0"));
  ASSERT_TRUE(Exists("/loom-" + tag + "-1-f0-1"));
  EXPECT_EQ(RemoveSegmentsLeftBy({getpid()}), 0u);
  EXPECT_EQ(RemoveSegmentsLeftBy({}), 0u);
  EXPECT_TRUE(Exists("/loom-" + tag + "-1-m0"));  // its creator is not in the list

  EXPECT_EQ(RemoveSegmentsLeftBy({child, getpid()}), 2u);
  EXPECT_FALSE(Exists("/loom-" + tag + "-1-m0"));
  EXPECT_FALSE(Exists("/loom-" + tag + "-1-f0-1"));
  EXPECT_TRUE(Exists("/loom-" + tag + "-2-m0"));
}

// No launcher survived to reap the rank: the next communicator on the host
// removes its names once they are a few seconds old, and never a live one's.
TEST(ShmTransport, TheNextCommunicatorRemovesWhatADeadRankLeft) {
  const std::string tag = "orphan" + std::to_string(getpid());
  auto live = ShmContext::Create(tag + "-2", 0, 4096);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  ASSERT_GT(LeaveNamesAndDie(tag + "-1"), 0);
  // Fresh names stay (their creator may be about to be reaped and looked at).
  auto next = ShmContext::Create(tag + "-3", 0, 4096);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(Exists("/loom-" + tag + "-1-m0"));
  Age("/loom-" + tag + "-1-m0", 60);
  Age("/loom-" + tag + "-2-m0", 60);  // old, but its creator runs: this process
  // A rank that exited but nobody reaped (a zombie) counts as gone.
  const pid_t zombie = fork();
  ASSERT_GE(zombie, 0);
  if (zombie == 0) _exit(ShmContext::Create(tag + "-6", 0, 4096).ok() ? 0 : 1);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(zombie), &info, WEXITED | WNOWAIT), 0);  // not reaped
  ASSERT_TRUE(Exists("/loom-" + tag + "-6-m0"));
  Age("/loom-" + tag + "-6-m0", 60);
  // A mailbox its creator never sized (killed between shm_open and ftruncate).
  const int unsized = shm_open(("/loom-" + tag + "-5-m1").c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(unsized, 0);
  close(unsized);
  Age("/loom-" + tag + "-5-m1", 60);
  auto later = ShmContext::Create(tag + "-4", 0, 4096);
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_FALSE(Exists("/loom-" + tag + "-5-m1"));
  EXPECT_FALSE(Exists("/loom-" + tag + "-6-m0"));
  ASSERT_EQ(waitpid(zombie, nullptr, 0), zombie);
  EXPECT_FALSE(Exists("/loom-" + tag + "-1-m0"));
  EXPECT_FALSE(Exists("/loom-" + tag + "-1-f0-1"));
  EXPECT_TRUE(Exists("/loom-" + tag + "-2-m0"));
}

}  // namespace
}  // namespace loom
