// Striped TCP over several NICs: the published address list, subnet
// matching of NIC pairs, and two ranks (threads) connecting over two
// loopback addresses standing in for two data NICs.
#include <gtest/gtest.h>

#include <thread>

#include "transports/engine.h"
#include "transports/tcp/context.h"
#include "transports/tcp/nics.h"

namespace loom {
namespace {

TcpNic Nic(std::string ep, int prefix) { return TcpNic{std::move(ep), prefix, ""}; }

TEST(NicList, OneNicKeepsTheSingleAddressFormat) {
  EXPECT_EQ(FormatNicList({Nic("10.0.0.1:4000", 24)}), "10.0.0.1:4000");
  EXPECT_EQ(FormatNicList({Nic("10.0.0.1:4000", 24), Nic("[fd00::1]:4001", 64)}),
            "10.0.0.1:4000/24,[fd00::1]:4001/64");
  auto one = ParseNicList("10.0.0.1:4000");
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].prefix_len, 0);
  auto two = ParseNicList("10.0.0.1:4000/24,[fd00::1]:4001/64");
  ASSERT_TRUE(two.ok());
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].endpoint, "[fd00::1]:4001");
  EXPECT_EQ((*two)[1].prefix_len, 64);
}

TEST(NicList, MalformedEntriesAreNamed) {
  for (const char* bad : {"", "10.0.0.1:4000/x", "10.0.0.1:4000/129", "nohost", "10.0.0.1:1/24,",
                          "10.0.0.300:1"}) {
    auto r = ParseNicList(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
}

TEST(MatchNics, PairsNicsOnSharedSubnetsSymmetrically) {
  const std::vector<TcpNic> a2 = {Nic("10.1.0.1:1", 24), Nic("10.2.0.1:2", 24)};
  const std::vector<TcpNic> b = {Nic("10.2.0.2:3", 24), Nic("10.1.0.2:4", 24)};
  EXPECT_EQ(MatchNics(a2, b), (std::vector<std::pair<int, int>>{{0, 1}, {1, 0}}));
  // No shared subnet, or a single-NIC end that published no prefix: the first NICs.
  EXPECT_EQ(MatchNics(a2, {Nic("10.9.0.2:3", 24)}), (std::vector<std::pair<int, int>>{{0, 0}}));
  EXPECT_EQ(MatchNics(a2, {Nic("10.1.0.2:3", 0)}), (std::vector<std::pair<int, int>>{{0, 0}}));
  // The shorter prefix decides; each NIC of the higher rank is used once.
  EXPECT_EQ(MatchNics({Nic("10.1.0.1:1", 16), Nic("10.1.5.1:2", 16)},
                      {Nic("10.1.9.9:3", 24)}),
            (std::vector<std::pair<int, int>>{{0, 0}}));
  // Families never match each other.
  EXPECT_EQ(MatchNics({Nic("[fd00::1]:1", 64), Nic("10.1.0.1:2", 24)},
                      {Nic("10.1.0.2:3", 24), Nic("[fd00::2]:4", 64)}),
            (std::vector<std::pair<int, int>>{{0, 1}, {1, 0}}));
}

TEST(TcpContext, StripesOverTwoNicsAndNamesBothInVia) {
  // 127.0.0.1 and 127.0.0.2 (both on lo, /8) stand in for data0 and data1.
  const std::vector<TcpListen> nics = {{"127.0.0.1", "data0", 8}, {"127.0.0.2", "data1", 8}};
  auto c0 = TcpContext::Create(nics, 7);
  auto c1 = TcpContext::Create(nics, 7);
  ASSERT_TRUE(c0.ok() && c1.ok());
  const std::vector<std::string> addrs = {(*c0)->address(), (*c1)->address()};
  EXPECT_NE(addrs[0].find(",127.0.0.2:"), std::string::npos) << addrs[0];
  const std::vector<std::string> hosts = {"h0", "h1"};
  Result<std::vector<std::unique_ptr<Connection>>> r0 = InternalError("unset");
  Result<std::vector<std::unique_ptr<Connection>>> r1 = InternalError("unset");
  std::thread t([&] { r1 = (*c1)->Connect(1, {0}, addrs, hosts, 1, Deadline::After(std::chrono::seconds(10))); });
  r0 = (*c0)->Connect(0, {1}, addrs, hosts, 1, Deadline::After(std::chrono::seconds(10)));
  t.join();
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_NE((*r0)[0]->Describe().find("via NET/Socket/data0,data1"), std::string::npos)
      << (*r0)[0]->Describe();
  // A message larger than one stripe unit crosses both sockets intact.
  std::vector<char> src(3 * (256 << 10) + 17), dst(src.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7);
  std::vector<std::unique_ptr<Connection>> e0(2), e1(2);
  e0[1] = std::move((*r0)[0]);
  e1[0] = std::move((*r1)[0]);
  Engine a(Engine::Options{}, std::move(e0));
  Engine::Options ob;
  ob.rank = 1;
  Engine b(ob, std::move(e1));
  Transfer s, d;
  s.dir = Transfer::Dir::kSend;
  s.peer = 1;
  s.src = src.data();
  s.bytes = src.size();
  d.dir = Transfer::Dir::kRecv;
  d.peer = 0;
  d.dst = dst.data();
  d.bytes = dst.size();
  Status sb;
  std::thread tb([&] { sb = b.Run(std::span<Transfer>(&d, 1), Deadline::After(std::chrono::seconds(10))); });
  Status sa = a.Run(std::span<Transfer>(&s, 1), Deadline::After(std::chrono::seconds(10)));
  tb.join();
  ASSERT_TRUE(sa.ok()) << sa.ToString();
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  EXPECT_EQ(dst, src);
}

}  // namespace
}  // namespace loom
