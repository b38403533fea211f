// JobTopology fusion: host grouping in rank order, local indices, the
// worst-link rules, NIC bottleneck, uneven hosts and bad records.
#include "topology/job.h"

#include <gtest/gtest.h>

namespace loom::topology {
namespace {

const LinkCost kShm{1.0, 6.0, 12.0};
const LinkCost kTcp{20.0, 1.5, 0.0};

RankRecord On(const std::string& host, double nic_gbs = 0, LinkCost intra = kShm,
              LinkCost inter = kTcp) {
  return RankRecord{host + "/boot", host, nic_gbs, intra, inter};
}

TEST(FuseJobTopology, GroupsInterleavedRanksByHostInRankOrder) {
  // Round-robin placement: ranks 0 and 2 on a, 1 and 3 on b.
  std::vector<RankRecord> recs = {On("a"), On("b"), On("a"), On("b")};
  auto job = FuseJobTopology(recs);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->nranks, 4);
  ASSERT_EQ(job->hosts(), 2);
  EXPECT_EQ(job->host_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(job->host_ranks[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(job->host_ranks[1], (std::vector<int>{1, 3}));
  EXPECT_EQ(job->host_of_rank, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(job->local_index, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(job->ranks_per_host(), 2);
  EXPECT_EQ(job->intra, kShm);
  EXPECT_EQ(job->inter.latency_us, 20.0);
  EXPECT_EQ(job->inter.peer_read_gbs, 0.0);
}

TEST(FuseJobTopology, WorstLinksAndSlowestKnownNicWin) {
  LinkCost slow_shm{2.5, 4.0, 0.0};  // a rank without single-copy reads
  std::vector<RankRecord> recs = {On("a", 12.5), On("a", 0, slow_shm), On("b", 3.0), On("b", 25.0),
                                  On("c", 0)};
  auto job = FuseJobTopology(recs);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->intra, slow_shm);  // every field from its worst rank
  EXPECT_EQ(job->host_nic_gbs, (std::vector<double>{12.5, 3.0, 0.0}));
  // The TCP ceiling (1.5) is below every NIC here; unknown speeds are ignored.
  EXPECT_DOUBLE_EQ(job->inter.bandwidth_gbs, 1.5);
  EXPECT_EQ(job->ranks_per_host(), 0);  // 2, 2, 1: uneven

  recs = {On("a", 1.0), On("b", 0.5)};
  job = FuseJobTopology(recs);
  ASSERT_TRUE(job.ok());
  EXPECT_DOUBLE_EQ(job->inter.bandwidth_gbs, 0.5);  // the slow NIC is the bottleneck
}

TEST(FuseJobTopology, SingleRankHostsDoNotShapeTheIntraLink) {
  LinkCost odd{9.0, 0.1, 0.0};
  std::vector<RankRecord> recs = {On("a"), On("a"), On("b", 0, odd)};
  auto job = FuseJobTopology(recs);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->intra, kShm);  // rank 2 has no same-host peer
}

TEST(FuseJobTopology, OneHostAndOneRank) {
  std::vector<RankRecord> recs = {On("solo")};
  auto job = FuseJobTopology(recs);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->hosts(), 1);
  EXPECT_EQ(job->ranks_per_host(), 1);
  EXPECT_NE(job->Describe().find("1 host x 1 rank"), std::string::npos) << job->Describe();
}

TEST(FuseJobTopology, RejectsEmptyInputAndMissingHostIdentity) {
  EXPECT_EQ(FuseJobTopology({}).status().code(), Code::kInvalidArgument);
  std::vector<RankRecord> recs = {On("a"), On("a")};
  recs[1].host_id.clear();
  auto job = FuseJobTopology(recs);
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("rank 1"), std::string::npos) << job.status().message();
}

TEST(JobTopology, UniformAndDescribe) {
  JobTopology job = JobTopology::Uniform(3, 4, kShm, LinkCost{5.0, 48.0, 0.0});
  EXPECT_EQ(job.nranks, 12);
  EXPECT_EQ(job.ranks_per_host(), 4);
  EXPECT_EQ(job.host_ranks[2], (std::vector<int>{8, 9, 10, 11}));
  EXPECT_EQ(job.local_index[9], 1);
  const std::string d = job.Describe();
  EXPECT_NE(d.find("3 hosts x 4 ranks"), std::string::npos) << d;
  EXPECT_NE(d.find("inter 5.0 us 48.00 GB/s"), std::string::npos) << d;
  // Long host lists are abbreviated to first..last.
  EXPECT_NE(JobTopology::Uniform(1, 8, kShm, kTcp).Describe().find("0..7 (8)"), std::string::npos);
}

}  // namespace
}  // namespace loom::topology
