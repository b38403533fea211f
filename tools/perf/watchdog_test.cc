// Tests of the -T watchdog: it fires once when an operation outlasts the
// limit, never while idle or for operations that end in time.
#include "tools/perf/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace loom::perf {
namespace {

using std::chrono::milliseconds;

TEST(PerfWatchdog, FiresOnceWhenAnOperationOutlastsTheLimit) {
  std::atomic<int> fired{0};
  Watchdog w(milliseconds(50), [&] { fired.fetch_add(1); });
  {
    Watchdog::Scope op(w);
    for (int i = 0; i < 200 && fired.load() == 0; ++i)
      std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(fired.load(), 1);
  EXPECT_TRUE(w.Expired());
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(fired.load(), 1);  // once only
}

TEST(PerfWatchdog, QuietWhileIdleAndForShortOperations) {
  std::atomic<int> fired{0};
  Watchdog w(milliseconds(100), [&] { fired.fetch_add(1); });
  for (int i = 0; i < 20; ++i) {
    Watchdog::Scope op(w);
    std::this_thread::sleep_for(milliseconds(5));
  }
  std::this_thread::sleep_for(milliseconds(250));  // idle, longer than the limit
  EXPECT_EQ(fired.load(), 0);
  EXPECT_FALSE(w.Expired());
}

TEST(PerfWatchdog, ZeroLimitIsOff) {
  bool fired = false;
  Watchdog w(milliseconds(0), [&] { fired = true; });
  Watchdog::Scope op(w);
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(fired);
  EXPECT_FALSE(w.Expired());
}

}  // namespace
}  // namespace loom::perf
