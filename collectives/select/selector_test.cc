// Selection: NCCL_ALGO grammar, the LOOM_TUNE grammar and its precedence,
// the cost model on one host and across hosts (Hierarchical), and the
// summaries the TUNING log prints.
#include "collectives/select/selector.h"

#include <gtest/gtest.h>

#include <cmath>

namespace loom {
namespace {

using topology::JobTopology;

const LinkModel kTcp{20.0, 1.5, 0.0};
const LinkModel kShm{1.0, 6.0, 0.0};
const LinkModel kShmRead{1.0, 6.0, 12.0};

CostModel OneHost(int n, LinkModel link) {
  return CostModel(JobTopology::Uniform(1, n, link, link));
}

TEST(AlgoFilter, EmptyAllowsEverything) {
  auto f = AlgoFilter::Parse("");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->empty());
  EXPECT_TRUE(f->Allows(OpKind::kAllReduce, Algo::kTree));
}

TEST(AlgoFilter, ListExcludeAndPerCollectiveRules) {
  auto f = AlgoFilter::Parse("Ring, tree");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->Allows(OpKind::kAllReduce, Algo::kRing));
  EXPECT_TRUE(f->Allows(OpKind::kAllReduce, Algo::kTree));
  EXPECT_FALSE(f->Allows(OpKind::kAllReduce, Algo::kRecursiveDoubling));

  f = AlgoFilter::Parse("^Tree");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->Allows(OpKind::kBroadcast, Algo::kTree));
  EXPECT_TRUE(f->Allows(OpKind::kBroadcast, Algo::kRing));

  // NCCL 2.24 grammar: a rule naming the collective wins over the global one.
  f = AlgoFilter::Parse("ring;allreduce:tree,rd");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->Allows(OpKind::kAllReduce, Algo::kTree));
  EXPECT_TRUE(f->Allows(OpKind::kAllReduce, Algo::kRecursiveDoubling));
  EXPECT_FALSE(f->Allows(OpKind::kAllReduce, Algo::kRing));
  EXPECT_TRUE(f->Allows(OpKind::kAllGather, Algo::kRing));
  EXPECT_FALSE(f->Allows(OpKind::kAllGather, Algo::kDirect));
}

TEST(AlgoFilter, HierarchicalTokensAnyCase) {
  for (const char* spec : {"Hier", "HIERARCHICAL", "allreduce:hier"}) {
    auto f = AlgoFilter::Parse(spec);
    ASSERT_TRUE(f.ok()) << spec;
    EXPECT_TRUE(f->Allows(OpKind::kAllReduce, Algo::kHierarchical)) << spec;
    EXPECT_FALSE(f->Allows(OpKind::kAllReduce, Algo::kRing)) << spec;
  }
}

TEST(AlgoFilter, UnknownAlgorithmIsNamed) {
  auto f = AlgoFilter::Parse("Ring,NVLS");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kInvalidArgument);
  EXPECT_NE(f.status().message().find("'nvls'"), std::string::npos) << f.status().message();
}

TEST(TuneTable, RangesWildcardsAndSizeSuffixes) {
  auto t = TuneTable::Parse(" AllReduce:0-64K=RD, 64k-1M=Tree, 1m-inf=ring ; allgather:*=direct");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->Lookup(OpKind::kAllReduce, 0), Algo::kRecursiveDoubling);
  EXPECT_EQ(t->Lookup(OpKind::kAllReduce, 65535), Algo::kRecursiveDoubling);
  EXPECT_EQ(t->Lookup(OpKind::kAllReduce, 65536), Algo::kTree);  // ranges are [lo, hi)
  EXPECT_EQ(t->Lookup(OpKind::kAllReduce, 1 << 20), Algo::kRing);
  EXPECT_EQ(t->Lookup(OpKind::kAllReduce, size_t{1} << 40), Algo::kRing);
  EXPECT_EQ(t->Lookup(OpKind::kAllGather, 12345), Algo::kDirect);
  EXPECT_EQ(t->Lookup(OpKind::kBroadcast, 8), Algo::kAuto);

  t = TuneTable::Parse("allreduce:1G-4G=hier");  // gaps are left to the model
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Lookup(OpKind::kAllReduce, 1023u << 20), Algo::kAuto);
  EXPECT_EQ(t->Lookup(OpKind::kAllReduce, size_t{1} << 30), Algo::kHierarchical);
  EXPECT_TRUE(TuneTable::Parse("")->empty());
}

TEST(TuneTable, ErrorsQuoteTheBadToken) {
  struct Case {
    const char* spec;
    const char* token;
  };
  for (const Case& c : {Case{"allreduce", "'allreduce'"},       // no ranges
                        Case{"allreduc:*=ring", "'allreduc'"},  // unknown collective
                        Case{"allreduce:0-64X=ring", "'64x'"},  // bad suffix
                        Case{"allreduce:-5=ring", "''"},        // no lower bound
                        Case{"allreduce:64K=ring", "'64k'"},    // not a range
                        Case{"allreduce:8-8=ring", "'8-8'"},    // empty range
                        Case{"allreduce:*ring", "'*ring'"},     // no '='
                        Case{"allreduce:*=nvls", "'nvls'"},     // unknown algorithm
                        Case{"allgather:*=tree", "'*=tree'"},   // not an allgather algorithm
                        Case{"allreduce:0-1M=rd,64K-inf=ring", "'64k-inf=ring'"},  // overlap
                        Case{"allreduce:0-99999999999999999999=rd", "'99999999999999999999'"}}) {
    auto t = TuneTable::Parse(c.spec);
    ASSERT_FALSE(t.ok()) << c.spec;
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.token), std::string::npos)
        << c.spec << " -> " << t.status().message();
  }
}

TEST(SelectAlgo, SmallMessagesTakeFewStepsLargeOnesTakeBandwidth) {
  const CostModel tcp = OneHost(8, kTcp);
  AlgoFilter none;
  TuneTable no_tune;
  // 8 ranks, 8 bytes: latency rules; recursive doubling has log2(8) = 3 steps.
  EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, 8, tcp, none, no_tune).algo, Algo::kRecursiveDoubling);
  // 8 ranks, 256 MiB: the ring moves 2(n-1)/n of the data, the others more.
  EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, 256u << 20, tcp, none, no_tune).algo, Algo::kRing);
  EXPECT_EQ(SelectAlgo(OpKind::kBroadcast, 256u << 20, tcp, none, no_tune).algo, Algo::kRing);
  EXPECT_EQ(SelectAlgo(OpKind::kBroadcast, 8, tcp, none, no_tune).algo, Algo::kTree);
}

// With reductions on the CPU (CostModel's reduce_gbs), recursive doubling
// pays for reducing the whole buffer every round: 2 ranks keep it while
// latency matters and take the ring (a block reduced per step) beyond.
TEST(SelectAlgo, CpuReductionsSendLargeAllReducesToTheRing) {
  AlgoFilter none;
  TuneTable no_tune;
  for (const LinkModel& link : {kShm, kTcp}) {
    const CostModel free_reduce = OneHost(2, link);
    const CostModel cpu(JobTopology::Uniform(1, 2, link, link), 20.0);
    EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, 8, cpu, none, no_tune).algo,
              Algo::kRecursiveDoubling);
    EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, 2u << 20, cpu, none, no_tune).algo, Algo::kRing)
        << DescribeEstimates(OpKind::kAllReduce, 2u << 20, cpu);
    // Without the reduction term the one step fewer wins at every size.
    EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, 2u << 20, free_reduce, none, no_tune).algo,
              Algo::kRecursiveDoubling);
    // Recursive doubling reduces all 2 MiB (105 us at 20 GB/s), the ring half.
    EXPECT_NEAR(cpu.PredictUs(OpKind::kAllReduce, Algo::kRecursiveDoubling, 2u << 20) -
                    free_reduce.PredictUs(OpKind::kAllReduce, Algo::kRecursiveDoubling, 2u << 20),
                104.9, 0.1);
    EXPECT_NEAR(cpu.PredictUs(OpKind::kAllReduce, Algo::kRing, 2u << 20) -
                    free_reduce.PredictUs(OpKind::kAllReduce, Algo::kRing, 2u << 20),
                52.4, 0.1);
  }
}

TEST(SelectAlgo, DirectOnlyWhenPeerReadsWorkAndMessagesAreLarge) {
  AlgoFilter none;
  TuneTable no_tune;
  EXPECT_NE(SelectAlgo(OpKind::kAllGather, 64u << 20, OneHost(2, kShm), none, no_tune).algo,
            Algo::kDirect);
  EXPECT_EQ(SelectAlgo(OpKind::kAllGather, 64u << 20, OneHost(2, kShmRead), none, no_tune).algo,
            Algo::kDirect);
  EXPECT_NE(SelectAlgo(OpKind::kAllGather, 8, OneHost(2, kShmRead), none, no_tune).algo,
            Algo::kDirect);
  // All-reduce reads (n-1)/n of the buffer twice: Direct only when reads
  // beat the FIFOs by enough for large messages, never for small ones.
  EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, 64u << 20, OneHost(2, kShmRead), none, no_tune).algo,
            Algo::kDirect);
  EXPECT_NE(SelectAlgo(OpKind::kAllReduce, 4096, OneHost(2, kShmRead), none, no_tune).algo,
            Algo::kDirect);
  const LinkModel slow_reads{1.0, 6.0, 4.0};  // reads below the FIFOs (the AMD VM)
  for (OpKind kind : {OpKind::kAllReduce, OpKind::kAllGather, OpKind::kReduceScatter}) {
    for (size_t bytes : {size_t{1} << 20, size_t{64} << 20}) {
      EXPECT_NE(SelectAlgo(kind, bytes, OneHost(2, slow_reads), none, no_tune).algo, Algo::kDirect)
          << OpKindName(kind) << " " << bytes;
    }
  }
  // Peer reads inside each host do not reach the other host.
  const CostModel two_hosts(JobTopology::Uniform(2, 2, kShmRead, kTcp));
  EXPECT_TRUE(std::isinf(two_hosts.PredictUs(OpKind::kAllReduce, Algo::kDirect, 64u << 20)));
}

TEST(SelectAlgo, FilterWithNothingUsableFallsBackAndSaysSo) {
  const CostModel shm = OneHost(4, kShm);  // no single-copy reads
  TuneTable no_tune;
  Choice c =
      SelectAlgo(OpKind::kAllReduce, 1 << 20, shm, AlgoFilter::Parse("Direct").value(), no_tune);
  EXPECT_EQ(c.source, Choice::Source::kFallback);
  EXPECT_NE(c.algo, Algo::kDirect);
  c = SelectAlgo(OpKind::kAllReduce, 1 << 20, shm, AlgoFilter::Parse("Tree").value(), no_tune);
  EXPECT_EQ(c.source, Choice::Source::kModel);
  EXPECT_EQ(c.algo, Algo::kTree);
  // Hierarchical forced on one host cannot run: fallback too.
  c = SelectAlgo(OpKind::kAllReduce, 1 << 20, shm, AlgoFilter::Parse("Hier").value(), no_tune);
  EXPECT_EQ(c.source, Choice::Source::kFallback);
}

TEST(CostModel, HierarchicalWinsLargeMessagesAcrossHostsOnly) {
  AlgoFilter none;
  TuneTable no_tune;
  // The shape of the pretend-hosts test: 2 hosts x 2 ranks, shm inside, TCP between.
  const CostModel job(JobTopology::Uniform(2, 2, kShm, kTcp));
  EXPECT_EQ(job.hierarchical_unavailable(), "");
  EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, 8, job, none, no_tune).algo, Algo::kRecursiveDoubling);
  for (size_t bytes : {size_t{1} << 20, size_t{64} << 20, size_t{1} << 30}) {
    EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, bytes, job, none, no_tune).algo, Algo::kHierarchical)
        << bytes;
  }
  // Never on one host, never with one rank per host, never with uneven hosts.
  EXPECT_EQ(OneHost(8, kShm).hierarchical_unavailable(), "one host");
  const CostModel flat(JobTopology::Uniform(4, 1, kShm, kTcp));
  EXPECT_EQ(flat.hierarchical_unavailable(), "one rank per host");
  std::vector<topology::RankRecord> recs;
  for (const char* h : {"a", "a", "a", "b", "b"}) recs.push_back({h, h, 0, kShm, kTcp});
  const CostModel uneven(topology::FuseJobTopology(recs).value());
  EXPECT_EQ(uneven.hierarchical_unavailable(), "hosts have different numbers of ranks");
  for (const CostModel* m : {&flat, &uneven}) {
    EXPECT_TRUE(std::isinf(m->PredictUs(OpKind::kAllReduce, Algo::kHierarchical, 1 << 30)));
    EXPECT_NE(SelectAlgo(OpKind::kAllReduce, 1 << 30, *m, none, no_tune).algo, Algo::kHierarchical);
  }
}

TEST(CostModel, PlacementChangesTheFlatRing) {
  // Round-robin placement: every ring hop leaves its host, so each host's
  // network is shared by all its ranks; compact placement crosses once per host.
  std::vector<topology::RankRecord> rr, compact;
  for (const char* h : {"a", "b", "a", "b"}) rr.push_back({h, h, 0, kShm, kTcp});
  for (const char* h : {"a", "a", "b", "b"}) compact.push_back({h, h, 0, kShm, kTcp});
  const double ring_rr = CostModel(topology::FuseJobTopology(rr).value())
                             .PredictUs(OpKind::kAllReduce, Algo::kRing, 64 << 20);
  const double ring_compact = CostModel(topology::FuseJobTopology(compact).value())
                                  .PredictUs(OpKind::kAllReduce, Algo::kRing, 64 << 20);
  EXPECT_NEAR(ring_rr / ring_compact, 2.0, 0.01);
}

// The table in docs/TOPOLOGY.md §8: the DGX H100 fixture's job shape
// (NVLink 370.8 GB/s and 1 us inside a host, 8 x 400 Gb/s IB = 384 GB/s
// and 5 us per host), 8 ranks per host.
TEST(CostModel, DgxSelectionTableInTheDocs) {
  const LinkModel nvlink{1.0, 370.8, 0.0}, ib{5.0, 384.0, 0.0};
  const size_t sizes[] = {8, 32u << 10, 256u << 10, 2u << 20, 16u << 20, 128u << 20, 1u << 30};
  const Algo R = Algo::kRing, D = Algo::kRecursiveDoubling, T = Algo::kTree,
             H = Algo::kHierarchical;
  const struct {
    int hosts;
    Algo want[7];
  } rows[] = {{1, {D, D, D, D, R, R, R}},
              {2, {D, D, D, H, H, R, R}},
              {16, {D, D, D, T, H, H, R}},
              {512, {D, D, D, T, T, H, H}}};
  for (const auto& row : rows) {
    const CostModel m(JobTopology::Uniform(row.hosts, 8, nvlink, ib));
    for (int i = 0; i < 7; ++i) {
      EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, sizes[i], m, AlgoFilter(), TuneTable()).algo,
                row.want[i])
          << row.hosts << " hosts, " << sizes[i]
          << " bytes: " << DescribeEstimates(OpKind::kAllReduce, sizes[i], m);
    }
  }
}

TEST(SelectAlgo, TuneWinsOverTheModelButNotOverNcclAlgo) {
  const CostModel tcp = OneHost(8, kTcp);
  const TuneTable tune = TuneTable::Parse("allreduce:0-1K=ring,1K-inf=direct").value();
  AlgoFilter none;
  Choice c = SelectAlgo(OpKind::kAllReduce, 8, tcp, none, tune);
  EXPECT_EQ(c.algo, Algo::kRing);  // the model would take RecursiveDoubling
  EXPECT_EQ(c.source, Choice::Source::kTune);
  // NCCL_ALGO excludes the tuned algorithm: the model decides among the rest.
  c = SelectAlgo(OpKind::kAllReduce, 8, tcp, AlgoFilter::Parse("^ring").value(), tune);
  EXPECT_EQ(c.algo, Algo::kRecursiveDoubling);
  EXPECT_EQ(c.source, Choice::Source::kModel);
  EXPECT_EQ(c.tune_ignored, Choice::TuneIgnored::kExcludedByAlgo);
  // Direct cannot run without peer reads: ignored, and the Choice says why.
  c = SelectAlgo(OpKind::kAllReduce, 1 << 20, tcp, none, tune);
  EXPECT_EQ(c.tune_ignored, Choice::TuneIgnored::kUnusable);
  EXPECT_EQ(c.tuned, Algo::kDirect);
  EXPECT_NE(c.algo, Algo::kDirect);
}

CostModel OneHostWithSlots(int n, LinkModel link) {
  return CostModel(JobTopology::Uniform(1, n, link, link), /*reduce_gbs=*/20.0,
                   /*small_slots=*/true);
}

TEST(SelectAlgo, SlotsWhereverTheyFitOnOneHost) {
  const AlgoFilter none;
  const TuneTable no_tune;
  const LinkModel slow_fifo{1.0, 1.0, 0.0};
  const OpKind kinds[] = {OpKind::kAllReduce, OpKind::kReduce, OpKind::kBroadcast,
                          OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kBarrier};
  for (const LinkModel& link : {kShm, slow_fifo}) {
    for (int n : {2, 3, 4, 8}) {
      const CostModel slots = OneHostWithSlots(n, link);
      for (OpKind kind : kinds) {
        for (size_t bytes : {size_t{0}, size_t{8}, size_t{100}, kSmallSlotBytes / 8}) {
          EXPECT_EQ(SelectAlgo(kind, bytes, slots, none, no_tune).algo, Algo::kSlots)
              << OpKindName(kind) << " " << bytes << " B on " << n << " ranks";
        }
      }
      // Larger than a slot holds: never.
      EXPECT_NE(SelectAlgo(OpKind::kAllReduce, kSmallSlotBytes + 4, slots, none, no_tune).algo,
                Algo::kSlots);
      EXPECT_NE(SelectAlgo(OpKind::kReduceScatter, kSmallSlotBytes / n + 64, slots, none, no_tune)
                    .algo,
                Algo::kSlots);
    }
  }
  // Without the slots (turned off, or several hosts): never.
  EXPECT_NE(SelectAlgo(OpKind::kAllReduce, 8, OneHost(2, kShm), none, no_tune).algo, Algo::kSlots);
  const CostModel two_hosts(JobTopology::Uniform(2, 2, kShm, kTcp), 20.0, true);
  EXPECT_TRUE(std::isinf(two_hosts.PredictUs(OpKind::kAllReduce, Algo::kSlots, 8)));
  // NCCL_ALGO and LOOM_TUNE treat them as any other algorithm.
  const CostModel slots = OneHostWithSlots(2, kShm);
  EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, 8, slots, AlgoFilter::Parse("ring").value(), no_tune)
                .algo,
            Algo::kRing);
  EXPECT_EQ(SelectAlgo(OpKind::kAllReduce, 8, slots, AlgoFilter::Parse("^tree").value(), no_tune)
                .algo,
            Algo::kSlots);
  const Choice tuned =
      SelectAlgo(OpKind::kAllReduce, 8, slots, none, TuneTable::Parse("allreduce:*=rd").value());
  EXPECT_EQ(tuned.algo, Algo::kRecursiveDoubling);
  EXPECT_EQ(tuned.source, Choice::Source::kTune);
  const Choice too_big = SelectAlgo(OpKind::kAllReduce, 1 << 20, slots, none,
                                    TuneTable::Parse("allreduce:*=slots").value());
  EXPECT_EQ(too_big.tune_ignored, Choice::TuneIgnored::kUnusable);
}

TEST(SelectAlgo, AsksForShareableBuffersOnlyWhereTheExchangePays) {
  const AlgoFilter none;
  const TuneTable no_tune;
  const CostModel reads = OneHost(2, LinkModel{1.0, 6.0, 4.0});  // reads below the FIFOs
  const Choice big = SelectAlgo(OpKind::kAllReduce, 64u << 20, reads, none, no_tune);
  EXPECT_NE(big.algo, Algo::kDirect);
  EXPECT_TRUE(big.direct_if_shared);
  EXPECT_FALSE(SelectAlgo(OpKind::kAllReduce, 1u << 20, reads, none, no_tune).direct_if_shared);
  EXPECT_FALSE(SelectAlgo(OpKind::kAllReduce, 64u << 20, OneHost(2, kShm), none, no_tune)
                   .direct_if_shared);  // no single-copy reads
  EXPECT_FALSE(SelectAlgo(OpKind::kAllReduce, 64u << 20, OneHost(4, LinkModel{1.0, 6.0, 4.0}), none,
                          no_tune)
                   .direct_if_shared);  // more than two ranks never ask
  EXPECT_FALSE(SelectAlgo(OpKind::kAllReduce, 64u << 20, reads, AlgoFilter::Parse("ring").value(),
                          no_tune)
                   .direct_if_shared);
}

TEST(SelectionSummary, MergesSizesIntoRanges) {
  const CostModel job(JobTopology::Uniform(2, 2, kShm, kTcp));
  const std::string s = SelectionSummary(OpKind::kAllReduce, job, AlgoFilter(), TuneTable());
  EXPECT_EQ(s.rfind("0-", 0), 0u) << s;
  EXPECT_NE(s.find("RecursiveDoubling"), std::string::npos) << s;
  EXPECT_NE(s.find("-inf Hierarchical"), std::string::npos) << s;
  const std::string tuned = SelectionSummary(OpKind::kAllReduce, job, AlgoFilter(),
                                             TuneTable::Parse("allreduce:*=ring").value());
  EXPECT_EQ(tuned, "0-inf Ring (LOOM_TUNE)");
  const std::string est = DescribeEstimates(OpKind::kAllReduce, 1024, OneHost(2, kShm));
  EXPECT_NE(est.find("Ring "), std::string::npos) << est;
  EXPECT_NE(est.find("Direct n/a"), std::string::npos) << est;
  EXPECT_NE(est.find("Hierarchical n/a"), std::string::npos) << est;
}

}  // namespace
}  // namespace loom
