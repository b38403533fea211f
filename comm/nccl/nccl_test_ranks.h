// What the shim's tests share: the fixture, the last error as a string, a
// fresh id, and ranks run as threads of this process.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <thread>
#include <vector>

#include "loom/nccl.h"

namespace loom::nccl_test {

class NcclShim : public ::testing::Test {
 protected:
  // A launcher in the environment would change what ncclGetUniqueId returns.
  void SetUp() override { unsetenv("LOOM_ROOT"); }
};

inline std::string LastError() {
  return ncclGetLastError(nullptr);
}

inline ncclUniqueId FreshId() {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess) << LastError();
  return id;
}

// Runs fn(rank) on one thread per rank and waits for all.
template <typename Fn>
void OnEachRank(int nranks, Fn fn) {
  std::vector<std::jthread> threads;
  for (int r = 0; r < nranks; ++r) threads.emplace_back(fn, r);
}

}  // namespace loom::nccl_test
