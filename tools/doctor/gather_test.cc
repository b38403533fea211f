// Hostfile formats, the environment filter, limits and live facts.
#include <gtest/gtest.h>

#include "tools/doctor/gather.h"

namespace loom::doctor {
namespace {

TEST(DoctorHostfile, LauncherFormats) {
  auto h = ParseHostfile(
      "# cluster\n"
      "node1 slots=8\n"
      "node2:8\n"
      "  10.0.0.3   # by address\n"
      "\n"
      "[fd00::4]:2\n"
      "fd00::5\n"
      "node1 slots=8\n");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h.value(), (std::vector<std::string>{"node1", "node2", "10.0.0.3", "fd00::4", "fd00::5"}));
  EXPECT_TRUE(ParseHostfile("").value().empty());
  EXPECT_EQ(ParseHostfile("a\r\nb").value(), (std::vector<std::string>{"a", "b"}));
}

TEST(DoctorHostfile, ErrorsNameTheLine) {
  auto h = ParseHostfile("node1\nslots=4\n");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("line 2"), std::string::npos);
  EXPECT_FALSE(ParseHostfile("[fd00::1\n").ok());
  EXPECT_FALSE(ParseHostfile(":8\n").ok());
}

TEST(DoctorGather, RelevantEnvKeepsOnlyOurPrefixes) {
  char a[] = "NCCL_DEBUG=INFO", b[] = "PATH=/bin", c[] = "LOOM_X=", d[] = "UCX_TLS=tcp", e[] = "LOOM_Y=1";
  char* env[] = {a, b, c, d, e, nullptr};
  auto m = RelevantEnv(env);
  EXPECT_EQ(m, (std::map<std::string, std::string>{{"NCCL_DEBUG", "INFO"}, {"UCX_TLS", "tcp"}, {"LOOM_Y", "1"}}));
  EXPECT_TRUE(RelevantEnv(nullptr).empty());
}

TEST(DoctorGather, ResolveNumericAndUnknown) {
  Resolution r = ResolveName("127.0.0.1");
  ASSERT_EQ(r.addresses.size(), 1u);
  EXPECT_EQ(r.addresses[0], "127.0.0.1");
  r = ResolveName("no-such-host.invalid");
  EXPECT_TRUE(r.addresses.empty());
  EXPECT_FALSE(r.error.empty());
}

TEST(DoctorGather, LimitsAndLiveFacts) {
  Limits l = ReadLimits();
  EXPECT_NE(l.nofile, -1);
  EXPECT_NE(l.memlock_bytes, -1);
  EXPECT_EQ(ReadLimits("/no/such/dir").shm_bytes, -1);
  setenv("LOOM_HOSTID", "doctor-test-host", 1);
  HostFacts f = GatherLocalFacts({3, "127.0.0.1:29400", {"localhost"}, 29401});
  unsetenv("LOOM_HOSTID");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.label, "doctor-test-host");
  EXPECT_EQ(f.probe_port, 29401);
  EXPECT_FALSE(f.interfaces.empty());
  EXPECT_FALSE(f.fingerprint.empty());
  ASSERT_EQ(f.resolutions.size(), 1u);  // a numeric root adds nothing to resolve
  EXPECT_EQ(f.resolutions[0].name, "localhost");
  EXPECT_TRUE(f.topology.has_value());
}

}  // namespace
}  // namespace loom::doctor
