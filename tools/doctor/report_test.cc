// Verdict, exit code, most likely cause and both renderings.
#include <gtest/gtest.h>

#include "tools/doctor/report.h"

namespace loom::doctor {
namespace {

TEST(DoctorReport, ExitCodesFollowTheWorstFinding) {
  EXPECT_EQ(ExitCode({}), 0);
  EXPECT_EQ(ExitCode({Pass(Check::kNames, "ok")}), 0);
  EXPECT_EQ(ExitCode({Pass(Check::kNames, "ok"), Warn(Check::kGpu, "h1", "w", "f")}), 1);
  EXPECT_EQ(ExitCode({Warn(Check::kGpu, "h1", "w", "f"), Fail(Check::kLimits, "h2", "x", "y")}), 2);
}

TEST(DoctorReport, CauseIsTheEarliestRootCauseAmongFailures) {
  std::vector<Finding> f = {Fail(Check::kReachability, "h2", "port dropped", "open it"),
                            Warn(Check::kNames, "", "differs", "fix"),
                            Fail(Check::kInterfaces, "h2", "no match", "NCCL_SOCKET_IFNAME==data0"),
                            Fail(Check::kBandwidth, "h3", "slow", "tc")};
  const Finding* c = MostLikelyCause(f);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->check, Check::kInterfaces);  // a failure beats a warning even of an earlier check
  EXPECT_EQ(MostLikelyCause({Pass(Check::kNames, "ok")}), nullptr);
}

TEST(DoctorReport, TextHasOneLinePerFindingAFixLineAndTheCause) {
  Report r{"agents", {"h1", "h2"}, {Pass(Check::kNames, "2 names"), Fail(Check::kMtuRoutes, "h2", "mtu 9000", "ip link")}};
  EXPECT_EQ(RenderText(r),
            "PASS  names  2 names\n"
            "FAIL  mtu_routes  h2: mtu 9000\n"
            "      fix: ip link\n"
            "\n"
            "Most likely cause (mtu_routes, h2): mtu 9000\n"
            "Fix: ip link\n");
  r.findings.pop_back();
  EXPECT_NE(RenderText(r).find("All checks passed on 2 host(s)."), std::string::npos);
}

TEST(DoctorReport, JsonSchema) {
  Report r{"agents", {"h1"}, {Warn(Check::kTransportPlan, "h1", "s", "f")}};
  json::Value v = RenderJson(r);
  EXPECT_EQ(v.Find("format")->string(), "loom-doctor");
  EXPECT_EQ(v.Find("version")->number(), 1);
  EXPECT_EQ(v.Find("verdict")->string(), "WARN");
  EXPECT_EQ(v.Find("exit_code")->number(), 1);
  const json::Value& f = v.Find("findings")->array().at(0);
  EXPECT_EQ(f.Find("check")->string(), "transport_plan");
  EXPECT_EQ(f.Find("number")->number(), 10);
  EXPECT_EQ(f.Find("status")->string(), "WARN");
  EXPECT_EQ(v.Find("cause")->Find("summary")->string(), "s");
  r.findings.clear();
  EXPECT_TRUE(RenderJson(r).Find("cause")->is_null());
}

}  // namespace
}  // namespace loom::doctor
