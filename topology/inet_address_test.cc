// Tests for address parsing, resolution, printing and classification.
#include "topology/inet_address.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>

namespace loom {
namespace {

const sockaddr* Sa(const sockaddr_storage& ss) {
  return reinterpret_cast<const sockaddr*>(&ss);
}

sockaddr_storage Ip(std::string_view text) {
  Result<sockaddr_storage> r = ParseIpAddress(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().ToString();
  return r.ok() ? r.value() : sockaddr_storage{};
}

// The error message of a failed parse, or "" (and a test failure) on success.
std::string ParseError(std::string_view text) {
  Result<sockaddr_storage> r = ParseHostPort(text);
  EXPECT_FALSE(r.ok()) << text << " parsed as "
                       << FormatHostPort(Sa(r.ok() ? r.value() : sockaddr_storage{}));
  return r.status().message();
}

TEST(InetAddressTest, ParseHostPortIpv4) {
  Result<sockaddr_storage> r = ParseHostPort("10.1.2.3:29500");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->ss_family, AF_INET);
  EXPECT_EQ(FormatAddress(Sa(*r)), "10.1.2.3");
  EXPECT_EQ(SockaddrPort(Sa(*r)), 29500);
  EXPECT_EQ(SockaddrLen(Sa(*r)), sizeof(sockaddr_in));
  EXPECT_EQ(FormatHostPort(Sa(*r)), "10.1.2.3:29500");
}

TEST(InetAddressTest, ParseHostPortPortLimits) {
  Result<sockaddr_storage> zero = ParseHostPort("1.2.3.4:0");
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(SockaddrPort(Sa(*zero)), 0);
  Result<sockaddr_storage> max = ParseHostPort("1.2.3.4:65535");
  ASSERT_TRUE(max.ok());
  EXPECT_EQ(SockaddrPort(Sa(*max)), 65535);
  Result<sockaddr_storage> padded = ParseHostPort("1.2.3.4:00080");
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(SockaddrPort(Sa(*padded)), 80);
}

TEST(InetAddressTest, ParseHostPortIpv6Bracketed) {
  Result<sockaddr_storage> r = ParseHostPort("[::1]:8080");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->ss_family, AF_INET6);
  EXPECT_EQ(SockaddrLen(Sa(*r)), sizeof(sockaddr_in6));
  EXPECT_EQ(SockaddrPort(Sa(*r)), 8080);
  EXPECT_EQ(FormatHostPort(Sa(*r)), "[::1]:8080");

  Result<sockaddr_storage> global = ParseHostPort("[fd00::2]:1");
  ASSERT_TRUE(global.ok());
  EXPECT_EQ(FormatAddress(Sa(*global)), "fd00::2");
  EXPECT_EQ(reinterpret_cast<const sockaddr_in6*>(&*global)->sin6_scope_id, 0u);
}

TEST(InetAddressTest, ParseHostPortIpv6Scope) {
  Result<sockaddr_storage> by_name = ParseHostPort("[fe80::1%lo]:99");
  ASSERT_TRUE(by_name.ok()) << by_name.status().ToString();
  EXPECT_EQ(reinterpret_cast<const sockaddr_in6*>(&*by_name)->sin6_scope_id, if_nametoindex("lo"));
  EXPECT_EQ(FormatHostPort(Sa(*by_name)), "[fe80::1%lo]:99");

  Result<sockaddr_storage> by_number = ParseHostPort("[fe80::1%4000000]:99");
  ASSERT_TRUE(by_number.ok());
  EXPECT_EQ(reinterpret_cast<const sockaddr_in6*>(&*by_number)->sin6_scope_id, 4000000u);
  EXPECT_EQ(FormatAddress(Sa(*by_number)), "fe80::1%4000000")
      << "an index naming no interface prints as a number";
}

TEST(InetAddressTest, ParseHostPortResolvesNamesPreferringIpv4) {
  Result<sockaddr_storage> r = ParseHostPort("localhost:4242");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->ss_family, AF_INET) << FormatAddress(Sa(*r));
  EXPECT_EQ(SockaddrPort(Sa(*r)), 4242);
  // The FAILURE_MODES row 2 check: a name that resolves to loopback is flagged.
  EXPECT_TRUE(IsLoopbackAddress(Sa(*r)));
}

TEST(InetAddressTest, ParseHostPortRejectsBadPorts) {
  for (const char* text :
       {"node0", "node0:", "node0:abc", "node0:65536", "node0:-1", "node0:123456", "node0:8o",
        "node0: 80", "node0:+80", "1.2.3.4:99999", "node0:99999999999", "node0:0x50"}) {
    const std::string m = ParseError(text);
    EXPECT_NE(m.find(text), std::string::npos) << "message quotes the input: " << m;
  }
  EXPECT_NE(ParseError("node0:abc").find("port 'abc'"), std::string::npos);
  EXPECT_NE(ParseError("node0").find("no port"), std::string::npos);
}

TEST(InetAddressTest, ParseHostPortRejectsMalformedHosts) {
  EXPECT_NE(ParseError(":80").find("empty host"), std::string::npos);
  EXPECT_NE(ParseError("[]:80").find("empty host"), std::string::npos);
  EXPECT_NE(ParseError("::1:80").find("brackets"), std::string::npos);
  EXPECT_NE(ParseError("fe80::1:80").find("brackets"), std::string::npos);
  EXPECT_NE(ParseError("[::1]80").find("[IPv6 address]:port"), std::string::npos);
  EXPECT_NE(ParseError("[::1]").find("[IPv6 address]:port"), std::string::npos);
  EXPECT_NE(ParseError("[::1:80").find("[IPv6 address]:port"), std::string::npos);
  EXPECT_NE(ParseError("[10.0.0.1]:80").find("IPv6"), std::string::npos);
  EXPECT_NE(ParseError("[node0]:80").find("not a numeric"), std::string::npos);
  EXPECT_NE(ParseError("[fe80::1%no-such-if9]:80").find("no-such-if9"), std::string::npos);
  EXPECT_FALSE(ParseHostPort("").ok());
}

TEST(InetAddressTest, UnresolvableNameIsNamedInTheError) {
  Result<sockaddr_storage> r = ParseHostPort("no-such-host.invalid:29500");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no-such-host.invalid"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("could not resolve"), std::string::npos);
  EXPECT_NE(r.status().message().find("/etc/hosts"), std::string::npos) << "gives a hint";
}

TEST(InetAddressTest, ResolveHostTakesNumericAddressesAsIs) {
  Result<sockaddr_storage> r = ResolveHost("fd00::7", 5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(FormatHostPort(Sa(*r)), "[fd00::7]:5");
  EXPECT_FALSE(ResolveHost("", 5).ok());
}

TEST(InetAddressTest, ParseIpAddressRejectsBadInput) {
  for (const char* text : {"", "1.2.3", "1.2.3.4.5", "256.1.1.1", "10.0.0.1%lo", "fe80::1%", "::g",
                           "fe80::1%99999999999", "fe80::1%no-such-if9", "localhost"}) {
    EXPECT_FALSE(ParseIpAddress(text).ok()) << text;
  }
}

TEST(InetAddressTest, FormatOfUnsupportedFamilyIsEmpty) {
  sockaddr_storage ss{};
  ss.ss_family = AF_UNIX;
  EXPECT_EQ(FormatAddress(Sa(ss)), "");
  EXPECT_EQ(FormatHostPort(Sa(ss)), "");
  EXPECT_EQ(SockaddrLen(Sa(ss)), 0u);
  EXPECT_EQ(SockaddrLen(nullptr), 0u);
  EXPECT_EQ(SockaddrPort(nullptr), 0);
  EXPECT_FALSE(IsLoopbackAddress(Sa(ss)));
  EXPECT_FALSE(IsLoopbackAddress(nullptr));
}

TEST(InetAddressTest, Loopback) {
  for (const char* a : {"127.0.0.1", "127.0.1.1", "127.255.255.254", "::1", "::ffff:127.0.1.1"}) {
    EXPECT_TRUE(IsLoopbackAddress(Sa(Ip(a)))) << a;
  }
  for (const char* a :
       {"10.0.0.1", "126.255.255.255", "128.0.0.1", "::", "::2", "::ffff:10.0.0.1", "fe80::1"}) {
    EXPECT_FALSE(IsLoopbackAddress(Sa(Ip(a)))) << a;
  }
}

TEST(InetAddressTest, LinkLocal) {
  for (const char* a : {"169.254.0.1", "169.254.255.255", "fe80::1", "febf::1"}) {
    EXPECT_TRUE(IsLinkLocalAddress(Sa(Ip(a)))) << a;
  }
  for (const char* a : {"169.253.0.1", "10.0.0.1", "fec0::1", "fd00::1", "::1"}) {
    EXPECT_FALSE(IsLinkLocalAddress(Sa(Ip(a)))) << a;
  }
}

TEST(InetAddressTest, SubnetIpv4) {
  const sockaddr_storage local = Ip("10.0.0.2");
  EXPECT_TRUE(InSameSubnet(Sa(local), 24, Sa(Ip("10.0.0.255"))));
  EXPECT_FALSE(InSameSubnet(Sa(local), 24, Sa(Ip("10.0.1.2"))));
  EXPECT_TRUE(InSameSubnet(Sa(local), 23, Sa(Ip("10.0.1.2"))));
  EXPECT_FALSE(InSameSubnet(Sa(local), 25, Sa(Ip("10.0.0.130"))));
  EXPECT_TRUE(InSameSubnet(Sa(local), 25, Sa(Ip("10.0.0.127"))));
  EXPECT_TRUE(InSameSubnet(Sa(local), 32, Sa(Ip("10.0.0.2"))));
  EXPECT_FALSE(InSameSubnet(Sa(local), 32, Sa(Ip("10.0.0.3"))));
  EXPECT_TRUE(InSameSubnet(Sa(local), 0, Sa(Ip("192.168.9.9"))));
  EXPECT_TRUE(InSameSubnet(Sa(local), -5, Sa(Ip("192.168.9.9")))) << "clamped to 0";
  EXPECT_FALSE(InSameSubnet(Sa(local), 99, Sa(Ip("10.0.0.3")))) << "clamped to 32";
  EXPECT_FALSE(InSameSubnet(Sa(local), 0, Sa(Ip("::ffff:10.0.0.2")))) << "families differ";
  EXPECT_FALSE(InSameSubnet(nullptr, 0, Sa(local)));
  EXPECT_TRUE(InSameSubnet(Sa(Ip("127.0.0.1")), 8, Sa(Ip("127.0.1.1"))));
}

TEST(InetAddressTest, SubnetIpv6) {
  const sockaddr_storage local = Ip("fd00::2");
  EXPECT_TRUE(InSameSubnet(Sa(local), 64, Sa(Ip("fd00::ffff:1"))));
  EXPECT_FALSE(InSameSubnet(Sa(local), 64, Sa(Ip("fd00:0:0:1::2"))));
  EXPECT_TRUE(InSameSubnet(Sa(local), 127, Sa(Ip("fd00::3"))));
  EXPECT_FALSE(InSameSubnet(Sa(local), 127, Sa(Ip("fd00::4"))));
  EXPECT_FALSE(InSameSubnet(Sa(local), 200, Sa(Ip("fd00::3")))) << "clamped to 128";
  EXPECT_FALSE(InSameSubnet(Sa(local), 0, Sa(Ip("10.0.0.2"))));
  // Link-local: the same prefix on two links is two subnets.
  EXPECT_TRUE(InSameSubnet(Sa(Ip("fe80::1%7")), 64, Sa(Ip("fe80::2%7"))));
  EXPECT_FALSE(InSameSubnet(Sa(Ip("fe80::1%7")), 64, Sa(Ip("fe80::2%8"))));
  EXPECT_FALSE(InSameSubnet(Sa(Ip("fe80::1%7")), 64, Sa(Ip("fe80::2"))));
}

}  // namespace
}  // namespace loom
