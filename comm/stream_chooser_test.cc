#include "comm/stream_chooser.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

namespace loom {
namespace {

constexpr size_t kBytes = size_t{2} << 20;

// Runs `calls` calls of one collective and size through the chooser, each
// timed by `us_of(stream, call index)`; returns how many went streaming.
int Drive(StreamChooser& chooser, int calls, const std::function<double(bool, int)>& us_of,
          OpKind kind = OpKind::kAllReduce, size_t bytes = kBytes) {
  int streamed = 0;
  for (int i = 0; i < calls; ++i) {
    const StreamChooser::Plan plan = chooser.Next(kind, bytes);
    streamed += plan.stream ? 1 : 0;
    chooser.Record(plan, bytes, us_of(plan.stream, i));
  }
  return streamed;
}

TEST(StreamChooser, KeepsTheFasterWayAndExploresLessOnceItIsClear) {
  StreamChooser chooser(/*initial_stream=*/false);
  // Streaming twice as slow: the chooser must stay with the cache, and its
  // explorations must get rare (the period doubles up to kMaxPeriod).
  const int streamed = Drive(chooser, 4000, [](bool s, int) { return s ? 400.0 : 200.0; });
  EXPECT_EQ(chooser.switches(), 0u);
  EXPECT_FALSE(chooser.latest());
  EXPECT_GT(chooser.explorations(), 0u);
  // At most kExploreCalls of every kMaxPeriod once settled, plus the ramp.
  EXPECT_LT(streamed, 4000 * 3 / 100) << "explorations cost too many calls";
  EXPECT_GT(streamed, 0);
}

TEST(StreamChooser, CorrectsAWrongSetupChoiceAtTheFirstExploration) {
  StreamChooser chooser(/*initial_stream=*/false);
  std::vector<bool> ways;
  for (int i = 0; i < 40; ++i) {
    const StreamChooser::Plan plan = chooser.Next(OpKind::kAllReduce, kBytes);
    ways.push_back(plan.stream);
    chooser.Record(plan, kBytes, plan.stream ? 100.0 : 200.0);
  }
  // kFirstExplore calls the setup way, then the other way, which wins and stays.
  for (uint32_t i = 0; i < StreamChooser::kFirstExplore; ++i) EXPECT_FALSE(ways[i]) << i;
  for (size_t i = StreamChooser::kFirstExplore; i < ways.size(); ++i) {
    if (i < StreamChooser::kFirstExplore + StreamChooser::kExploreCalls) {
      EXPECT_TRUE(ways[i]) << i;  // exploring
    }
  }
  EXPECT_TRUE(ways.back());
  EXPECT_EQ(chooser.switches(), 1u);
  EXPECT_TRUE(chooser.latest());
}

TEST(StreamChooser, FollowsTheMachineWhenItChangesMode) {
  StreamChooser chooser(/*initial_stream=*/true);
  // Streaming wins for 3000 calls, then the cache does by as much.
  auto cost = [](bool s, int i) {
    const bool stream_wins = i < 3000;
    return s == stream_wins ? 100.0 : 190.0;
  };
  std::vector<bool> ways;
  for (int i = 0; i < 6000; ++i) {
    const StreamChooser::Plan plan = chooser.Next(OpKind::kAllGather, kBytes);
    ways.push_back(plan.stream);
    chooser.Record(plan, kBytes, cost(plan.stream, i));
  }
  EXPECT_TRUE(ways[2999]);
  // Within one longest period (and the exploration) of the change, it goes over.
  const int settle =
      3000 + static_cast<int>(StreamChooser::kMaxPeriod + StreamChooser::kExploreCalls) + 1;
  for (int i = settle; i < 6000; ++i) {
    if (ways[i]) {
      // Only explorations stream now: short runs, rare.
      int run = 0;
      while (i < 6000 && ways[i]) ++run, ++i;
      EXPECT_LE(run, static_cast<int>(StreamChooser::kExploreCalls)) << "at call " << i;
    }
  }
  EXPECT_FALSE(chooser.latest());
}

TEST(StreamChooser, NoiseDoesNotHideATwofoldDifference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> jitter(1.0, 1.5);  // interference only slows
  for (const bool initial : {false, true}) {
    StreamChooser chooser(initial);
    const int streamed =
        Drive(chooser, 3000, [&](bool s, int) { return (s ? 100.0 : 200.0) * jitter(rng); });
    EXPECT_TRUE(chooser.latest()) << "initial " << initial;
    EXPECT_GT(streamed, 3000 * 95 / 100) << "initial " << initial;
  }
}

TEST(StreamChooser, SizeClassesAndCollectivesChooseApart) {
  StreamChooser chooser(false);
  // All-reduce of 64 KiB prefers the cache, of 8 MiB streaming; all-gather
  // of 8 MiB the cache. Interleaved, as a training step issues them.
  int wrong = 0;
  for (int i = 0; i < 2000; ++i) {
    struct Case {
      OpKind kind;
      size_t bytes;
      bool stream_wins;
    };
    for (const Case& c :
         {Case{OpKind::kAllReduce, 64 << 10, false}, Case{OpKind::kAllReduce, 8 << 20, true},
          Case{OpKind::kAllGather, 8 << 20, false}}) {
      const StreamChooser::Plan plan = chooser.Next(c.kind, c.bytes);
      if (i >= 1000) wrong += plan.stream != c.stream_wins ? 1 : 0;
      chooser.Record(plan, c.bytes, plan.stream == c.stream_wins ? 50.0 : 100.0);
    }
  }
  EXPECT_LT(wrong, 3000 * 3 / 100);
}

TEST(StreamChooser, SmallCallsGoTheLatestDecidedWayAndAreNotTimed) {
  StreamChooser chooser(false);
  const StreamChooser::Plan small = chooser.Next(OpKind::kAllReduce, 1024);
  EXPECT_FALSE(small.stream);
  EXPECT_LT(small.slot, 0);
  EXPECT_FALSE(chooser.Record(small, 1024, 5.0).has_value());
  Drive(chooser, 20, [](bool s, int) { return s ? 100.0 : 300.0; });
  EXPECT_TRUE(chooser.latest());
  EXPECT_TRUE(chooser.Next(OpKind::kReduceScatter, 1024).stream);
  // A size class never seen starts from the latest decision too.
  EXPECT_TRUE(chooser.Next(OpKind::kBroadcast, size_t{1} << 30).stream);
}

TEST(StreamChooser, ASettledSetupChoiceWaitsLongerBeforeExploring) {
  StreamChooser chooser(/*initial_stream=*/true, /*settled=*/true);
  for (uint32_t i = 0; i < StreamChooser::kSettledFirstExplore; ++i) {
    const StreamChooser::Plan plan = chooser.Next(OpKind::kAllReduce, kBytes);
    ASSERT_TRUE(plan.stream) << "call " << i;
    chooser.Record(plan, kBytes, 100.0);
  }
  EXPECT_FALSE(chooser.Next(OpKind::kAllReduce, kBytes).stream);  // explores now
}

TEST(StreamChooser, ASwitchOnASlowStartIsUndoneAtOnce) {
  // The first calls of a process are slow whichever way (ranks arriving
  // apart): the first exploration then finds the other way "faster" and
  // switches; the recheck must bring the right way back within a few calls.
  StreamChooser chooser(/*initial_stream=*/true);
  std::vector<bool> ways;
  for (int i = 0; i < 200; ++i) {
    const StreamChooser::Plan plan = chooser.Next(OpKind::kAllReduce, kBytes);
    ways.push_back(plan.stream);
    const double us = i < static_cast<int>(StreamChooser::kFirstExplore) ? 1000.0
                      : plan.stream                                      ? 100.0
                                                                         : 200.0;
    chooser.Record(plan, kBytes, us);
  }
  EXPECT_EQ(chooser.switches(), 2u);  // away on the slow start, and back
  int cached = 0;
  for (bool w : ways) cached += w ? 0 : 1;
  // The exploration, the recheck period, and the later explorations.
  EXPECT_LE(cached, static_cast<int>(StreamChooser::kExploreCalls + StreamChooser::kRecheckPeriod +
                                     4 * StreamChooser::kExploreCalls));
  EXPECT_TRUE(chooser.latest());
}

TEST(StreamChooser, TheFirstCallOfAWayIsNotCounted) {
  StreamChooser chooser(false);
  // The first call after each change of way meets the other way's state
  // and says nothing of its own way's cost; here it is made absurdly fast,
  // so that counting it would make the chooser switch.
  bool last = false;
  int switches_seen = 0;
  for (int i = 0; i < 2000; ++i) {
    const StreamChooser::Plan plan = chooser.Next(OpKind::kAllReduce, kBytes);
    double us = plan.stream ? 150.0 : 100.0;
    if (plan.stream != last) us = 10.0;
    EXPECT_EQ(plan.counted, plan.stream == last) << "call " << i;
    last = plan.stream;
    const auto found = chooser.Record(plan, kBytes, us);
    if (found && found->switched) ++switches_seen;
  }
  EXPECT_EQ(switches_seen, 0);
}

}  // namespace
}  // namespace loom
