// Tests for the NCCL_SOCKET_IFNAME grammar and the socket interface choice,
// over synthetic interface lists.
#include "topology/socket_ifname.h"

#include <gtest/gtest.h>
#include <netinet/in.h>

#include <initializer_list>

#include "topology/inet_address.h"

namespace loom {
namespace {

bool M(std::string_view spec, std::string_view name, int port = -1) {
  return SocketIfnameFilter::Parse(spec).Matches(name, port);
}

// ---- The filter ----

TEST(SocketIfnameFilterTest, PrefixList) {
  EXPECT_TRUE(M("eth", "eth0"));
  EXPECT_TRUE(M("eth", "eth"));
  EXPECT_TRUE(M("eth", "eth0.2093"));
  EXPECT_FALSE(M("eth", "et"));
  EXPECT_FALSE(M("eth", "veth0")) << "prefix, not substring";
  EXPECT_FALSE(M("eth", ""));
  EXPECT_FALSE(M("eth", "ETH0")) << "case-sensitive";
  EXPECT_TRUE(M("eth,ib", "ib1"));
  EXPECT_TRUE(M("eth,ib", "eth1"));
  EXPECT_FALSE(M("eth,ib", "enp1s0"));
}

TEST(SocketIfnameFilterTest, Exclude) {
  EXPECT_FALSE(M("^docker,lo", "docker0"));
  EXPECT_FALSE(M("^docker,lo", "lo"));
  EXPECT_FALSE(M("^docker,lo", "local0")) << "a prefix excludes every name it starts";
  EXPECT_TRUE(M("^docker,lo", "eth0"));
  EXPECT_TRUE(M("^docker,lo", "veth1234"));
  EXPECT_TRUE(M("^docker,lo", ""));
}

TEST(SocketIfnameFilterTest, Exact) {
  EXPECT_TRUE(M("=eth0", "eth0"));
  EXPECT_FALSE(M("=eth0", "eth01"));
  EXPECT_FALSE(M("=eth0", "eth"));
  EXPECT_FALSE(M("=eth0", "eth0.2093"));
  EXPECT_TRUE(M("=eth0,ib0", "ib0"));
  EXPECT_FALSE(M("=eth0,ib0", "ib01"));
}

TEST(SocketIfnameFilterTest, ExactExclude) {
  EXPECT_FALSE(M("^=eth0", "eth0"));
  EXPECT_TRUE(M("^=eth0", "eth0.2093"));
  EXPECT_TRUE(M("^=eth0", "eth1"));
  EXPECT_TRUE(M("^=eth0", "eth"));
  EXPECT_FALSE(M("^=eth0,lo", "lo"));
  EXPECT_TRUE(M("^=eth0,lo", "lo0"));
}

TEST(SocketIfnameFilterTest, BondVlan) {
  // FAILURE_MODES row 1: a prefix also picks the VLAN on top of the bond.
  EXPECT_TRUE(M("bond0", "bond0"));
  EXPECT_TRUE(M("bond0", "bond0.2093"));
  EXPECT_TRUE(M("=bond0", "bond0"));
  EXPECT_FALSE(M("=bond0", "bond0.2093"));
  EXPECT_FALSE(M("=bond0.2093", "bond0"));
  EXPECT_TRUE(M("=bond0.2093", "bond0.2093"));
  EXPECT_FALSE(M("^=bond0", "bond0"));
  EXPECT_TRUE(M("^=bond0", "bond0.2093"));
  EXPECT_FALSE(M("^bond0", "bond0"));
  EXPECT_FALSE(M("^bond0", "bond0.2093"));
}

TEST(SocketIfnameFilterTest, EmptyLists) {
  // NCCL's matchIfList: an empty list selects everything, so "^" selects nothing.
  for (const char* spec : {"", "=", ",", ",,,", "=,"}) {
    EXPECT_TRUE(M(spec, "eth0")) << spec;
    EXPECT_TRUE(SocketIfnameFilter::Parse(spec).entries().empty()) << spec;
  }
  for (const char* spec : {"^", "^=", "^,,"}) {
    EXPECT_FALSE(M(spec, "eth0")) << spec;
    EXPECT_FALSE(M(spec, "lo")) << spec;
  }
  EXPECT_TRUE(SocketIfnameFilter().Matches("anything"));
  EXPECT_EQ(SocketIfnameFilter().Describe(), "every name");
  EXPECT_TRUE(SocketIfnameFilter().Warnings().empty());
}

TEST(SocketIfnameFilterTest, EmptyEntriesAreDropped) {
  const SocketIfnameFilter f = SocketIfnameFilter::Parse(",,eth,,ib,");
  ASSERT_EQ(f.entries().size(), 2u);
  EXPECT_EQ(f.entries()[0].prefix, "eth");
  EXPECT_EQ(f.entries()[1].prefix, "ib");
  EXPECT_FALSE(f.exclude());
  EXPECT_FALSE(f.exact());
  EXPECT_EQ(f.spec(), ",,eth,,ib,");
}

TEST(SocketIfnameFilterTest, SpacesAreNotTrimmedLikeNccl) {
  const SocketIfnameFilter f = SocketIfnameFilter::Parse("eth0, ib0");
  ASSERT_EQ(f.entries().size(), 2u);
  EXPECT_EQ(f.entries()[1].prefix, " ib0");
  EXPECT_TRUE(f.Matches("eth0"));
  EXPECT_FALSE(f.Matches("ib0"));
  ASSERT_EQ(f.Warnings().size(), 1u);
  EXPECT_NE(f.Warnings()[0].find("\" ib0\""), std::string::npos) << f.Warnings()[0];
  EXPECT_NE(f.Warnings()[0].find("whitespace"), std::string::npos);
  EXPECT_FALSE(M(" eth0", "eth0"));
  EXPECT_FALSE(M("eth0 ", "eth0"));
  EXPECT_TRUE(M("eth0 ", "eth0 "));
}

TEST(SocketIfnameFilterTest, CaretAfterEqualsIsLiteral) {
  const SocketIfnameFilter f = SocketIfnameFilter::Parse("=^eth0");
  EXPECT_TRUE(f.exact());
  EXPECT_FALSE(f.exclude());
  ASSERT_EQ(f.entries().size(), 1u);
  EXPECT_EQ(f.entries()[0].prefix, "^eth0");
  EXPECT_FALSE(f.Matches("eth0"));
  EXPECT_FALSE(f.Matches("eth1"));
  ASSERT_EQ(f.Warnings().size(), 1u);
  EXPECT_NE(f.Warnings()[0].find("^="), std::string::npos);
  // Only one leading '^' is special.
  EXPECT_EQ(SocketIfnameFilter::Parse("^^eth").entries()[0].prefix, "^eth");
}

TEST(SocketIfnameFilterTest, Ports) {
  const SocketIfnameFilter f = SocketIfnameFilter::Parse("mlx5_0:1,mlx5_1");
  ASSERT_EQ(f.entries().size(), 2u);
  EXPECT_EQ(f.entries()[0].port, 1);
  EXPECT_EQ(f.entries()[1].port, -1);
  EXPECT_TRUE(f.Matches("mlx5_0"));
  EXPECT_TRUE(f.Matches("mlx5_0", 1));
  EXPECT_FALSE(f.Matches("mlx5_0", 2));
  EXPECT_TRUE(f.Matches("mlx5_1", 2));
  EXPECT_FALSE(f.Matches("mlx5_2", 1));
  EXPECT_EQ(f.Describe(), "names starting with \"mlx5_0\" port 1 or \"mlx5_1\"");

  // atoi on the text after ':', the rest up to ',' ignored; an entry with no name is dropped.
  EXPECT_EQ(SocketIfnameFilter::Parse("eth0:abc").entries()[0].port, 0);
  EXPECT_EQ(SocketIfnameFilter::Parse("eth0:1:2").entries()[0].port, 1);
  EXPECT_EQ(SocketIfnameFilter::Parse("eth0:12x,ib").entries().size(), 2u);
  EXPECT_EQ(SocketIfnameFilter::Parse("eth0:99999999999").entries()[0].port, 2147483647);
  const SocketIfnameFilter nameless = SocketIfnameFilter::Parse(":1,eth");
  ASSERT_EQ(nameless.entries().size(), 1u);
  EXPECT_EQ(nameless.entries()[0].prefix, "eth");
  // "eth0:1" in NCCL_SOCKET_IFNAME means eth0 on any query without a port.
  EXPECT_TRUE(M("eth0:1", "eth0"));
  // The text after ':' is a port, so an alias label cannot be named exactly.
  EXPECT_TRUE(M("=eth0:1", "eth0"));
  EXPECT_FALSE(M("=eth0:1", "eth0:1"));
}

TEST(SocketIfnameFilterTest, Describe) {
  EXPECT_EQ(SocketIfnameFilter::Parse("eth,ib").Describe(),
            "names starting with \"eth\" or \"ib\"");
  EXPECT_EQ(SocketIfnameFilter::Parse("^docker,lo").Describe(),
            "names not starting with \"docker\" or \"lo\"");
  EXPECT_EQ(SocketIfnameFilter::Parse("=eth0").Describe(), "names exactly \"eth0\"");
  EXPECT_EQ(SocketIfnameFilter::Parse("^=eth0").Describe(), "names other than exactly \"eth0\"");
  EXPECT_EQ(SocketIfnameFilter::Parse("^").Describe(), "no name (an empty list excluded)");
  EXPECT_EQ(SocketIfnameFilter::Parse("=").Describe(), "every name");
}

TEST(SocketIfnameFilterTest, Warnings) {
  EXPECT_TRUE(SocketIfnameFilter::Parse("eth0,ib").Warnings().empty());
  EXPECT_TRUE(SocketIfnameFilter::Parse("^=docker0").Warnings().empty());
  EXPECT_EQ(SocketIfnameFilter::Parse("abcdefghijklmnop").Warnings().size(), 1u);
  EXPECT_TRUE(SocketIfnameFilter::Parse("abcdefghijklmno").Warnings().empty())
      << "15 characters fit";
  EXPECT_NE(SocketIfnameFilter::Parse("^").Warnings().at(0).find("selects no interface"),
            std::string::npos);
  EXPECT_NE(SocketIfnameFilter::Parse(",").Warnings().at(0).find("every interface"),
            std::string::npos);
}

// ---- Interface choice ----

NetInterface If(std::string_view name, std::string_view cidr, bool up = true) {
  Result<NetInterface> r = MakeNetInterface(name, cidr);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  NetInterface i = r.ok() ? r.value() : NetInterface{};
  i.up = up;
  i.loopback = i.loopback || name == "lo";
  return i;
}

// "name address" of each chosen interface, to compare whole choices at once.
std::vector<std::string> Names(const Result<std::vector<NetInterface>>& r) {
  std::vector<std::string> out;
  if (!r.ok()) {
    out.push_back("error: " + r.status().ToString());
    return out;
  }
  for (const NetInterface& i : r.value()) out.push_back(i.name + " " + i.address);
  return out;
}

using V = std::vector<std::string>;

std::vector<NetInterface> TypicalNode() {
  return {If("lo", "127.0.0.1/8"),          If("eth0", "10.0.0.2/24"),
          If("docker0", "172.17.0.1/16"),   If("ib0", "192.168.10.2/24"),
          If("veth1a2b", "169.254.3.1/16"), If("lo", "::1/128"),
          If("eth0", "fe80::2%2/64"),       If("ib0", "fd00::2/64")};
}

TEST(SelectSocketInterfacesTest, DefaultPrefersIb) {
  EXPECT_EQ(Names(SelectSocketInterfaces(TypicalNode(), "", "", 16)), V{"ib0 192.168.10.2"});
}

TEST(SelectSocketInterfacesTest, DefaultWithoutIbTakesEverythingButDockerLoVirbr) {
  std::vector<NetInterface> all = TypicalNode();
  std::erase_if(all, [](const NetInterface& i) { return i.name == "ib0"; });
  all.push_back(If("virbr0", "192.168.122.1/24"));
  all.push_back(If("enp1s0", "10.1.0.2/24"));
  // veth is not excluded by NCCL's default: only docker, lo and virbr are.
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 16)),
            (V{"eth0 10.0.0.2", "veth1a2b 169.254.3.1", "enp1s0 10.1.0.2"}));
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 2)),
            (V{"eth0 10.0.0.2", "veth1a2b 169.254.3.1"}));
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 1)), V{"eth0 10.0.0.2"});
}

TEST(SelectSocketInterfacesTest, DefaultFallbacksDockerThenLoThenVirbr) {
  std::vector<NetInterface> all = {If("virbr0", "192.168.122.1/24"), If("lo", "127.0.0.1/8"),
                                   If("docker0", "172.17.0.1/16")};
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 16)), V{"docker0 172.17.0.1"});
  all.pop_back();
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 16)), V{"lo 127.0.0.1"});
  all.pop_back();
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 16)), V{"virbr0 192.168.122.1"});
}

TEST(SelectSocketInterfacesTest, DownInterfacesAreSkipped) {
  std::vector<NetInterface> all = {
      If("ib0", "192.168.10.2/24", /*up=*/false), If("eth0", "10.0.0.2/24"),
      If("eth1", "10.0.1.2/24", /*up=*/false), If("lo", "127.0.0.1/8")};
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 16)), V{"eth0 10.0.0.2"});
}

TEST(SelectSocketInterfacesTest, OneAddressPerInterfaceIpv4First) {
  // IPv6 listed first: the IPv4 address still wins, in the interface's first position.
  std::vector<NetInterface> all = {If("eth0", "fe80::2%2/64"), If("eth0", "fd00::2/64"),
                                   If("eth1", "fd01::2/64"), If("eth0", "10.0.0.2/24")};
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 16)), (V{"eth0 10.0.0.2", "eth1 fd01::2"}));
  // Without IPv4, the global IPv6 address beats the link-local one.
  all.pop_back();
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 16)), (V{"eth0 fd00::2", "eth1 fd01::2"}));
}

TEST(SelectSocketInterfacesTest, LinkLocalOnlyInterfacesAreLastResort) {
  std::vector<NetInterface> all = {If("eth0", "fe80::2%2/64"), If("eth1", "10.0.1.2/24")};
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 16)), V{"eth1 10.0.1.2"});
  // Nothing better in the pass: the link-local address is used.
  all.pop_back();
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 16)), V{"eth0 fe80::2%eth0"});
  // A later pass is not consulted while an earlier one found a link-local address.
  all.push_back(If("lo", "127.0.0.1/8"));
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 16)), V{"eth0 fe80::2%eth0"});
}

TEST(SelectSocketInterfacesTest, FamilyRestriction) {
  const std::vector<NetInterface> all = TypicalNode();
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "AF_INET6", 16)), V{"ib0 fd00::2"});
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "AF_INET", 16)), V{"ib0 192.168.10.2"});
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "=eth0", "AF_INET6", 16)), V{"eth0 fe80::2%eth0"});

  // ib0 has only IPv6: with AF_INET the ib pass finds nothing and falls through.
  std::vector<NetInterface> v6ib = {If("ib0", "fd00::2/64"), If("eth0", "10.0.0.2/24")};
  EXPECT_EQ(Names(SelectSocketInterfaces(v6ib, "", "AF_INET", 16)), V{"eth0 10.0.0.2"});
  EXPECT_EQ(Names(SelectSocketInterfaces(v6ib, "", "", 16)), V{"ib0 fd00::2"});
}

TEST(SelectSocketInterfacesTest, Ipv6LoopbackIsNeverUsed) {
  const std::vector<NetInterface> all = {If("lo", "::1/128"), If("lo", "127.0.0.1/8")};
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 16)), V{"lo 127.0.0.1"});
  Result<std::vector<NetInterface>> r = SelectSocketInterfaces(all, "", "AF_INET6", 16);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidUsage);
  EXPECT_NE(r.status().message().find(
                "lo (up, loopback; ::1/128 [::1 is never used], 127.0.0.1/8 [excluded by "
                "NCCL_SOCKET_FAMILY]): no usable address"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("NCCL_SOCKET_FAMILY=AF_INET6"), std::string::npos);
}

TEST(SelectSocketInterfacesTest, UserFilter) {
  std::vector<NetInterface> all = TypicalNode();
  all.push_back(If("eth0.2093", "10.20.93.2/24"));
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "eth", "", 16)),
            (V{"eth0 10.0.0.2", "eth0.2093 10.20.93.2"}));
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "=eth0", "", 16)), V{"eth0 10.0.0.2"});
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "=eth0.2093", "", 16)), V{"eth0.2093 10.20.93.2"});
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "^ib,eth,veth", "", 16)),
            (V{"lo 127.0.0.1", "docker0 172.17.0.1"}));
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "docker,eth0", "", 16)),
            (V{"eth0 10.0.0.2", "docker0 172.17.0.1", "eth0.2093 10.20.93.2"}));
  // The user's choice is the only rule: lo is taken when asked for, ib is not preferred.
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "lo", "", 16)), V{"lo 127.0.0.1"});
}

TEST(SelectSocketInterfacesTest, OneCharacterSpecIsIgnoredLikeNccl) {
  for (const char* spec : {"", "e", "^", "="}) {
    EXPECT_EQ(Names(SelectSocketInterfaces(TypicalNode(), spec, "", 16)), V{"ib0 192.168.10.2"})
        << spec;
  }
  // Two characters are a real filter, even when they select nothing.
  EXPECT_FALSE(SelectSocketInterfaces(TypicalNode(), "^=", "", 16).ok());
}

TEST(SelectSocketInterfacesTest, NoMatchErrorNamesFilterInterfacesAndFix) {
  std::vector<NetInterface> all = {If("lo", "127.0.0.1/8"), If("enp1s0", "10.0.0.2/24"),
                                   If("enp2s0", "10.0.1.2/24", /*up=*/false)};
  Result<std::vector<NetInterface>> r = SelectSocketInterfaces(all, "eth0, ib0", "", 16);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidUsage);
  const std::string& m = r.status().message();
  for (const char* want :
       {"NCCL_SOCKET_IFNAME=\"eth0, ib0\"", "names starting with \"eth0\" or \" ib0\"",
        "whitespace", "lo (up, loopback; 127.0.0.1/8): name not selected",
        "enp1s0 (up; 10.0.0.2/24): name not selected",
        "enp2s0 (down; 10.0.1.2/24): down (no carrier)", "usable names: lo, enp1s0",
        "set NCCL_SOCKET_IFNAME", "=eth0"}) {
    EXPECT_NE(m.find(want), std::string::npos) << "missing '" << want << "' in: " << m;
  }
}

TEST(SelectSocketInterfacesTest, NothingUpIsASystemError) {
  Result<std::vector<NetInterface>> none = SelectSocketInterfaces({}, "", "", 16);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kSystemError);
  EXPECT_NE(none.status().message().find("no interface that is up"), std::string::npos)
      << none.status().message();

  Result<std::vector<NetInterface>> down =
      SelectSocketInterfaces({If("eth0", "10.0.0.2/24", false)}, "", "", 16);
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), Code::kSystemError);
  EXPECT_NE(down.status().message().find(
                "eth0 (down; 10.0.0.2/24): down (no carrier); usable names: none"),
            std::string::npos)
      << down.status().message();
  EXPECT_NE(down.status().message().find("default order"), std::string::npos);
}

TEST(SelectSocketInterfacesTest, BadArguments) {
  Result<std::vector<NetInterface>> fam = SelectSocketInterfaces(TypicalNode(), "", "ipv4", 16);
  ASSERT_FALSE(fam.ok());
  EXPECT_EQ(fam.status().code(), Code::kInvalidArgument);
  EXPECT_NE(fam.status().message().find("\"ipv4\""), std::string::npos);
  EXPECT_FALSE(SelectSocketInterfaces(TypicalNode(), "", "af_inet", 16).ok())
      << "case matters, as in NCCL";
  EXPECT_EQ(SelectSocketInterfaces(TypicalNode(), "", "", 0).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(SelectSocketInterfaces(TypicalNode(), "", "", -1).status().code(),
            Code::kInvalidArgument);
}

TEST(SelectSocketInterfacesTest, ParseSocketFamily) {
  EXPECT_EQ(ParseSocketFamily("").value(), AF_UNSPEC);
  EXPECT_EQ(ParseSocketFamily("AF_INET").value(), AF_INET);
  EXPECT_EQ(ParseSocketFamily("AF_INET6").value(), AF_INET6);
  for (const char* bad : {"AF_INET ", "inet", "AF_UNIX", "4"})
    EXPECT_FALSE(ParseSocketFamily(bad).ok()) << bad;
}

TEST(SelectSocketInterfacesTest, RootHintPicksTheInterfaceOnItsSubnet) {
  const std::vector<NetInterface> all = {If("lo", "127.0.0.1/8"), If("eth0", "10.0.0.2/24"),
                                         If("eth1", "192.168.1.2/24")};
  const sockaddr_storage root = ParseHostPort("192.168.1.9:29500").value();
  const auto* hint = reinterpret_cast<const sockaddr*>(&root);
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 16, hint)), V{"eth1 192.168.1.2"});
  // ib still comes first, and a user filter overrides the hint.
  std::vector<NetInterface> with_ib = all;
  with_ib.push_back(If("ib0", "10.10.0.2/16"));
  EXPECT_EQ(Names(SelectSocketInterfaces(with_ib, "", "", 16, hint)), V{"ib0 10.10.0.2"});
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "=eth0", "", 16, hint)), V{"eth0 10.0.0.2"});
  // A hint on no local subnet, or of an excluded family, changes nothing.
  const sockaddr_storage far = ParseHostPort("172.16.0.1:1").value();
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "", 16, reinterpret_cast<const sockaddr*>(&far))),
            (V{"eth0 10.0.0.2", "eth1 192.168.1.2"}));
  const sockaddr_storage loop = ParseHostPort("127.0.0.1:1").value();
  EXPECT_EQ(
      Names(SelectSocketInterfaces(all, "", "", 16, reinterpret_cast<const sockaddr*>(&loop))),
      V{"lo 127.0.0.1"});
  EXPECT_EQ(Names(SelectSocketInterfaces(all, "", "AF_INET6", 16, hint)).at(0).rfind("error", 0),
            0u);
}

TEST(InterfaceForRemoteTest, Ipv4) {
  const std::vector<NetInterface> all = {If("lo", "127.0.0.1/8"), If("eth0", "10.0.0.2/24"),
                                         If("eth1", "10.0.0.3/16")};
  auto pick = [&](std::string_view ip) -> std::string {
    const sockaddr_storage ss = ParseIpAddress(ip).value();
    std::optional<NetInterface> i = InterfaceForRemote(all, reinterpret_cast<const sockaddr*>(&ss));
    return i ? i->name : "none";
  };
  EXPECT_EQ(pick("127.0.0.1"), "lo");
  EXPECT_EQ(pick("127.0.1.1"), "lo");
  EXPECT_EQ(pick("10.0.0.77"), "eth0") << "first match in list order";
  EXPECT_EQ(pick("10.0.5.5"), "eth1");
  EXPECT_EQ(pick("192.168.0.1"), "none");
  EXPECT_EQ(pick("::1"), "none");
  EXPECT_FALSE(InterfaceForRemote(all, nullptr).has_value());
}

TEST(InterfaceForRemoteTest, Ipv6AndDownInterfaces) {
  const std::vector<NetInterface> all = {If("eth0", "10.0.0.2/24", /*up=*/false),
                                         If("eth0", "fd00::2/64", false), If("eth1", "10.0.0.3/24"),
                                         If("eth1", "fd00::3/64"), If("eth1", "fe80::3%5/64")};
  auto pick = [&](std::string_view ip) -> std::string {
    const sockaddr_storage ss = ParseIpAddress(ip).value();
    std::optional<NetInterface> i = InterfaceForRemote(all, reinterpret_cast<const sockaddr*>(&ss));
    return i ? i->name + " " + i->address : "none";
  };
  EXPECT_EQ(pick("10.0.0.9"), "eth1 10.0.0.3") << "eth0 is down";
  EXPECT_EQ(pick("fd00::9"), "eth1 fd00::3");
  EXPECT_EQ(pick("fd00:1::9"), "none");
  EXPECT_EQ(pick("fe80::9%5"), "eth1 fe80::3%eth1");
  EXPECT_EQ(pick("fe80::9%6"), "none") << "another link";
  EXPECT_EQ(pick("fe80::9"), "none") << "no scope";
}

}  // namespace
}  // namespace loom
