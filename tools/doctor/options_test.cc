// `loom doctor` flags and rates.
#include <gtest/gtest.h>

#include <vector>

#include "tools/doctor/options.h"

namespace loom::doctor {
namespace {

Result<DoctorOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "doctor");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return ParseDoctorArgs(static_cast<int>(args.size()), argv.data());
}

TEST(DoctorOptions, Rates) {
  EXPECT_DOUBLE_EQ(ParseRate("100gbit").value(), 100);
  EXPECT_DOUBLE_EQ(ParseRate("800mbit").value(), 0.8);
  EXPECT_DOUBLE_EQ(ParseRate("25G").value(), 25);
  EXPECT_DOUBLE_EQ(ParseRate("2.5").value(), 2.5);
  EXPECT_DOUBLE_EQ(ParseRate("1.6Tbps").value(), 1600);
  for (const char* bad : {"", "fast", "0gbit", "-1", "10kbit", "gbit"}) EXPECT_FALSE(ParseRate(bad).ok()) << bad;
}

TEST(DoctorOptions, Flags) {
  auto o = Parse({"--hosts", "hf", "--json", "--expect", "1gbit", "--probe-port", "30001", "--timeout-ms", "500",
                  "--wait", "5", "--stream-seconds", "0"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->hostfile, "hf");
  EXPECT_TRUE(o->json);
  EXPECT_DOUBLE_EQ(o->expect_gbps, 1);
  EXPECT_EQ(o->probe_port, 30001);
  EXPECT_EQ(o->timeout_ms, 500);
  EXPECT_DOUBLE_EQ(o->wait_s, 5);
  EXPECT_DOUBLE_EQ(o->stream_seconds, 0);
  EXPECT_EQ(Parse({}).value().timeout_ms, 2000);
}

TEST(DoctorOptions, ErrorsNameTheOption) {
  EXPECT_NE(Parse({"--bogus"}).status().message().find("--bogus"), std::string::npos);
  EXPECT_NE(Parse({"--hosts"}).status().message().find("--hosts needs a value"), std::string::npos);
  EXPECT_NE(Parse({"--probe-port", "70000"}).status().message().find("--probe-port"), std::string::npos);
  EXPECT_FALSE(Parse({"--expect", "x"}).ok());
}

}  // namespace
}  // namespace loom::doctor
