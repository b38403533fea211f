// --attach: the judgement over injected status answers, endpoint parsing,
// and the client against a fake rank, live and stopped with SIGSTOP.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/doctor/attach.h"
#include "tools/doctor/net.h"

namespace loom::doctor {
namespace {

using std::chrono::milliseconds;

OpRecord Op(int64_t seq, const std::string& op = "AllReduce", int64_t count = 1024, int64_t age_ms = 100) {
  return {seq, op, count, "float32", "sum", -1, -1, age_ms};
}

RankStatus Rank(int r, int size, OpRecord started, OpRecord completed) {
  RankStatus s;
  s.endpoint = "10.0.0." + std::to_string(r) + ":30000";
  s.answer = RankStatus::Answer::kAnswered;
  s.rank = r;
  s.size = size;
  s.host = "h" + std::to_string(r);
  s.pid = 1000 + r;
  s.comms = {{"c0ffee0123456789", r, size, started, completed, ""}};
  return s;
}

std::string Dump(const std::vector<Finding>& f) {
  std::string s;
  for (const Finding& x : f) s += std::string(Name(x.severity)) + " " + x.host + ": " + x.summary + "\n";
  return s;
}

TEST(DoctorAttach, AllProgressingPasses) {
  std::vector<RankStatus> r = {Rank(0, 2, Op(41), Op(41)), Rank(1, 2, Op(42), Op(41))};
  auto f = AnalyzeAttach(r, 10000);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kPass);
}

TEST(DoctorAttach, StoppedRankIsNamedWithItsEndpointAndRank) {
  std::vector<RankStatus> r = {Rank(0, 3, Op(42, "AllReduce", 1024, 60000), Op(41)),
                               Rank(2, 3, Op(42, "AllReduce", 1024, 60000), Op(41))};
  RankStatus stopped;
  stopped.endpoint = "10.0.0.1:30000";
  stopped.answer = RankStatus::Answer::kNoAnswer;
  stopped.detail = "connected, but no answer within 2000 ms";
  r.push_back(stopped);
  auto f = AnalyzeAttach(r, 10000);
  std::string all = Dump(f);
  EXPECT_NE(all.find("FAIL rank 1: comm c0ffee01: rank 1 of 3 did not answer (probably the silent 10.0.0.1:30000)"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("WARN : comm c0ffee01: rank 0,2 wait in #42 AllReduce count 1024 float32 sum for 60 s"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("FAIL 10.0.0.1:30000: accepted the connection but did not answer"), std::string::npos) << all;
}

TEST(DoctorAttach, BehindRankNamesItsLastOperation) {
  std::vector<RankStatus> r = {Rank(0, 3, Op(42, "AllReduce", 1024, 30000), Op(41)),
                               Rank(1, 3, Op(41, "AllReduce", 1024), Op(41, "AllReduce", 1024, 29000)),
                               Rank(2, 3, Op(42, "AllReduce", 1024, 30000), Op(41))};
  auto f = AnalyzeAttach(r, 10000);
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].severity, Severity::kFail);
  EXPECT_EQ(f[0].host, "rank 1");
  EXPECT_NE(f[0].summary.find("rank 1 (h1 pid 1001) last issued #41 AllReduce count 1024 float32 sum, completed, 29 s ago"),
            std::string::npos)
      << f[0].summary;
}

TEST(DoctorAttach, DifferentCollectiveAtOneSequenceNumber) {
  std::vector<RankStatus> r = {Rank(0, 3, Op(7), Op(6)), Rank(1, 3, Op(7), Op(6)),
                               Rank(2, 3, Op(7, "AllGather", 128), Op(6))};
  auto f = AnalyzeAttach(r, 10000);
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].host, "rank 2");
  EXPECT_NE(f[0].summary.find("different operations at #7: rank 0,1: #7 AllReduce count 1024 float32 sum; "
                              "rank 2: #7 AllGather count 128"),
            std::string::npos)
      << f[0].summary;
}

TEST(DoctorAttach, EveryoneStuckWithNobodyBehindIsTheTransfer) {
  std::vector<RankStatus> r = {Rank(0, 2, Op(5, "AllReduce", 1024, 700000), Op(4)),
                               Rank(1, 2, Op(5, "AllReduce", 1024, 700000), Op(4))};
  auto f = AnalyzeAttach(r, 10000);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].severity, Severity::kFail);
  EXPECT_NE(f[0].summary.find("the transfer itself is stuck"), std::string::npos);
}

TEST(DoctorAttach, Endpoints) {
  EXPECT_EQ(ParseEndpoints("a:1,b:30000+3").value(),
            (std::vector<std::string>{"a:1", "b:30000", "b:30001", "b:30002"}));
  EXPECT_EQ(ParseEndpoints("[fd00::1]:5").value(), (std::vector<std::string>{"[fd00::1]:5"}));
  for (const char* bad : {"", "a", "a:0", "a:x", "a:65535+2", ":5", "a:70000", "a:1+9223372036854775807",
                          "a:9223372036854775807+9223372036854775807"}) {
    EXPECT_FALSE(ParseEndpoints(bad).ok()) << bad;
  }
  EXPECT_EQ(ParseEndpoints("a:65535+1").value(), (std::vector<std::string>{"a:65535"}));
}

TEST(DoctorAttach, ReplyParsing) {
  RankStatus s;
  EXPECT_FALSE(ParseStatusReply(json::Value::Object{{"format", "other"}, {"version", 1}}, &s).ok());
  auto v = json::Parse(R"({"format":"loom-status","version":1,"rank":1,"size":2,"host":"h","pid":9,
    "comms":[{"id":"x","rank":5,"size":2,"async_error":"",
      "started":{"seq":1,"op":"Send","count":1,"dtype":"int8","redop":"","root":-1,"peer":0,"age_ms":0},
      "completed":{"seq":0,"op":"","count":0,"dtype":"","redop":"","root":-1,"peer":-1,"age_ms":0}}]})");
  ASSERT_TRUE(v.ok());
  EXPECT_NE(ParseStatusReply(v.value(), &s).message().find("out of range"), std::string::npos);
  // Numbers no rank sends are refused, not converted (1e300 does not fit an integer).
  for (const char* pid : {"1e300", "-1e300", "2.5"}) {
    auto odd = json::Parse(std::string(R"({"format":"loom-status","version":1,"rank":1,"size":2,)") +
                           R"("host":"h","pid":)" + pid + R"(,"comms":[]})");
    ASSERT_TRUE(odd.ok()) << pid;
    EXPECT_NE(ParseStatusReply(odd.value(), &s).message().find("'pid' is not an integer"),
              std::string::npos)
        << pid;
  }
}

// A fake rank: answers every status request with a fixed reply, forever.
void ServeStatus(int listen_fd) {
  for (;;) {
    auto c = AcceptBefore(listen_fd, Deadline::Never());
    if (!c.ok()) continue;
    if (!RecvMessage(c->get(), Deadline::After(milliseconds(1000)), "doctor").ok()) continue;
    const auto reply = json::Parse(R"({"format":"loom-status","version":1,"rank":0,"size":1,"host":"h0","pid":1,
      "comms":[{"id":"abc","rank":0,"size":1,"async_error":"",
        "started":{"seq":3,"op":"AllReduce","count":8,"dtype":"float32","redop":"sum","root":-1,"peer":-1,"age_ms":5},
        "completed":{"seq":3,"op":"AllReduce","count":8,"dtype":"float32","redop":"sum","root":-1,"peer":-1,"age_ms":1}}]})");
    (void)SendMessage(c->get(), reply.value(), Deadline::After(milliseconds(1000)), "doctor");
  }
}

TEST(DoctorAttach, LiveThenStoppedRank) {
  auto lis = ListenAny(0);
  ASSERT_TRUE(lis.ok());
  const std::string ep = "127.0.0.1:" + std::to_string(LocalPort(lis->get()));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ServeStatus(lis->get());
    _exit(0);
  }
  RankStatus live = QueryStatus(ep, 2000);
  EXPECT_EQ(live.answer, RankStatus::Answer::kAnswered) << live.detail;
  EXPECT_EQ(live.comms.size(), 1u);
  kill(child, SIGSTOP);
  RankStatus stopped = QueryStatus(ep, 300);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(stopped.answer, RankStatus::Answer::kNoAnswer) << stopped.detail;
  auto f = AnalyzeAttach({stopped}, 1000);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].summary.find("stopped (SIGSTOP"), std::string::npos);
  lis = ListenAny(0);  // the child is gone: nobody answers at the old port any more
  RankStatus dead = QueryStatus(ep, 300);
  EXPECT_EQ(dead.answer, RankStatus::Answer::kNoConnection);
}

}  // namespace
}  // namespace loom::doctor
