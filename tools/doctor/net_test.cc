// Real sockets on loopback: probe outcomes, messages, the listener and streams.
#include <gtest/gtest.h>

#include "tools/doctor/net.h"

namespace loom::doctor {
namespace {

using std::chrono::milliseconds;

TEST(DoctorNet, ProbeOkAndRefused) {
  auto lis = ProbeListener::Start(0);
  ASSERT_TRUE(lis.ok()) << lis.status().ToString();
  Probe ok = ConnectProbe("127.0.0.1", (*lis)->port(), 1000);
  EXPECT_EQ(ok.outcome, ProbeOutcome::kOk) << ok.detail;
  const int port = (*lis)->port();
  lis->reset();  // nothing listens there any more
  Probe refused = ConnectProbe("127.0.0.1", port, 1000);
  EXPECT_EQ(refused.outcome, ProbeOutcome::kRefused);
  EXPECT_EQ(refused.detail, "Connection refused");
}

TEST(DoctorNet, ProbeBadAddressIsAnError) {
  Probe p = ConnectProbe("not-an-address", 1, 100);
  EXPECT_EQ(p.outcome, ProbeOutcome::kError);
  EXPECT_FALSE(p.detail.empty());
}

TEST(DoctorNet, MessagesRoundTripAndRefuseGarbage) {
  auto lis = ListenAny(0);
  ASSERT_TRUE(lis.ok());
  Fd client;
  ASSERT_EQ(ConnectProbe("127.0.0.1", LocalPort(lis->get()), 1000, &client).outcome, ProbeOutcome::kOk);
  auto server = AcceptBefore(lis->get(), Deadline::After(milliseconds(1000)));
  ASSERT_TRUE(server.ok());
  const json::Value msg = json::Value::Object{{"type", "hello"}, {"n", 3}};
  ASSERT_TRUE(SendMessage(client.get(), msg, Deadline::After(milliseconds(1000)), "s").ok());
  auto got = RecvMessage(server->get(), Deadline::After(milliseconds(1000)), "c");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got.value(), msg);
  // Nothing more comes: a timeout, not a hang.
  auto none = RecvMessage(server->get(), Deadline::After(milliseconds(100)), "c");
  EXPECT_EQ(none.status().code(), Code::kTimeout);
  // A huge length prefix (someone else's protocol) is refused.
  const char junk[] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(write(client.get(), junk, sizeof junk - 1), static_cast<ssize_t>(sizeof junk - 1));
  auto bad = RecvMessage(server->get(), Deadline::After(milliseconds(1000)), "c");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not a loom doctor"), std::string::npos);
}

TEST(DoctorNet, AcceptTimesOut) {
  auto lis = ListenAny(0);
  ASSERT_TRUE(lis.ok());
  EXPECT_EQ(AcceptBefore(lis->get(), Deadline::After(milliseconds(50))).status().code(), Code::kTimeout);
}

TEST(DoctorNet, PortInUseIsNamed) {
  auto a = ListenAny(0);
  ASSERT_TRUE(a.ok());
  auto b = ListenAny(LocalPort(a->get()));
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("in use"), std::string::npos);
}

TEST(DoctorNet, StreamIsCountedByTheReceiver) {
  auto lis = ProbeListener::Start(0);
  ASSERT_TRUE(lis.ok());
  Stream s = StreamTo("127.0.0.1", (*lis)->port(), 0.2, int64_t{1} << 40, 1000);
  ASSERT_TRUE(s.error.empty()) << s.error;
  EXPECT_GT(s.bytes, 0);
  EXPECT_GE(s.seconds, 0.19);
  EXPECT_GT(s.Gbps(), 0.1);  // loopback
  // Bounded by bytes as well as time.
  s = StreamTo("127.0.0.1", (*lis)->port(), 10, 1 << 20, 1000);
  ASSERT_TRUE(s.error.empty()) << s.error;
  EXPECT_LE(s.bytes, (1 << 20) + (1 << 18));
  EXPECT_LT(s.seconds, 5);
  // To nobody: the error says how the connect ended.
  const int port = (*lis)->port();
  lis->reset();
  s = StreamTo("127.0.0.1", port, 0.1, 1 << 20, 500);
  EXPECT_NE(s.error.find("refused"), std::string::npos) << s.error;
}

}  // namespace
}  // namespace loom::doctor
