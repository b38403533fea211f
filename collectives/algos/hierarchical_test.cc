// Hierarchical all-reduce schedule: the groups for compact and interleaved
// placements, and a lockstep simulation of every rank's schedule that
// checks each send meets a matching receive and the result is the sum.
#include "collectives/algos/hierarchical.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace loom {
namespace {

topology::JobTopology Job(const std::vector<std::string>& host_of_rank) {
  std::vector<topology::RankRecord> recs;
  for (const auto& h : host_of_rank) recs.push_back(topology::RankRecord{h, h, 0, {}, {}});
  return topology::FuseJobTopology(recs).value();
}

TEST(MakeHierGroups, CompactAndInterleavedPlacements) {
  auto job = Job({"a", "a", "b", "b", "c", "c"});
  HierGroups g = MakeHierGroups(job, 3);
  EXPECT_EQ(g.local, (std::vector<int>{2, 3}));
  EXPECT_EQ(g.cross, (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(g.local_pos, 1);
  EXPECT_EQ(g.cross_pos, 1);

  job = Job({"a", "b", "a", "b"});  // round-robin over hosts
  g = MakeHierGroups(job, 2);
  EXPECT_EQ(g.local, (std::vector<int>{0, 2}));
  EXPECT_EQ(g.cross, (std::vector<int>{2, 3}));
  EXPECT_EQ(g.local_pos, 1);
  EXPECT_EQ(g.cross_pos, 0);
}

TEST(HierarchicalSchedule, PhasesAndStepCounts) {
  auto job = Job({"a", "a", "a", "b", "b", "b"});
  auto phases = HierarchicalSchedule(MakeHierGroups(job, 4), 1000, 8);
  ASSERT_EQ(phases.size(), 3u);
  EXPECT_EQ(phases[0].size(), 2u);  // p - 1 intra reduce-scatter steps
  EXPECT_EQ(phases[1].size(), 2u);  // 2(h - 1) inter ring steps
  EXPECT_EQ(phases[2].size(), 2u);  // p - 1 intra all-gather steps
  EXPECT_EQ(phases[0][0].source, HierStep::Source::kInput);
  // Degenerate shapes drop phases: one rank per host, one host.
  EXPECT_EQ(HierarchicalSchedule(MakeHierGroups(Job({"a", "b", "c"}), 0), 10, 1).size(), 1u);
  EXPECT_EQ(HierarchicalSchedule(MakeHierGroups(Job({"a", "a"}), 0), 10, 1).size(), 2u);
}

// Runs every rank's schedule in lockstep (all sends of a step, then all
// receives) on int64 buffers, in place or not.
void Simulate(const std::vector<std::string>& hosts, size_t count, size_t align, bool in_place) {
  auto job = Job(hosts);
  const int n = job.nranks;
  std::vector<std::vector<int64_t>> in(n, std::vector<int64_t>(count)), out(n);
  std::vector<int64_t> want(count, 0);
  for (int r = 0; r < n; ++r) {
    for (size_t e = 0; e < count; ++e) {
      in[r][e] = static_cast<int64_t>((r + 1) * 1000003 + e * 7919);
      want[e] += in[r][e];
    }
    out[r] = in_place ? in[r] : std::vector<int64_t>(count, -1);
  }
  std::vector<std::vector<std::vector<HierStep>>> sched(n);
  for (int r = 0; r < n; ++r) {
    const HierGroups g = MakeHierGroups(job, r);
    sched[r] = HierarchicalSchedule(g, count, align);
    if (g.local.size() == 1) out[r] = in[r];  // the executor's copy
  }
  auto& input = [&]() -> std::vector<std::vector<int64_t>>& { return in_place ? out : in; }();
  const std::string what = std::to_string(n) + " ranks, count " + std::to_string(count);
  for (size_t ph = 0; ph < sched[0].size(); ++ph) {
    const size_t steps = sched[0][ph].size();
    for (int r = 0; r < n; ++r) ASSERT_EQ(sched[r][ph].size(), steps) << what;
    for (size_t s = 0; s < steps; ++s) {
      std::vector<std::vector<int64_t>> wire(n);
      for (int r = 0; r < n; ++r) {
        const HierStep& st = sched[r][ph][s];
        const auto& src = st.source == HierStep::Source::kInput ? input[r] : out[r];
        wire[r].assign(src.begin() + st.send.offset, src.begin() + st.send.offset + st.send.count);
      }
      for (int r = 0; r < n; ++r) {
        const HierStep& st = sched[r][ph][s];
        const int from = st.recv_peer;
        const HierStep& theirs = sched[from][ph][s];
        ASSERT_EQ(theirs.send_peer, r) << what << " phase " << ph << " step " << s;
        ASSERT_EQ(theirs.send.count, st.recv.count) << what;
        for (size_t e = 0; e < st.recv.count; ++e) {
          const size_t at = st.recv.offset + e;
          int64_t v = wire[from][e];
          if (st.land == HierStep::Land::kReduceWithInput) v += input[r][at];
          if (st.land == HierStep::Land::kReduceWithOutput) v += out[r][at];
          out[r][at] = v;
        }
      }
    }
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r], want) << what << " rank " << r;
}

TEST(HierarchicalSchedule, EveryRankEndsWithTheSum) {
  const std::vector<std::vector<std::string>> shapes = {
      {"a", "a", "b", "b"},
      {"a", "b", "a", "b"},
      {"a", "a", "a", "b", "b", "b", "c", "c", "c"},
      {"a", "a", "a", "a", "b", "b", "b", "b"},
      {"a", "b", "c"},
      {"a", "a", "a"},
  };
  for (const auto& shape : shapes) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{17}, size_t{1031}}) {
      for (size_t align : {size_t{1}, size_t{8}}) {
        Simulate(shape, count, align, false);
        Simulate(shape, count, align, true);
      }
    }
  }
}

}  // namespace
}  // namespace loom
