// IB logic without hardware: NCCL_IB_HCA, port and GID choice, the queue
// pair's transitions, endpoint records, framing, GPUDirect RDMA's rules,
// and "no IB" discovery.
#include <gtest/gtest.h>

#include "transports/ib/gdr.h"
#include "transports/ib/qp.h"
#include "transports/ib/select.h"
#include "transports/ib/verbs.h"

namespace loom::ib {
namespace {

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::array<uint8_t, 16> V4Gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}

std::array<uint8_t, 16> LinkLocalGid() {
  return {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
}

PortInfo Port(std::string dev, int port, bool active = true) {
  PortInfo p;
  p.device = std::move(dev);
  p.port = port;
  p.active = active;
  p.gids.push_back({0, LinkLocalGid(), GidEntry::Type::kIb, ""});
  return p;
}

TEST(HcaFilter, FollowsNcclGrammarWithPorts) {
  struct Case {
    const char* spec;
    const char* dev;
    int port;
    bool match;
  } cases[] = {
      {"", "mlx5_0", 1, true},
      {"mlx5_0:1", "mlx5_0", 1, true},
      {"mlx5_0:1", "mlx5_0", 2, false},
      {"mlx5_0:1", "mlx5_01", 1, true},  // a prefix, as in NCCL
      {"=mlx5_0:1", "mlx5_01", 1, false},
      {"=mlx5_0", "mlx5_0", 2, true},
      {"mlx5_0:1,mlx5_1", "mlx5_1", 2, true},
      {"^mlx5_2", "mlx5_2", 1, false},
      {"^mlx5_2", "mlx5_3", 1, true},
      {"^=mlx5_1", "mlx5_10", 1, true},
      {"^=mlx5_1", "mlx5_1", 1, false},
      {"^mlx5_0:2", "mlx5_0", 1, true},
      {"^mlx5_0:2", "mlx5_0", 2, false},
      {"^", "mlx5_0", 1, false},
      {",,mlx4", "mlx4_0", 1, true},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(HcaFilter::Parse(c.spec).Matches(c.dev, c.port), c.match)
        << c.spec << " vs " << c.dev << ":" << c.port;
  }
}

TEST(SelectPorts, SaysWhyNothingQualifies) {
  PortChoice none = SelectPorts({}, HcaFilter::Parse(""));
  EXPECT_TRUE(none.absent);
  EXPECT_EQ(none.why_none, "zero IB devices");

  std::vector<PortInfo> found = {Port("mlx5_0", 1, false), Port("mlx5_1", 1)};
  PortChoice all = SelectPorts(found, HcaFilter::Parse(""));
  ASSERT_EQ(all.ports.size(), 1u);
  EXPECT_EQ(all.ports[0].device, "mlx5_1");
  EXPECT_FALSE(all.absent);

  PortChoice down = SelectPorts(found, HcaFilter::Parse("mlx5_0"));
  EXPECT_TRUE(down.ports.empty());
  EXPECT_FALSE(down.absent);
  EXPECT_EQ(down.why_none, "no selected port is active (down: mlx5_0:1)");

  PortChoice filtered = SelectPorts(found, HcaFilter::Parse("=mlx5_9:1"));
  EXPECT_TRUE(filtered.ports.empty());
  EXPECT_TRUE(Contains(filtered.why_none, "NCCL_IB_HCA==mlx5_9:1")) << filtered.why_none;
  EXPECT_TRUE(Contains(filtered.why_none, "mlx5_0:1 (down), mlx5_1:1 (active)"))
      << filtered.why_none;
}

TEST(ChooseGid, InfinibandUsesIndexZeroOrTheKnob) {
  PortInfo p = Port("mlx5_0", 1);
  EXPECT_EQ(ChooseGid(p, -1, std::nullopt).value(), 0);
  auto missing = ChooseGid(p, 3, std::nullopt);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(Contains(missing.status().message(), "no GID at index 3 (NCCL_IB_GID_INDEX)"));
  p.gids.clear();
  EXPECT_TRUE(Contains(ChooseGid(p, -1, std::nullopt).status().message(), "empty GID table"));
}

TEST(ChooseGid, RocePrefersV2Ipv4OnTheSubnet) {
  PortInfo p = Port("mlx5_0", 1);
  p.ethernet = true;
  p.gids = {
      {0, LinkLocalGid(), GidEntry::Type::kRoceV1, "eth0"},
      {1, LinkLocalGid(), GidEntry::Type::kRoceV2, "eth0"},
      {2, V4Gid(192, 168, 1, 5), GidEntry::Type::kRoceV1, "eth0"},
      {3, V4Gid(192, 168, 1, 5), GidEntry::Type::kRoceV2, "eth0"},
      {5, V4Gid(10, 61, 0, 1), GidEntry::Type::kRoceV2, "eth1"},
  };
  const Ipv4Subnet data{(10u << 24) | (61u << 16), 24};
  EXPECT_EQ(ChooseGid(p, -1, data).value(), 5);
  EXPECT_EQ(ChooseGid(p, -1, std::nullopt).value(), 3);                  // first v2 IPv4
  EXPECT_EQ(ChooseGid(p, -1, Ipv4Subnet{(172u << 24), 8}).value(), 3);   // off-subnet v2 IPv4
  EXPECT_EQ(ChooseGid(p, 2, data).value(), 2);                           // NCCL_IB_GID_INDEX wins
  p.gids.erase(p.gids.begin() + 2, p.gids.end());
  EXPECT_EQ(ChooseGid(p, -1, data).value(), 1);  // v2 without IPv4
  p.gids.erase(p.gids.begin() + 1);
  EXPECT_EQ(ChooseGid(p, -1, data).value(), 0);  // only v1 left
  p.gids[0].type = GidEntry::Type::kIb;
  auto none = ChooseGid(p, -1, data);
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(Contains(none.status().message(), "no RoCE GID")) << none.status().ToString();
  EXPECT_TRUE(Contains(none.status().message(), "NCCL_IB_GID_INDEX"));
}

TEST(ChooseGid, MappedIpv4OnlyForTheMappedPrefix) {
  EXPECT_EQ(MappedIpv4(V4Gid(10, 0, 0, 1)), (10u << 24) | 1u);
  EXPECT_FALSE(MappedIpv4(LinkLocalGid()));
  auto almost = V4Gid(10, 0, 0, 1);
  almost[3] = 1;
  EXPECT_FALSE(MappedIpv4(almost));
}

Endpoint SomeEndpoint(uint32_t qpn, bool ethernet) {
  Endpoint e;
  e.lid = ethernet ? 0 : 7;
  e.gid = V4Gid(10, 61, 0, static_cast<uint8_t>(qpn));
  e.gid_index = 3;
  e.qpn = qpn;
  e.psn = 0xabcdef;
  e.mtu = 5;
  e.ethernet = ethernet;
  e.ring_addr = 0x7f0012345678;
  e.ring_rkey = 0xdeadbeef;
  e.ring_bytes = 4 << 20;
  e.grants = ethernet;  // varied with the other flag
  return e;
}

TEST(Endpoint, RoundTripsAndRejectsMalformedRecords) {
  const Endpoint e = SomeEndpoint(0x123456, true);
  const std::string wire = EncodeEndpoint(e);
  auto back = DecodeEndpoint(wire, "rank 1 (b)");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, e);
  for (size_t cut : {size_t{0}, size_t{4}, wire.size() - 1}) {
    auto bad = DecodeEndpoint(wire.substr(0, cut), "rank 1 (b)");
    ASSERT_FALSE(bad.ok());
    EXPECT_TRUE(Contains(bad.status().message(), "from rank 1 (b)"));
  }
  EXPECT_EQ(DecodeEndpoint(EncodeEndpoint(SomeEndpoint(9, false)), "p")->grants, false);
  std::string grant = wire;
  grant.back() = 2;
  EXPECT_TRUE(Contains(DecodeEndpoint(grant, "p").status().message(), "grant flag 2"));
  std::string magic = wire;
  magic[0] ^= 1;
  EXPECT_TRUE(Contains(DecodeEndpoint(magic, "p").status().message(), "magic"));
  for (auto [qpn, psn, mtu] : {std::tuple{0u, 0u, 5}, {1u << 24, 0u, 5}, {1u, 1u << 24, 5},
                               {1u, 0u, 0}, {1u, 0u, 6}}) {
    Endpoint x = e;
    x.qpn = qpn;
    x.psn = psn;
    x.mtu = static_cast<uint8_t>(mtu);
    EXPECT_FALSE(DecodeEndpoint(EncodeEndpoint(x), "p").ok()) << qpn << " " << psn << " " << mtu;
  }
}

TEST(QpStateMachine, WalksResetToRtsWithTheRightAttributes) {
  const Endpoint local = SomeEndpoint(0x11, true), remote = SomeEndpoint(0x22, true);
  Endpoint small = remote;
  small.mtu = 3;
  QpKnobs k;
  k.timeout = 22;
  k.retry_cnt = 5;
  k.traffic_class = 106;
  QpState s = QpState::kReset;
  auto init = NextTransition(s, local, small, k);
  ASSERT_TRUE(init.ok());
  EXPECT_EQ(init->to, QpState::kInit);
  EXPECT_EQ(init->port, 1);
  EXPECT_EQ(init->attr_mask, (1 << 0) | (1 << 3) | (1 << 4) | (1 << 5));
  auto rtr = NextTransition(init->to, local, small, k);
  ASSERT_TRUE(rtr.ok());
  EXPECT_EQ(rtr->to, QpState::kRtr);
  EXPECT_EQ(rtr->path_mtu, 3);  // the smaller end
  EXPECT_EQ(rtr->dest_qpn, 0x22u);
  EXPECT_EQ(rtr->rq_psn, remote.psn);
  EXPECT_TRUE(rtr->global);
  EXPECT_EQ(rtr->dgid, remote.gid);
  EXPECT_EQ(rtr->sgid_index, 3);
  EXPECT_EQ(rtr->traffic_class, 106);
  EXPECT_NE(rtr->attr_mask & (1 << 7), 0);   // address vector
  EXPECT_NE(rtr->attr_mask & (1 << 20), 0);  // dest QPN
  auto rts = NextTransition(rtr->to, local, small, k);
  ASSERT_TRUE(rts.ok());
  EXPECT_EQ(rts->to, QpState::kRts);
  EXPECT_EQ(rts->sq_psn, local.psn);
  EXPECT_EQ(rts->timeout, 22);
  EXPECT_EQ(rts->retry_cnt, 5);
  for (QpState end : {QpState::kRts, QpState::kError}) {
    auto none = NextTransition(end, local, remote, k);
    ASSERT_FALSE(none.ok());
    EXPECT_TRUE(Contains(none.status().message(), QpStateName(end)));
  }
}

TEST(QpStateMachine, InfinibandAddressesByLidAndChecksInputs) {
  const Endpoint local = SomeEndpoint(0x11, false), remote = SomeEndpoint(0x22, false);
  auto rtr = NextTransition(QpState::kInit, local, remote, QpKnobs{});
  ASSERT_TRUE(rtr.ok());
  EXPECT_FALSE(rtr->global);
  EXPECT_EQ(rtr->dlid, 7);
  EXPECT_FALSE(NextTransition(QpState::kInit, local, Endpoint{}, QpKnobs{}).ok());
  EXPECT_FALSE(NextTransition(QpState::kInit, local, SomeEndpoint(0x22, true), QpKnobs{}).ok());
  QpKnobs bad;
  bad.timeout = 32;
  EXPECT_TRUE(Contains(NextTransition(QpState::kReset, local, remote, bad).status().message(),
                       "NCCL_IB_TIMEOUT=32"));
  bad = QpKnobs{};
  bad.retry_cnt = 8;
  EXPECT_TRUE(Contains(NextTransition(QpState::kReset, local, remote, bad).status().message(),
                       "NCCL_IB_RETRY_CNT=8"));
  bad = QpKnobs{};
  bad.sl = 16;
  EXPECT_FALSE(NextTransition(QpState::kReset, local, remote, bad).ok());
}

TEST(Framing, ChunksCoverTheMessageExactlyOnce) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{4097},
                       size_t{1000003}}) {
    auto chunks = FrameMessage(bytes, 4096, 300);
    ASSERT_TRUE(chunks.ok());
    size_t next = 0;
    for (size_t i = 0; i < chunks->size(); ++i) {
      const Chunk& c = (*chunks)[i];
      EXPECT_EQ(c.offset, next);
      EXPECT_GT(c.bytes, 0u);
      EXPECT_LE(c.bytes, 4096u);
      EXPECT_TRUE(CheckImm(c.imm, 300, static_cast<uint32_t>(i), "p").ok());
      next += c.bytes;
    }
    EXPECT_EQ(next, bytes);
  }
  EXPECT_FALSE(FrameMessage(10, 0, 0).ok());
  EXPECT_FALSE(FrameMessage(size_t{kMaxChunks} + 1, 1, 0).ok());  // would reach reserved values
  EXPECT_TRUE(FrameMessage(kMaxChunks, 1, 0).ok());
}

TEST(Framing, OutOfOrderImmediatesAreNamed) {
  const Status s = CheckImm(EncodeImm(7, 2), 7, 1, "rank 3 (c)");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "from rank 3 (c)"));
  EXPECT_TRUE(Contains(s.message(), "got message 7 chunk 2, expected message 7 chunk 1"));
  EXPECT_EQ(EncodeImm(256 + 5, (1u << 24) + 9), EncodeImm(5, 9));  // both fields wrap
}

// A rank whose GPU sits under the NIC's PCIe switch on a machine that
// offers both ways of registering device memory.
GdrFacts CloseGpu() {
  GdrFacts f;
  f.gpu = true;
  f.gpu_index = 1;
  f.nic = "mlx5_0";
  f.path_known = true;
  f.path = topology::PathType::kPix;
  f.verbs_dmabuf = true;
  f.cuda_dmabuf = true;
  f.peermem = true;
  return f;
}

TEST(Gdr, CloseGpuUsesDmaBufForBothDirections) {
  auto c = DecideGdr(CloseGpu());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->way, GdrWay::kDmaBuf);
  EXPECT_TRUE(c->send);
  EXPECT_TRUE(c->recv);
  EXPECT_EQ(
      c->line,
      "GPU Direct RDMA Enabled for GPU 1 / HCA mlx5_0 (distance PIX <= PXB), read 1 mode DMA-BUF");
}

TEST(Gdr, DistanceBeyondTheLevelDisablesIt) {
  GdrFacts f = CloseGpu();
  f.path = topology::PathType::kSys;  // across the SMP link
  auto c = DecideGdr(f);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->way, GdrWay::kNone);
  EXPECT_FALSE(c->send || c->recv);
  EXPECT_TRUE(Contains(c->line, "Disabled for GPU 1 / HCA mlx5_0 (distance SYS > PXB")) << c->line;
  for (const char* level : {"SYS", "sys", "4", "5"}) {
    f.level = level;
    EXPECT_EQ(DecideGdr(f)->way, GdrWay::kDmaBuf) << level;
  }
  f.path = topology::PathType::kPxb;
  f.level = "PIX";
  EXPECT_EQ(DecideGdr(f)->way, GdrWay::kNone);
  f.level = "2";  // legacy PXB
  EXPECT_EQ(DecideGdr(f)->way, GdrWay::kDmaBuf);
  f.level = "LOC";
  f.path = topology::PathType::kPix;
  EXPECT_EQ(DecideGdr(f)->way, GdrWay::kNone);
}

TEST(Gdr, AnUnknownPathCountsAsSys) {
  GdrFacts f = CloseGpu();
  f.path_known = false;
  auto c = DecideGdr(f);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->way, GdrWay::kNone);
  EXPECT_TRUE(Contains(c->line, "distance unknown, taken as SYS > PXB")) << c->line;
  f.level = "SYS";
  EXPECT_EQ(DecideGdr(f)->way, GdrWay::kDmaBuf);
}

TEST(Gdr, FallsBackToPeermemThenToStaging) {
  GdrFacts f = CloseGpu();
  f.dmabuf_enable = false;  // NCCL_DMABUF_ENABLE=0
  EXPECT_EQ(DecideGdr(f)->way, GdrWay::kPeerMem);
  f = CloseGpu();
  f.verbs_dmabuf = false;
  auto c = DecideGdr(f);
  EXPECT_EQ(c->way, GdrWay::kPeerMem);
  EXPECT_TRUE(Contains(c->line, "mode nvidia-peermem")) << c->line;
  f.peermem = false;
  c = DecideGdr(f);
  EXPECT_EQ(c->way, GdrWay::kNone);
  EXPECT_TRUE(
      Contains(c->line, "libibverbs has no ibv_reg_dmabuf_mr, and nvidia_peermem is not loaded"))
      << c->line;
  f = CloseGpu();
  f.cuda_dmabuf = false;
  f.peermem = false;
  EXPECT_TRUE(Contains(DecideGdr(f)->line, "the GPU driver exports no dma-buf"));
  f.dmabuf_enable = false;
  EXPECT_TRUE(Contains(DecideGdr(f)->line, "NCCL_DMABUF_ENABLE=0"));
}

TEST(Gdr, ReadZeroKeepsSendsStaged) {
  GdrFacts f = CloseGpu();
  f.read = 0;  // NCCL_NET_GDR_READ=0
  auto c = DecideGdr(f);
  EXPECT_TRUE(c->recv);
  EXPECT_FALSE(c->send);
  EXPECT_TRUE(Contains(c->line, "read 0 mode DMA-BUF")) << c->line;
  f.read = 1;
  EXPECT_TRUE(DecideGdr(f)->send);
}

TEST(Gdr, WritesTheGpuCannotSeeKeepReceivesStaged) {
  GdrFacts f = CloseGpu();
  f.writes_visible = false;  // neither ordered natively nor flushable
  auto c = DecideGdr(f);
  EXPECT_EQ(c->way, GdrWay::kDmaBuf);
  EXPECT_TRUE(c->send);
  EXPECT_FALSE(c->recv);
  EXPECT_TRUE(Contains(c->line, "receives staged: the GPU can neither order nor flush")) << c->line;
  f.read = 0;
  c = DecideGdr(f);
  EXPECT_EQ(c->way, GdrWay::kNone);
  EXPECT_FALSE(c->send || c->recv);
}

TEST(Gdr, NoGpuAndBadLevels) {
  GdrFacts f = CloseGpu();
  f.gpu = false;
  EXPECT_EQ(DecideGdr(f)->way, GdrWay::kNone);
  f = CloseGpu();
  for (const char* bad : {"NET", "6", "near", "PXBX"}) {
    f.level = bad;
    auto c = DecideGdr(f);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_TRUE(Contains(c.status().message(), std::string("NCCL_NET_GDR_LEVEL='") + bad + "'"))
        << c.status().message();
  }
  EXPECT_EQ(ParseGdrLevel("").value(), topology::PathType::kPxb);  // NCCL's default
  EXPECT_EQ(ParseGdrLevel("0").value(), topology::PathType::kLoc);
  EXPECT_EQ(ParseGdrLevel("3").value(), topology::PathType::kPhb);
  EXPECT_EQ(ParseGdrLevel("NODE").value(), topology::PathType::kNode);
}

TEST(Discovery, ReportsNoIbCleanly) {
  Discovery missing = DiscoverPorts("libloom-no-such-verbs.so.1");
  EXPECT_TRUE(missing.ports.empty());
  EXPECT_TRUE(Contains(missing.absent_reason, "libloom-no-such-verbs.so.1 not found"))
      << missing.absent_reason;
  // The real library: on a machine without RDMA it must say why, never crash.
  Discovery real = DiscoverPorts();
  if (real.ports.empty()) {
    EXPECT_FALSE(real.absent_reason.empty());
    std::printf("no IB here: %s\n", real.absent_reason.c_str());
  } else {
    for (const PortInfo& p : real.ports) std::printf("found %s:%d\n", p.device.c_str(), p.port);
  }
}

}  // namespace
}  // namespace loom::ib
