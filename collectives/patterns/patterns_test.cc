// Exhaustive checks of the rank-math schedules for n = 1..64 and every root:
// each schedule is simulated with sets of contributions (one bit per rank)
// and must leave every rank with exactly the right data, each part once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "collectives/patterns/recursive_doubling.h"
#include "collectives/patterns/ring.h"
#include "collectives/patterns/tree.h"

namespace loom::patterns {
namespace {

using Set = uint64_t;  // bit r = rank r's contribution
constexpr int kMaxRanks = 64;

Set All(int n) {
  return n == 64 ? ~Set{0} : (Set{1} << n) - 1;
}

int CeilLog2(int n) {
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

TEST(Ring, NeighboursAreInverse) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(RingPrev(RingNext(r, n), n), r);
      EXPECT_EQ(RingNext(r, n), (r + 1) % n);
    }
  }
}

// Simultaneous steps: everyone sends from the state before the step.
TEST(Ring, ReduceScatterGivesEachRankItsBlockFullyReducedOnce) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    // partial[r][b] = contributions rank r holds for block b.
    std::vector<std::vector<Set>> partial(n, std::vector<Set>(n));
    for (int r = 0; r < n; ++r) {
      for (int b = 0; b < n; ++b) partial[r][b] = Set{1} << r;
    }
    for (int s = 0; s + 1 < n; ++s) {
      std::vector<std::vector<Set>> next = partial;
      for (int r = 0; r < n; ++r) {
        const int blk = RingReduceScatterSendBlock(r, n, s);
        const int to = RingNext(r, n);
        ASSERT_EQ(RingReduceScatterRecvBlock(to, n, s), blk)
            << "n=" << n << " s=" << s << " r=" << r;
        ASSERT_EQ(partial[to][blk] & partial[r][blk], 0u)
            << "contribution twice, n=" << n << " s=" << s;
        next[to][blk] |= partial[r][blk];
      }
      partial = next;
    }
    for (int r = 0; r < n; ++r) ASSERT_EQ(partial[r][r], All(n)) << "n=" << n << " r=" << r;
  }
}

TEST(Ring, AllGatherDeliversEveryBlockOnce) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    std::vector<Set> have(n);
    for (int r = 0; r < n; ++r) have[r] = Set{1} << r;  // after reduce-scatter rank r owns block r
    for (int s = 0; s + 1 < n; ++s) {
      std::vector<Set> next = have;
      for (int r = 0; r < n; ++r) {
        const int blk = RingAllGatherSendBlock(r, n, s);
        const int to = RingNext(r, n);
        ASSERT_TRUE(have[r] & (Set{1} << blk)) << "sends a block it lacks, n=" << n;
        ASSERT_EQ(RingAllGatherRecvBlock(to, n, s), blk);
        ASSERT_FALSE(have[to] & (Set{1} << blk)) << "receives a block twice, n=" << n;
        next[to] |= Set{1} << blk;
      }
      have = next;
    }
    for (int r = 0; r < n; ++r) ASSERT_EQ(have[r], All(n));
  }
}

TEST(Ring, BlockRangeCoversInOrderAligned) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{63}, size_t{64}, size_t{1031},
                       size_t{4096}, size_t{1} << 20}) {
    for (int nblocks = 1; nblocks <= kMaxRanks; ++nblocks) {
      for (size_t align : {size_t{0}, size_t{1}, size_t{4}, size_t{16}, size_t{1000}}) {
        const size_t a = align == 0 ? 1 : align;
        const size_t units = (count + a - 1) / a;
        size_t expect_offset = 0;
        for (int i = 0; i < nblocks; ++i) {
          const Range r = BlockRange(count, nblocks, i, align);
          ASSERT_EQ(r.offset, expect_offset)
              << count << "/" << nblocks << "/" << align << " i=" << i;
          ASSERT_TRUE(r.offset % a == 0 || r.offset == count);
          const size_t end = r.offset + r.count;
          ASSERT_TRUE(end % a == 0 || end == count);
          const size_t my_units = (r.count + a - 1) / a;
          ASSERT_TRUE(my_units == units / nblocks || my_units == units / nblocks + 1);
          expect_offset = end;
        }
        ASSERT_EQ(expect_offset, count);
      }
    }
  }
  // Equal split when it divides evenly.
  EXPECT_EQ(BlockRange(100, 4, 2).offset, 50u);
  EXPECT_EQ(BlockRange(100, 4, 2).count, 25u);
  // Fewer units than blocks: the tail blocks are empty at the end.
  EXPECT_EQ(BlockRange(3, 8, 7).offset, 3u);
  EXPECT_EQ(BlockRange(3, 8, 7).count, 0u);
}

TEST(Tree, BinomialIsSpanningTreeOfLogDepthForEveryRoot) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (int root = 0; root < n; ++root) {
      int max_depth = 0;
      int edges = 0;
      for (int r = 0; r < n; ++r) {
        const int parent = BinomialParent(r, n, root);
        ASSERT_EQ(parent == -1, r == root);
        // Children lists and parents agree.
        for (int c : BinomialChildren(r, n, root)) {
          ASSERT_EQ(BinomialParent(c, n, root), r) << "n=" << n << " root=" << root;
          ++edges;
        }
        if (parent >= 0) {
          const auto siblings = BinomialChildren(parent, n, root);
          ASSERT_EQ(std::count(siblings.begin(), siblings.end(), r), 1);
        }
        int depth = 0;
        for (int x = r; x != root; x = BinomialParent(x, n, root)) {
          ASSERT_LE(++depth, n) << "cycle";
        }
        max_depth = std::max(max_depth, depth);
      }
      ASSERT_EQ(edges, n - 1);
      ASSERT_LE(max_depth, CeilLog2(n)) << "n=" << n;
    }
  }
}

// Simulates a reduce bottom-up in the documented child order, one receive
// per rank per round: the root must end with every contribution exactly
// once after ceil(log2 n) rounds, and children come in increasing distance.
struct Reduced {
  Set contributions;
  int ready_round;  // rounds until this rank can send its subtree's result
};

Reduced ReduceSubtree(int r, int n, int root) {
  Reduced acc{Set{1} << r, 0};
  int prev_v = ((r - root) % n + n) % n;
  for (int c : BinomialChildren(r, n, root)) {
    const int v = ((c - root) % n + n) % n;
    EXPECT_GT(v, prev_v) << "children out of order";
    prev_v = v;
    const Reduced sub = ReduceSubtree(c, n, root);
    EXPECT_EQ(acc.contributions & sub.contributions, 0u) << "contribution twice";
    acc.contributions |= sub.contributions;
    acc.ready_round = std::max(acc.ready_round, sub.ready_round) + 1;
  }
  return acc;
}

TEST(Tree, BinomialReduceReachesRootOnceInLogRounds) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (int root = 0; root < n; ++root) {
      const Reduced at_root = ReduceSubtree(root, n, root);
      ASSERT_EQ(at_root.contributions, All(n)) << "n=" << n << " root=" << root;
      ASSERT_EQ(at_root.ready_round, CeilLog2(n)) << "n=" << n << " root=" << root;
    }
  }
}

TEST(Tree, ChainVisitsEveryRankOnce) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (int root = 0; root < n; ++root) {
      EXPECT_EQ(ChainPrev(root, n, root), -1);
      Set seen = 0;
      int hops = 0;
      int last = root;
      for (int r = root; r != -1; r = ChainNext(r, n, root)) {
        ASSERT_FALSE(seen & (Set{1} << r));
        seen |= Set{1} << r;
        if (r != root) {
          ASSERT_EQ(ChainPrev(r, n, root), last);
        }
        last = r;
        ASSERT_LE(++hops, n);
      }
      ASSERT_EQ(seen, All(n));
      ASSERT_EQ(hops, n);
    }
  }
}

TEST(RecursiveDoubling, EveryRankEndsWithEveryContributionOnce) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    std::vector<RecursiveDoublingPlan> plans;
    for (int r = 0; r < n; ++r) plans.push_back(MakeRecursiveDoublingPlan(r, n));
    int p = 1;
    while (p * 2 <= n) p *= 2;
    std::vector<Set> data(n);
    for (int r = 0; r < n; ++r) data[r] = Set{1} << r;
    int folded = 0;
    // 1. Fold-in.
    for (int r = 0; r < n; ++r) {
      const auto& plan = plans[r];
      if (plan.role != RecursiveDoublingPlan::kFoldedOut) continue;
      ++folded;
      ASSERT_TRUE(plan.partners.empty());
      const int peer = plan.fold_peer;
      ASSERT_GE(peer, 0);
      ASSERT_LT(peer, n);
      ASSERT_EQ(plans[peer].role, RecursiveDoublingPlan::kCore);
      ASSERT_EQ(plans[peer].fold_peer, r) << "fold peers must point at each other";
      ASSERT_EQ(data[peer] & data[r], 0u);
      data[peer] |= data[r];
    }
    ASSERT_EQ(n - folded, p) << "core is the largest power of two";
    // 2. Exchanges, simultaneous per step, symmetric partners.
    const int steps = CeilLog2(p);
    for (int k = 0; k < steps; ++k) {
      std::vector<Set> next = data;
      for (int r = 0; r < n; ++r) {
        if (plans[r].role != RecursiveDoublingPlan::kCore) continue;
        ASSERT_EQ(static_cast<int>(plans[r].partners.size()), steps);
        const int partner = plans[r].partners[k];
        ASSERT_NE(partner, r);
        ASSERT_EQ(plans[partner].role, RecursiveDoublingPlan::kCore);
        ASSERT_EQ(plans[partner].partners[k], r) << "n=" << n << " k=" << k;
        ASSERT_EQ(data[r] & data[partner], 0u) << "contribution twice, n=" << n << " k=" << k;
        next[r] = data[r] | data[partner];
      }
      data = next;
    }
    // 3. Fold-out.
    for (int r = 0; r < n; ++r) {
      if (plans[r].role == RecursiveDoublingPlan::kFoldedOut) data[r] = data[plans[r].fold_peer];
    }
    for (int r = 0; r < n; ++r) ASSERT_EQ(data[r], All(n)) << "n=" << n << " r=" << r;
  }
}

}  // namespace
}  // namespace loom::patterns
