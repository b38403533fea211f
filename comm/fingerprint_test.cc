// Fingerprints: encoding round trip and a diff that names ranks and hosts.
#include "comm/fingerprint.h"

#include <gtest/gtest.h>

namespace loom {
namespace {

TEST(Fingerprint, RoundTrips) {
  Fingerprint fp = LocalFingerprint();
  EXPECT_EQ(DecodeFingerprint(EncodeFingerprint(fp)), fp);
  bool has_version = false;
  for (auto& [k, v] : fp) has_version |= k == "version";
  EXPECT_TRUE(has_version);
}

TEST(Fingerprint, EqualIsOk) {
  Fingerprint a = {{"version", "1"}, {"NCCL_BUFFSIZE", "(unset)"}};
  EXPECT_TRUE(CompareFingerprints({a, a, a}, {"h0", "h1", "h2"}).ok());
}

TEST(Fingerprint, DifferenceNamesRanksHostsAndValues) {
  Fingerprint a = {{"version", "0.1.0"}, {"NCCL_BUFFSIZE", "(unset)"}};
  Fingerprint b = {{"version", "0.1.0"}, {"NCCL_BUFFSIZE", "8388608"}};
  Status s = CompareFingerprints({a, a, b}, {"node0", "node0", "node1"});
  ASSERT_EQ(s.code(), Code::kInvalidUsage);
  const std::string& m = s.message();
  EXPECT_NE(m.find("NCCL_BUFFSIZE"), std::string::npos) << m;
  EXPECT_NE(m.find("'8388608' on rank 2(node1)"), std::string::npos) << m;
  EXPECT_NE(m.find("ranks 0(node0),1(node0)"), std::string::npos) << m;
  EXPECT_EQ(m.find("\n  version:"), std::string::npos) << m;  // equal keys are not listed
}

TEST(Fingerprint, MissingKeyIsADifference) {
  Fingerprint a = {{"version", "1"}, {"extra", "x"}};
  Fingerprint b = {{"version", "1"}};
  Status s = CompareFingerprints({a, b}, {"h0", "h1"});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace loom
