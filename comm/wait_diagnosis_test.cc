// FollowWaits over hand-made reports: 3 hosts x 2 ranks in a ring where
// each rank waits on its predecessor (0 <- 5 crosses from h3 to h1), as the
// chaos test's faults leave them; and the reports' encoding.
#include "comm/wait_diagnosis.h"

#include <gtest/gtest.h>

#include <regex>

namespace loom {
namespace {

const std::vector<std::string> kHosts = {"h1", "h1", "h2", "h2", "h3", "h3"};
constexpr auto kBudget = std::chrono::milliseconds(500);

WaitEdge Net(int peer) {
  return WaitEdge{peer, true, false};
}
WaitEdge Local(int peer) {
  return WaitEdge{peer, false, false};
}

// Rank r waits on its predecessor, over the network where hosts change.
WaitReport RingWait(int r) {
  const int pred = (r + 5) % 6;
  WaitReport w;
  w.waits.push_back(kHosts[pred] == kHosts[r] ? Local(pred) : Net(pred));
  return w;
}

LinkStall Unacked(int peer) {
  LinkStall st;
  st.peer = peer;
  st.retransmits = 3;
  st.silent_ms = 1400;
  st.bytes = 4096;
  return st;
}

// Every rank's ring report but `missing`'s, as the store returns them.
WaitLookup RingLookup(int missing = -1) {
  WaitLookup l;
  for (int r = 0; r < 6; ++r) {
    if (r == missing) {
      l.reports.emplace_back();
    } else {
      l.reports.emplace_back(RingWait(r));
    }
  }
  return l;
}

// As the chaos test reads an error: does it name one of `ranks` as "rank N"?
bool NamesRank(const std::string& text, const std::string& ranks) {
  return std::regex_search(text,
                           std::regex("ranks?(\\(s\\))? ([0-9]+,)*(" + ranks + ")([^0-9]|$)"));
}

TEST(WaitReports, RoundTripThroughTheStoresBytes) {
  WaitReport w;
  w.run = 1234567890123;
  w.waited_ms = 1250;
  w.waits = {Net(5), WaitEdge{1, false, true}};
  LinkStall unsent = Unacked(2);
  unsent.unsent = true;
  w.stalls = {Unacked(4), unsent};
  std::optional<WaitReport> back = DecodeWaitReport(EncodeWaitReport(w));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->run, w.run);
  EXPECT_EQ(back->waited_ms, w.waited_ms);
  ASSERT_EQ(back->waits.size(), 2u);
  EXPECT_EQ(back->waits[0].peer, 5);
  EXPECT_TRUE(back->waits[0].over_network);
  EXPECT_FALSE(back->waits[0].peer_stopped);
  EXPECT_EQ(back->waits[1].peer, 1);
  EXPECT_FALSE(back->waits[1].over_network);
  EXPECT_TRUE(back->waits[1].peer_stopped);
  ASSERT_EQ(back->stalls.size(), 2u);
  EXPECT_EQ(back->stalls[0].peer, 4);
  EXPECT_FALSE(back->stalls[0].unsent);
  EXPECT_EQ(back->stalls[0].retransmits, 3u);
  EXPECT_EQ(back->stalls[0].silent_ms, 1400u);
  EXPECT_EQ(back->stalls[0].bytes, 4096u);
  EXPECT_TRUE(back->stalls[1].unsent);

  EXPECT_FALSE(DecodeWaitReport("").has_value()) << "a withdrawn report";
  EXPECT_FALSE(DecodeWaitReport("garbage").has_value());
  const std::string bytes = EncodeWaitReport(w);
  EXPECT_FALSE(DecodeWaitReport(bytes.substr(0, bytes.size() - 1)).has_value());
}

TEST(WaitReports, ThresholdIsAQuarterOfTheTimeoutWithinBounds) {
  using std::chrono::milliseconds;
  EXPECT_EQ(WaitReportThreshold(milliseconds(5000)), milliseconds(1250));
  EXPECT_EQ(WaitReportThreshold(milliseconds(2000)), milliseconds(1000));
  EXPECT_EQ(WaitReportThreshold(milliseconds(1000)), milliseconds(500));
  EXPECT_EQ(WaitReportThreshold(milliseconds(300000)), milliseconds(30000));
}

TEST(WaitReports, HostsAreLabelledByIdentityOnlyWhereANameIsShared) {
  EXPECT_EQ(HostLabels({"a", "a", "b"}, {"1", "1", "2"}),
            (std::vector<std::string>{"a", "a", "b"}));
  EXPECT_EQ(HostLabels({"vm", "vm", "b"}, {"1", "2", "3"}),
            (std::vector<std::string>{"vm [1]", "vm [2]", "b"}));
}

TEST(FollowWaits, AChainEndsAtARankThatDidNotReport) {
  // Rank 3 is stopped: rank 0 waits on 5 (h3), 5 on 4, 4 on 3, which is silent.
  WaitCause c = FollowWaits(0, RingWait(0), RingLookup(3), kHosts, 0, kBudget);
  EXPECT_TRUE(c.culprit);
  EXPECT_NE(c.text.find("rank 3 on host h2 made no progress and did not report its wait"),
            std::string::npos)
      << c.text;
  EXPECT_NE(c.text.find("this rank waits on rank 5 over the network, which waits on rank 4 on "
                        "its host, which waits on rank 3 over the network"),
            std::string::npos)
      << c.text;
}

TEST(FollowWaits, AStoppedHostMateIsNamedAsStopped) {
  // Rank 5 sees its host-mate 4 stopped; rank 1 gets there through 0.
  WaitLookup l = RingLookup(4);
  l.reports[5]->waits[0].peer_stopped = true;
  WaitCause c = FollowWaits(1, RingWait(1), l, kHosts, 0, kBudget);
  EXPECT_TRUE(c.culprit);
  EXPECT_NE(c.text.find("rank 4 on host h3 is stopped (SIGSTOP or a debugger), as rank 5 on its "
                        "host sees"),
            std::string::npos)
      << c.text;
  // Rank 5 itself names it in its same-host chain: nothing to add, but a culprit.
  WaitCause own = FollowWaits(5, *l.reports[5], l, kHosts, 0, kBudget);
  EXPECT_TRUE(own.culprit);
  EXPECT_EQ(own.text, "");
}

TEST(FollowWaits, ACutIsFoundFromTheLinkThatStoppedAcknowledging) {
  // h2's data link is cut: the waits form a cycle; rank 1's data for rank 2
  // is not acknowledged, and rank 3 cannot send rank 4 anything.
  WaitLookup l = RingLookup();
  l.reports[1]->stalls.push_back(Unacked(2));
  LinkStall unsent = Unacked(4);
  unsent.unsent = true;
  l.reports[3]->stalls.push_back(unsent);
  for (int me = 0; me < 6; ++me) {
    WaitReport mine = *l.reports[me];
    WaitCause c = FollowWaits(me, mine, l, kHosts, 0, kBudget);
    EXPECT_TRUE(c.culprit) << me;
    // Ranks on h2 name a rank off it; the others a rank on it.
    const std::string want = kHosts[me] == "h2" ? "0|1|4|5" : "2|3";
    EXPECT_TRUE(NamesRank(c.text, want)) << "rank " << me << ": " << c.text;
    EXPECT_NE(c.text.find("the network link between rank "), std::string::npos) << c.text;
  }
  // The nearest cut edge on the way: rank 0 reaches rank 3 (via 5, 4) first.
  WaitCause c0 = FollowWaits(0, *l.reports[0], l, kHosts, 0, kBudget);
  EXPECT_NE(c0.text.find("the network link between rank 3 on host h2 and rank 4 on host h3 is "
                         "down at rank 3's end"),
            std::string::npos)
      << c0.text;
  WaitCause c2 = FollowWaits(2, *l.reports[2], l, kHosts, 0, kBudget);
  EXPECT_NE(c2.text.find("the network link between rank 1 on host h1 and rank 2 on host h2 "
                         "stopped acknowledging: rank 1's data for rank 2 went unacknowledged "
                         "(3 retransmits, no acknowledgement for 1.4 s when rank 1 reported it)"),
            std::string::npos)
      << c2.text;
}

TEST(FollowWaits, ACycleWithoutEvidenceIsCalledACycleNotACulprit) {
  WaitCause c = FollowWaits(2, RingWait(2), RingLookup(), kHosts, 0, kBudget);
  EXPECT_FALSE(c.culprit);
  EXPECT_NE(c.text.find("ranks 2, 1, 0, 5, 4, 3 wait on one another in a cycle"), std::string::npos)
      << c.text;
}

TEST(FollowWaits, ASilentStoreNamesItsOwnerUnlessThisRanksOwnLinkStalls) {
  WaitLookup silent;
  silent.store = WaitLookup::Store::kSilent;
  WaitCause c = FollowWaits(3, RingWait(3), silent, kHosts, 0, kBudget);
  EXPECT_TRUE(c.culprit);
  EXPECT_NE(c.text.find("the rendezvous store did not answer within 500 ms: rank 0 on host h1"),
            std::string::npos)
      << c.text;
  // This rank's own evidence needs no store.
  WaitReport mine = RingWait(1);
  mine.stalls.push_back(Unacked(2));
  WaitCause own = FollowWaits(1, mine, silent, kHosts, 0, kBudget);
  EXPECT_NE(own.text.find("the network link between rank 1 on host h1 and rank 2 on host h2"),
            std::string::npos)
      << own.text;
  EXPECT_EQ(own.text.find("found through"), std::string::npos) << own.text;
}

TEST(FollowWaits, AGoneStoreAddsNothingWithoutLocalEvidence) {
  WaitLookup gone;
  gone.store = WaitLookup::Store::kGone;
  WaitCause c = FollowWaits(3, RingWait(3), gone, kHosts, 0, kBudget);
  EXPECT_FALSE(c.culprit);
  EXPECT_EQ(c.text, "");
}

TEST(FollowWaits, AStalledLinkOffThePathIsStillNamed) {
  // Rank 0 waits on 1 and 1 on 0; rank 4 reports its link to 5 stalled.
  WaitLookup l;
  l.reports.resize(6);
  for (int r = 0; r < 6; ++r) l.reports[r] = WaitReport{};
  l.reports[0]->waits = {Local(1)};
  l.reports[1]->waits = {Local(0)};
  l.reports[4]->stalls = {Unacked(5)};
  WaitCause c = FollowWaits(0, *l.reports[0], l, kHosts, 0, kBudget);
  EXPECT_TRUE(c.culprit);
  EXPECT_NE(c.text.find("between rank 4 on host h3 and rank 5 on host h3"), std::string::npos)
      << c.text;
}

}  // namespace
}  // namespace loom
