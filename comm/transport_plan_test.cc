// The per-link transport choice: each rule with its message, then every
// combination of availability and knobs for a pair of ranks, checking the
// invariants that make both ends agree.
#include "comm/transport_plan.h"

#include <gtest/gtest.h>

namespace loom {
namespace {

using State = Availability::State;

TransportRecord Host(const std::string& id, bool ib = false) {
  TransportRecord r;
  r.host_id = id;
  r.hostname = "node-" + id;
  r.shm = Availability::Usable("/dev/shm");
  r.socket = Availability::Usable("data0");
  r.ucx = Availability::Usable("data0");
  r.ib = ib ? Availability::Usable("mlx5_0:1") : Availability::Absent("no libibverbs");
  return r;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(TransportPlan, SameHostUsesShmOtherHostsSockets) {
  std::vector<TransportRecord> ranks = {Host("a"), Host("a"), Host("b")};
  auto plans = PlanPeers(ranks, 0);
  ASSERT_TRUE(plans.ok()) << plans.status().ToString();
  EXPECT_EQ((*plans)[1].kind, TransportKind::kShm);
  EXPECT_EQ((*plans)[2].kind, TransportKind::kSocket);
  EXPECT_TRUE((*plans)[2].warnings.empty()) << "IB absent everywhere is not a fallback";
  EXPECT_TRUE(Contains((*plans)[2].reason, "IB is absent")) << (*plans)[2].reason;
}

TEST(TransportPlan, ShmDisableSendsSameHostPeersToTheNetworkWithoutWarning) {
  std::vector<TransportRecord> ranks = {Host("a"), Host("a")};
  for (auto& r : ranks) r.knobs.shm_disable = true;
  auto plan = PlanLink(ranks, 0, 1);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->kind, TransportKind::kSocket);
  EXPECT_TRUE(plan->warnings.empty());
  EXPECT_TRUE(Contains(plan->reason, "NCCL_SHM_DISABLE=1")) << plan->reason;
}

TEST(TransportPlan, UnusableShmIsAWarnedFallbackOrAnErrorWhenStrict) {
  std::vector<TransportRecord> ranks = {Host("a"), Host("a")};
  ranks[1].shm = Availability::Unusable("/dev/shm has 64 KiB free");
  auto plan = PlanLink(ranks, 0, 1);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->kind, TransportKind::kSocket);
  ASSERT_EQ(plan->warnings.size(), 1u);
  EXPECT_TRUE(Contains(plan->warnings[0], "rank 1 (node-a): /dev/shm has 64 KiB free"))
      << plan->warnings[0];
  EXPECT_TRUE(Contains(plan->warnings[0], "[rule: same host -> SHM")) << plan->warnings[0];

  for (auto& r : ranks) r.knobs.require = "shm";
  plan = PlanLink(ranks, 0, 1);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kSystemError);
  EXPECT_TRUE(Contains(plan.status().message(), "LOOM_REQUIRE_TRANSPORT=shm"))
      << plan.status().ToString();
}

TEST(TransportPlan, RequireShmWithShmDisabledIsAContradiction) {
  std::vector<TransportRecord> ranks = {Host("a"), Host("a")};
  for (auto& r : ranks) r.knobs = {.shm_disable = true, .require = "SHM"};
  auto plan = PlanLink(ranks, 1, 0);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kInvalidUsage);
  EXPECT_TRUE(Contains(plan.status().message(), "contradicts NCCL_SHM_DISABLE=1"));
}

TEST(TransportPlan, RequireShmLeavesNetworkLinksAlone) {
  std::vector<TransportRecord> ranks = {Host("a"), Host("b")};
  for (auto& r : ranks) r.knobs.require = "shm";
  auto plan = PlanLink(ranks, 0, 1);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->kind, TransportKind::kSocket);
}

TEST(TransportPlan, IbOnBothEndsIsPreferred) {
  std::vector<TransportRecord> ranks = {Host("a", true), Host("b", true)};
  auto plan = PlanLink(ranks, 0, 1);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->kind, TransportKind::kIb);
  EXPECT_TRUE(plan->warnings.empty());
}

TEST(TransportPlan, IbDisableChoosesSocketsKnowingly) {
  std::vector<TransportRecord> ranks = {Host("a", true), Host("b", true)};
  for (auto& r : ranks) r.knobs.ib_disable = true;
  auto plan = PlanLink(ranks, 0, 1);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->kind, TransportKind::kSocket);
  EXPECT_TRUE(plan->warnings.empty());
  EXPECT_TRUE(Contains(plan->reason, "NCCL_IB_DISABLE=1")) << plan->reason;
}

TEST(TransportPlan, IbUnusableOnOneEndWarnsNamingThatEndAndTheRule) {
  // FAILURE_MODES row 5: IB silently unused. Here it is loud.
  std::vector<TransportRecord> ranks = {Host("a", true), Host("b", true)};
  ranks[1].ib = Availability::Unusable("mlx5_0 port 1 is DOWN");
  for (int me : {0, 1}) {
    auto plan = PlanLink(ranks, me, 1 - me);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->kind, TransportKind::kSocket);
    ASSERT_EQ(plan->warnings.size(), 1u);
    const std::string& w = plan->warnings[0];
    EXPECT_TRUE(Contains(w, "IB is not usable on rank 1 (node-b): mlx5_0 port 1 is DOWN")) << w;
    EXPECT_TRUE(Contains(w, "[rule: auto IB > Socket]")) << w;
    EXPECT_TRUE(Contains(w, "NCCL_IB_DISABLE=1")) << w;
  }
}

TEST(TransportPlan, IbOnOnlyOneHostIsAFallbackNamingTheHostWithout) {
  // FAILURE_MODES row 6: one host on IB, another on sockets.
  std::vector<TransportRecord> ranks = {Host("a", true), Host("b", false)};
  auto plan = PlanLink(ranks, 0, 1);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->kind, TransportKind::kSocket);
  ASSERT_EQ(plan->warnings.size(), 1u);
  EXPECT_TRUE(Contains(plan->warnings[0], "IB is absent on rank 1 (node-b)")) << plan->warnings[0];
}

TEST(TransportPlan, StrictModeTurnsTheIbFallbackIntoAnError) {
  std::vector<TransportRecord> ranks = {Host("a", true), Host("b", true)};
  ranks[0].ib = Availability::Unusable("NCCL_IB_HCA=mlx5_9 matched no device");
  for (auto& r : ranks) r.knobs.require = "socket";
  auto plan = PlanLink(ranks, 0, 1);  // socket required: no IB fallback involved
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->kind, TransportKind::kSocket);
  EXPECT_TRUE(plan->warnings.empty());
  for (auto& r : ranks) r.knobs.require = "ib";
  plan = PlanLink(ranks, 1, 0);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(Contains(plan.status().message(), "LOOM_REQUIRE_TRANSPORT=ib selects IB, but IB is "
                                                "not usable on rank 0 (node-a): NCCL_IB_HCA"))
      << plan.status().ToString();
}

TEST(TransportPlan, NcclNetIbWithoutIbIsAClearErrorNotAFallback) {
  std::vector<TransportRecord> ranks = {Host("a"), Host("b")};
  for (auto& r : ranks) r.knobs.net = "IB";
  auto plan = PlanLink(ranks, 0, 1);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kSystemError);
  const std::string m = plan.status().message();
  EXPECT_TRUE(Contains(m, "NCCL_NET=IB selects IB, but IB is absent on rank 0 (node-a): no "
                          "libibverbs")) << m;
  EXPECT_TRUE(Contains(m, "no fallback")) << m;
}

TEST(TransportPlan, NcclNetIsCaseInsensitiveAndSelectsUcx) {
  std::vector<TransportRecord> ranks = {Host("a"), Host("b")};
  for (auto& r : ranks) r.knobs.net = "ucx";
  auto plan = PlanLink(ranks, 0, 1);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->kind, TransportKind::kUcx);
  EXPECT_EQ(plan->reason, "NCCL_NET=ucx");
  ranks[1].ucx = Availability::Absent("built without UCX");
  plan = PlanLink(ranks, 0, 1);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(Contains(plan.status().message(), "UCX is absent on rank 1 (node-b): built without"));
}

TEST(TransportPlan, NcclNetDoesNotChangeSameHostLinks) {
  std::vector<TransportRecord> ranks = {Host("a"), Host("a")};
  for (auto& r : ranks) r.knobs.net = "IB";
  auto plan = PlanLink(ranks, 0, 1);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->kind, TransportKind::kShm);
}

TEST(TransportPlan, ContradictoryAndUnknownKnobsAreInvalidUsage) {
  std::vector<TransportRecord> ranks = {Host("a", true), Host("b", true)};
  struct Case {
    TransportKnobs knobs;
    const char* expect;
  } cases[] = {
      {{.ib_disable = true, .net = "IB"}, "NCCL_NET=IB contradicts NCCL_IB_DISABLE=1"},
      {{.ib_disable = true, .require = "ib"},
       "LOOM_REQUIRE_TRANSPORT=ib contradicts NCCL_IB_DISABLE=1"},
      {{.net = "Socket", .require = "ib"},
       "NCCL_NET=Socket contradicts LOOM_REQUIRE_TRANSPORT=ib"},
      {{.net = "Sockets"}, "NCCL_NET='Sockets' is not a transport loom has; use IB, Socket or UCX"},
      {{.net = "shm"}, "NCCL_NET='shm'"},
      {{.require = "tcp"}, "LOOM_REQUIRE_TRANSPORT='tcp' is not a transport loom has; use ib, "
                           "ucx, socket or shm"},
  };
  for (const Case& c : cases) {
    for (auto& r : ranks) r.knobs = c.knobs;
    auto plan = PlanLink(ranks, 0, 1);
    ASSERT_FALSE(plan.ok()) << c.expect;
    EXPECT_EQ(plan.status().code(), Code::kInvalidUsage) << c.expect;
    EXPECT_TRUE(Contains(plan.status().message(), c.expect)) << plan.status().ToString();
  }
}

TEST(TransportPlan, EndsThatWouldChooseDifferentlyFailNamingBoth) {
  std::vector<TransportRecord> ranks = {Host("a", true), Host("b", true)};
  ranks[1].knobs.ib_disable = true;
  auto p01 = PlanLink(ranks, 0, 1);
  auto p10 = PlanLink(ranks, 1, 0);
  ASSERT_FALSE(p01.ok());
  ASSERT_FALSE(p10.ok());
  EXPECT_EQ(p01.status().message(), p10.status().message());
  const std::string m = p01.status().message();
  EXPECT_TRUE(Contains(m, "rank 0 (node-a) would reach rank 1 (node-b) via IB")) << m;
  EXPECT_TRUE(Contains(m, "rank 1 (node-b) would use Socket (NCCL_IB_DISABLE=1")) << m;

  // Shared memory disabled on one end only.
  ranks = {Host("a"), Host("a")};
  ranks[0].knobs.shm_disable = true;
  auto p = PlanLink(ranks, 1, 0);
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(Contains(p.status().message(), "via Socket")) << p.status().ToString();
  EXPECT_TRUE(Contains(p.status().message(), "would use SHM")) << p.status().ToString();
}

TEST(TransportPlan, NoNetworkTransportNamesTheEndAndTheKnob) {
  std::vector<TransportRecord> ranks = {Host("a"), Host("b")};
  ranks[1].socket = Availability::Unusable("NCCL_SOCKET_IFNAME=ib matched no interface");
  auto plan = PlanLink(ranks, 0, 1);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(Contains(plan.status().message(),
                       "Socket is not usable on rank 1 (node-b): NCCL_SOCKET_IFNAME=ib"))
      << plan.status().ToString();
}

TEST(TransportPlan, LoopbackSocketAcrossHostsIsNamedAtOnce) {
  // NCCL_SOCKET_IFNAME=^mgmt leaves lo first: each host would connect to itself.
  for (const char* addr : {"127.0.0.1:4000", "127.0.1.1:1", "[::1]:4000", "[::ffff:127.0.0.1]:9"}) {
    std::vector<TransportRecord> ranks = {Host("a"), Host("b")};
    ranks[0].socket_address = "10.0.0.1:4000";
    ranks[1].socket = Availability::Usable("lo");
    ranks[1].socket_address = addr;
    auto plan = PlanLink(ranks, 0, 1);
    ASSERT_FALSE(plan.ok()) << addr;
    const std::string m = plan.status().message();
    EXPECT_TRUE(Contains(m, "rank 1 (node-b) listens for sockets on the loopback address " +
                                std::string(addr) + " (lo)")) << m;
    EXPECT_TRUE(Contains(m, "NCCL_SOCKET_IFNAME")) << m;
    EXPECT_EQ(PlanLink(ranks, 1, 0).status().message(), m);
  }
  // On one host loopback is fine (NCCL_SHM_DISABLE=1 runs), and so are
  // addresses that merely look alike.
  std::vector<TransportRecord> ranks = {Host("a"), Host("a")};
  for (auto& r : ranks) {
    r.knobs.shm_disable = true;
    r.socket_address = "127.0.0.1:5";
  }
  EXPECT_TRUE(PlanLink(ranks, 0, 1).ok());
  ranks = {Host("a"), Host("b")};
  ranks[0].socket_address = "10.127.0.1:5";
  ranks[1].socket_address = "[fd00::1]:5";
  EXPECT_TRUE(PlanLink(ranks, 0, 1).ok());
}

TEST(TransportPlan, BadRankIndicesAreInvalidArgument) {
  std::vector<TransportRecord> ranks = {Host("a"), Host("b")};
  for (auto [me, peer] : {std::pair{0, 0}, {-1, 0}, {0, 2}, {2, 1}}) {
    EXPECT_EQ(PlanLink(ranks, me, peer).status().code(), Code::kInvalidArgument);
  }
  EXPECT_EQ(PlanPeers(ranks, 2).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(PlanPeers({}, 0).status().code(), Code::kInvalidArgument);
  auto single = PlanPeers({Host("a")}, 0);
  ASSERT_TRUE(single.ok());
  EXPECT_EQ((*single)[0].reason, "self");
}

TEST(TransportPlan, RecordsRoundTripAndMalformedOnesNameTheRank) {
  TransportRecord r = Host("id:with:colons\n", true);
  r.hostname = std::string("h\0st", 4);
  r.ucx = Availability::Unusable("");
  r.socket_address = "[fe80::1%data0]:29500";
  r.knobs = {.shm_disable = true, .ib_disable = false, .net = "UCX", .require = "ucx"};
  const std::string text = EncodeTransportRecord(r);
  auto back = DecodeTransportRecord(text, 3);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, r);
  for (size_t cut = 0; cut < text.size(); ++cut) {
    auto bad = DecodeTransportRecord(text.substr(0, cut), 3);
    ASSERT_FALSE(bad.ok()) << cut;
    EXPECT_TRUE(Contains(bad.status().message(), "from rank 3")) << bad.status().ToString();
  }
  EXPECT_FALSE(DecodeTransportRecord(text + "x", 3).ok());
  EXPECT_FALSE(DecodeTransportRecord("", 0).ok());
  EXPECT_FALSE(DecodeTransportRecord("99999999999999999999999:x", 0).ok());
  std::string wrong_state = text;
  wrong_state.replace(wrong_state.find("1:2"), 3, "1:7");
  EXPECT_FALSE(DecodeTransportRecord(wrong_state, 0).ok());
}

// Every combination for a pair of ranks: availability of each transport on
// each end (3^8, sampled per transport pair) x knobs on each end.
TEST(TransportPlan, ExhaustivePairsAgreeAndHonourTheRules) {
  const State states[] = {State::kAbsent, State::kUnusable, State::kUsable};
  const char* nets[] = {"", "IB", "Socket", "UCX"};
  const char* requires_[] = {"", "ib", "socket", "ucx", "shm"};
  int checked = 0;
  int chosen[4] = {};  // per TransportKind: the sweep reaches every outcome
  for (bool same_host : {false, true}) {
    for (int avail = 0; avail < 3 * 3 * 3 * 3 * 3 * 3; ++avail) {
      // ib, shm and socket vary per end; ucx follows ib's pattern rotated.
      int a = avail;
      std::vector<TransportRecord> ranks = {Host("a"), Host(same_host ? "a" : "b")};
      for (auto& r : ranks) {
        r.ib.state = states[a % 3];
        a /= 3;
        r.shm.state = states[a % 3];
        a /= 3;
        r.socket.state = states[a % 3];
        a /= 3;
        r.ucx.state = states[(static_cast<int>(r.ib.state) + 1) % 3];
      }
      for (int k = 0; k < 2 * 2 * 4 * 5 * 2; ++k) {
        int x = k;
        TransportKnobs knobs{.shm_disable = (x & 1) != 0, .ib_disable = (x & 2) != 0};
        x >>= 2;
        knobs.net = nets[x % 4];
        x /= 4;
        knobs.require = requires_[x % 5];
        x /= 5;
        // Either the same knobs on both ends, or rank 1 differs in shm/ib disable.
        ranks[0].knobs = ranks[1].knobs = knobs;
        if (x == 1) {
          ranks[1].knobs.shm_disable = !knobs.shm_disable;
          ranks[1].knobs.ib_disable = !knobs.ib_disable;
        }
        auto p01 = PlanLink(ranks, 0, 1);
        auto p10 = PlanLink(ranks, 1, 0);
        ++checked;
        ASSERT_EQ(p01.ok(), p10.ok());
        if (!p01.ok()) {
          ASSERT_EQ(p01.status().ToString(), p10.status().ToString());
          continue;
        }
        const TransportKind kind = p01->kind;
        ++chosen[static_cast<int>(kind)];
        ASSERT_EQ(kind, p10->kind);
        // The chosen transport is usable on both ends.
        for (const auto& r : ranks) {
          const Availability& av = kind == TransportKind::kShm      ? r.shm
                                   : kind == TransportKind::kSocket ? r.socket
                                   : kind == TransportKind::kUcx    ? r.ucx
                                                                    : r.ib;
          ASSERT_TRUE(av.usable());
        }
        if (kind == TransportKind::kShm) {
          ASSERT_TRUE(same_host);
          ASSERT_FALSE(ranks[0].knobs.shm_disable || ranks[1].knobs.shm_disable);
        } else {
          if (!knobs.net.empty()) {
            ASSERT_EQ(kind, ParseTransportName(knobs.net, "", false).value());
          }
          ASSERT_FALSE(kind == TransportKind::kIb && ranks[0].knobs.ib_disable);
          ASSERT_FALSE(kind == TransportKind::kUcx && knobs.net.empty() && knobs.require.empty());
          ASSERT_FALSE(same_host && knobs.require == "shm" && !knobs.shm_disable);
        }
        // Strict mode never warns: a fallback is an error instead.
        if (!knobs.require.empty()) {
          ASSERT_TRUE(p01->warnings.empty() && p10->warnings.empty());
        }
        for (const auto& w : p01->warnings) ASSERT_TRUE(Contains(w, "[rule: ")) << w;
      }
    }
  }
  EXPECT_EQ(checked, 2 * 729 * 160);
  for (int c : chosen) EXPECT_GT(c, 100);
}


// The IB rule that setup and `loom doctor` share.
TEST(IbAvailabilityOf, AbsentUnusableAndUsableAsDiscoveryAndTheFilterSay) {
  ib::Discovery none;
  none.absent_reason = "ibv_get_device_list failed: Function not implemented (ENOSYS)";
  EXPECT_EQ(IbAvailabilityOf(none, ""), Availability::Absent(none.absent_reason));
  EXPECT_EQ(IbAvailabilityOf(ib::Discovery{}, "").state, Availability::State::kAbsent);

  ib::Discovery found;
  ib::PortInfo down;
  down.device = "mlx5_0";
  down.active = false;
  ib::PortInfo up;
  up.device = "mlx5_1";
  up.active = true;
  found.ports = {down, up};
  ib::PortInfo chosen;
  const Availability usable = IbAvailabilityOf(found, "", &chosen);
  EXPECT_EQ(usable, Availability::Usable("mlx5_1:1"));
  EXPECT_EQ(chosen.device, "mlx5_1");
  // Only the down port is selected: present but unusable (a warned fallback).
  EXPECT_EQ(IbAvailabilityOf(found, "=mlx5_0").state, Availability::State::kUnusable);
  // A filter naming nothing that exists.
  const Availability typo = IbAvailabilityOf(found, "mlx9");
  EXPECT_FALSE(typo.usable());
  EXPECT_NE(typo.detail.find("mlx9"), std::string::npos) << typo.detail;
}

TEST(GateUnprovenIb, UsableIbOnlyWhenAskedForByName) {
  const Availability ib = Availability::Usable("mlx5_0:1");
  TransportKnobs knobs;
  const Availability automatic = GateUnprovenIb(ib, knobs);
  EXPECT_EQ(automatic.state, Availability::State::kUnusable);
  EXPECT_NE(automatic.detail.find("NCCL_NET=IB"), std::string::npos) << automatic.detail;
  EXPECT_NE(automatic.detail.find("mlx5_0:1"), std::string::npos) << automatic.detail;
  knobs.net = "ib";
  EXPECT_EQ(GateUnprovenIb(ib, knobs), ib);
  knobs.net = "";
  knobs.require = "IB";
  EXPECT_EQ(GateUnprovenIb(ib, knobs), ib);
  knobs.require = "socket";
  EXPECT_FALSE(GateUnprovenIb(ib, knobs).usable());
  // Absent and unusable pass through with their own reasons.
  EXPECT_EQ(GateUnprovenIb(Availability::Absent("zero IB devices"), knobs),
            Availability::Absent("zero IB devices"));
}

}  // namespace
}  // namespace loom
