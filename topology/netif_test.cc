// Tests for the interface inventory: the real one on this machine, sysfs
// attribute reading on a fake tree, and synthetic interfaces.
#include "topology/netif.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "topology/inet_address.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

TEST(NetifTest, ListsLoopbackOnThisMachine) {
  Result<std::vector<NetInterface>> all = ListInterfaces();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  auto lo = std::find_if(all->begin(), all->end(), [](const NetInterface& i) {
    return i.name == "lo" && i.family == AF_INET;
  });
  ASSERT_NE(lo, all->end()) << "lo with an IPv4 address must be listed";
  EXPECT_EQ(lo->address, "127.0.0.1");
  EXPECT_TRUE(lo->loopback);
  EXPECT_TRUE(lo->up);
  EXPECT_EQ(lo->prefix_len, 8);
  EXPECT_TRUE(lo->is_virtual);
  EXPECT_EQ(lo->speed_mbps, -1) << "lo has no link speed";
  EXPECT_GT(lo->mtu, 0);
  EXPECT_EQ(lo->addr_len, sizeof(sockaddr_in));
  EXPECT_TRUE(IsLoopbackAddress(lo->sockaddr_ptr()));
}

TEST(NetifTest, EveryEntryIsConsistent) {
  Result<std::vector<NetInterface>> all = ListInterfaces();
  ASSERT_TRUE(all.ok());
  for (const NetInterface& i : *all) {
    SCOPED_TRACE(DescribeInterface(i));
    EXPECT_FALSE(i.name.empty());
    ASSERT_TRUE(i.family == AF_INET || i.family == AF_INET6);
    EXPECT_EQ(i.addr.ss_family, i.family);
    EXPECT_EQ(i.addr_len, SockaddrLen(i.sockaddr_ptr()));
    EXPECT_EQ(SockaddrPort(i.sockaddr_ptr()), 0);
    EXPECT_GE(i.prefix_len, 0);
    EXPECT_LE(i.prefix_len, i.family == AF_INET ? 32 : 128);
    EXPECT_FALSE(i.address.empty());
    EXPECT_EQ(
        i.address.find('%') != std::string::npos,
        i.family == AF_INET6 && reinterpret_cast<const sockaddr_in6*>(&i.addr)->sin6_scope_id != 0);
    if (i.address.find('%') != std::string::npos) {
      EXPECT_EQ(i.address.substr(i.address.find('%') + 1), i.name);
    }
    EXPECT_TRUE(i.speed_mbps == -1 || i.speed_mbps > 0);
  }
}

// A fake /sys/class/net in a temporary directory.
class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/loom_netif_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  void Write(const std::string& iface, const std::string& file, const std::string& text) {
    fs::create_directories(root_ / iface);
    std::ofstream(root_ / iface / file) << text;
  }
  void AddDevice(const std::string& iface) { fs::create_directories(root_ / iface / "device"); }

  NetInterface Read(const std::string& name) {
    NetInterface i;
    i.name = name;
    ReadLinkAttributes(root_.string(), &i);
    return i;
  }

  fs::path root_;
};

TEST_F(FakeSysfs, PhysicalNic) {
  Write("eth0", "mtu", "9000\n");
  Write("eth0", "speed", "25000\n");
  AddDevice("eth0");
  const NetInterface i = Read("eth0");
  EXPECT_EQ(i.mtu, 9000);
  EXPECT_EQ(i.speed_mbps, 25000);
  EXPECT_FALSE(i.is_virtual);
}

TEST_F(FakeSysfs, AliasLabelUsesItsDevice) {
  Write("eth0", "mtu", "1500\n");
  Write("eth0", "speed", "100000\n");
  AddDevice("eth0");
  const NetInterface i = Read("eth0:1");
  EXPECT_EQ(i.mtu, 1500);
  EXPECT_EQ(i.speed_mbps, 100000);
  EXPECT_FALSE(i.is_virtual);
}

TEST_F(FakeSysfs, UnknownSpeedsAreMinusOne) {
  Write("veth0", "speed", "-1\n");
  Write("old0", "speed", "4294967295\n");  // (u32)-1 from old kernels
  Write("zero0", "speed", "0\n");
  Write("junk0", "speed", "fast\n");
  Write("trail0", "speed", "100abc\n");
  Write("empty0", "speed", "");
  for (const char* name : {"veth0", "old0", "zero0", "junk0", "trail0", "empty0", "missing0"}) {
    EXPECT_EQ(Read(name).speed_mbps, -1) << name;
  }
}

TEST_F(FakeSysfs, VirtualWithoutDeviceLinkAndUnreadableMtu) {
  Write("br0", "mtu", "not-a-number\n");
  const NetInterface i = Read("br0");
  EXPECT_TRUE(i.is_virtual);
  EXPECT_EQ(i.mtu, -1);
  EXPECT_EQ(Read("nothing-here").mtu, -1);
  EXPECT_TRUE(Read("nothing-here").is_virtual);
}

TEST(NetifTest, MakeNetInterface) {
  Result<NetInterface> v4 = MakeNetInterface("eth0", "10.0.0.2/24");
  ASSERT_TRUE(v4.ok()) << v4.status().ToString();
  EXPECT_EQ(v4->family, AF_INET);
  EXPECT_EQ(v4->address, "10.0.0.2");
  EXPECT_EQ(v4->prefix_len, 24);
  EXPECT_EQ(v4->addr_len, sizeof(sockaddr_in));
  EXPECT_TRUE(v4->up);
  EXPECT_FALSE(v4->loopback);
  EXPECT_EQ(DescribeInterface(*v4), "eth0 10.0.0.2/24 up");

  Result<NetInterface> v6 = MakeNetInterface("ib0", "fd00::2");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->prefix_len, 128);
  EXPECT_EQ(v6->addr_len, sizeof(sockaddr_in6));

  Result<NetInterface> ll = MakeNetInterface("eth1", "fe80::1%3/64");
  ASSERT_TRUE(ll.ok());
  EXPECT_EQ(ll->address, "fe80::1%eth1");
  EXPECT_EQ(reinterpret_cast<const sockaddr_in6*>(&ll->addr)->sin6_scope_id, 3u);

  Result<NetInterface> lo = MakeNetInterface("lo", "127.0.0.1/8");
  ASSERT_TRUE(lo.ok());
  EXPECT_TRUE(lo->loopback);

  for (const char* bad : {"10.0.0.2/33", "10.0.0.2/", "10.0.0.2/x", "10.0.0.2/-1", "10.0.0.2/24x",
                          "fd00::1/129", "node0/24", "", "/24"}) {
    EXPECT_FALSE(MakeNetInterface("eth0", bad).ok()) << bad;
  }
}

TEST(NetifTest, DescribeInterfaceNamesStateAndAttributes) {
  NetInterface i = MakeNetInterface("eth3", "192.168.1.5/16").value();
  i.up = false;
  i.mtu = 9000;
  i.speed_mbps = 100000;
  i.is_virtual = true;
  EXPECT_EQ(DescribeInterface(i), "eth3 192.168.1.5/16 down virtual mtu 9000 100000Mb/s");
}

}  // namespace
}  // namespace loom
