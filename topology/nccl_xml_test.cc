// Tests of the NCCL topology XML import.
#include "topology/nccl_xml.h"

#include <gtest/gtest.h>

#include "topology/paths.h"
#include "topology/topo_file.h"

namespace loom::topology {
namespace {

// Shaped like NCCL_TOPO_DUMP_FILE output from an H100 node, trimmed to two
// GPUs on NVSwitches, their NICs, a dual-port adapter and a socket NIC.
constexpr const char* kDump = R"(<system version="1">
  <cpu host_hash="0xa5f31daa95182da8" numaid="0" affinity="00000000,0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:15:00.0" class="0x060400" vendor="0x1000" device="0xc030" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:18:00.0" class="0x030200" vendor="0x10de" device="0x2330" link_speed="32.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="90" rank="0" gdr="1">
          <nvlink target="0000:f5:00.0" count="5" tclass="0x068000"/>
          <nvlink target="0000:f4:00.0" count="4" tclass="0x068000"/>
        </gpu>
      </pci>
      <pci busid="0000:17:00.0" class="0x020700" vendor="0x15b3" device="0x1021" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_0" dev="0" speed="400000" port="1" latency="0.000000" guid="0x1" maxconn="131072" gdr="1"/>
        </nic>
      </pci>
      <pci busid="0000:19:00.0" class="0x010802" vendor="0x144d" device="0xa824" link_speed="16.0 GT/s PCIe" link_width="4"/>
    </pci>
    <nic>
      <net name="eth0" dev="3" speed="25000" port="0" latency="0.000000" maxconn="65536" gdr="0"/>
    </nic>
  </cpu>
  <cpu numaid="1" affinity="ffff0000" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:9a:00.0" class="0x030200" vendor="0x10de" device="0x2330" link_speed="32.0 GT/s PCIe" link_width="16">
      <gpu dev="1" sm="90" rank="1" gdr="1">
        <nvlink target="0000:f5:00.0" count="5" tclass="0x068000"/>
        <nvlink target="0000:f4:00.0" count="4" tclass="0x068000"/>
      </gpu>
    </pci>
    <pci busid="0000:9b:00.0" class="0x020000" vendor="0x15b3" device="0x101d" link_speed="16.0 GT/s PCIe" link_width="16">
      <nic>
        <net name="mlx5_1" dev="1" speed="100000" port="1" gdr="1"/>
        <net name="mlx5_2" dev="2" speed="100000" port="2" gdr="1"/>
      </nic>
    </pci>
  </cpu>
</system>
)";

TEST(NcclXmlTest, ImportsAnH100Dump) {
  auto t = ParseNcclTopoXml(kDump);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->OfKind(NodeKind::kNuma).size(), 2u);
  EXPECT_EQ(t->OfKind(NodeKind::kGpu).size(), 2u);
  EXPECT_EQ(t->OfKind(NodeKind::kNvSwitch).size(), 2u);
  EXPECT_EQ(t->OfKind(NodeKind::kNic).size(), 4u);
  EXPECT_EQ(t->FindBusId("0000:19:00.0"), -1);  // the NVMe drive is dropped
  const Node& numa0 = t->nodes[static_cast<size_t>(t->Find("numa0"))];
  EXPECT_EQ(numa0.cpuset, "0-15");
  const Node& gpu0 = t->nodes[static_cast<size_t>(t->Find("gpu0"))];
  EXPECT_EQ(gpu0.pcie_gen, 5);
  EXPECT_EQ(gpu0.pcie_width, 16);
  EXPECT_EQ(gpu0.sm, 90);
  const Node& ib = t->nodes[static_cast<size_t>(t->Find("mlx5_0"))];
  EXPECT_EQ(ib.link_layer, LinkLayer::kInfiniBand);
  EXPECT_TRUE(ib.rdma);
  EXPECT_EQ(ib.rate_gbps, 400);
  const Node& roce = t->nodes[static_cast<size_t>(t->Find("mlx5_2"))];
  EXPECT_EQ(roce.link_layer, LinkLayer::kEthernet);
  EXPECT_EQ(roce.port, 2);
  EXPECT_EQ(roce.bus_id, "0000:9b:00.0");
  const Node& eth = t->nodes[static_cast<size_t>(t->Find("eth0"))];
  EXPECT_FALSE(eth.rdma);
  EXPECT_EQ(eth.netdev, "eth0");
  EXPECT_EQ(eth.bus_id, "");

  const Path nv = ClassifyPath(*t, t->Find("gpu0"), t->Find("gpu1"));
  EXPECT_EQ(nv.type, PathType::kNvl);
  EXPECT_EQ(nv.nvlinks, 9);
  EXPECT_EQ(ClassifyPath(*t, t->Find("gpu0"), t->Find("mlx5_0")).type, PathType::kPix);
  const Path sys = ClassifyPath(*t, t->Find("gpu0"), t->Find("mlx5_1"));
  EXPECT_EQ(sys.type, PathType::kSys);
  EXPECT_EQ(sys.bw_gbs, 10);  // Sapphire Rapids: NCCL's Skylake-and-later UPI figure

  // What was imported dumps and reloads as a loom file unchanged.
  const std::string once = DumpTopologyJson(*t);
  auto again = ParseTopologyJson(once);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(DumpTopologyJson(*again), once);
}

TEST(NcclXmlTest, GpuToGpuNvLinksAreKeptOnce) {
  auto t = ParseNcclTopoXml(R"(<system version="1"><cpu numaid="0" vendor="AuthenticAMD">
    <pci busid="0000:01:00.0" class="0x030200"><gpu dev="0" sm="80"><nvlink target="0000:02:00.0" count="4" tclass="0x030200"/></gpu></pci>
    <pci busid="0000:02:00.0" class="0x030200"><gpu dev="1" sm="80"><nvlink target="0000:01:00.0" count="4" tclass="0x030200"/></gpu></pci>
  </cpu><cpu numaid="1" vendor="AuthenticAMD"/></system>)");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->links.size(), 2u);  // one NVLink and the SMP link
  const Path p = ClassifyPath(*t, t->Find("gpu0"), t->Find("gpu1"));
  EXPECT_EQ(p.nvlinks, 4);
  EXPECT_EQ(p.bw_gbs, 80);
  const Link& smp = t->links[0].kind == LinkKind::kSmp ? t->links[0] : t->links[1];
  EXPECT_EQ(smp.kind, LinkKind::kSmp);
  EXPECT_EQ(smp.bw_gbs, 16);  // AMD Infinity Fabric, as NCCL counts it
}

// Whatever the import accepts, loom's own format dumps and reads back (the
// fuzz target's rule): here every integer at the edges of an int.
TEST(NcclXmlTest, IntegersAtTheEdgesOfAnIntRoundTrip) {
  const std::string doc =
      "<system><cpu numaid=\"2147483647\"><pci busid=\"0000:01:00.0\" class=\"0x030200\">"
      "<gpu dev=\"2147483647\" sm=\"2147483647\"/></pci><pci busid=\"0000:02:00.0\" "
      "class=\"0x020700\"><nic><net name=\"mlx5_0\" port=\"2147483647\" speed=\"2147483647\"/>"
      "</nic></pci></cpu><cpu numaid=\"-2147483648\"/></system>";
  auto t = ParseNcclTopoXml(doc);
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto back = ParseTopologyJson(DumpTopologyJson(*t));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(DumpTopologyJson(*back), DumpTopologyJson(*t));
}

TEST(NcclXmlTest, RejectsBadDocuments) {
  EXPECT_FALSE(ParseNcclTopoXml("<graphs/>").ok());
  EXPECT_FALSE(ParseNcclTopoXml("<system><cpu numaid=\"x\"/></system>").ok());
  EXPECT_FALSE(ParseNcclTopoXml("<system><cpu numaid=\"0\"/><cpu numaid=\"0\"/></system>").ok());
  EXPECT_FALSE(ParseNcclTopoXml("<system><cpu><pci busid=\"zz\" class=\"0x060400\"/></cpu></system>").ok());
  // Numbers that fit no int, and negative GPU indices, are refused (a fuzzer
  // found dev="80000000000007" accepted, then refused by the JSON loader).
  for (const char* dev : {"80000000000007", "-1", "0x100000000"}) {
    const std::string doc = std::string("<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" "
                                        "class=\"0x030200\"><gpu dev=\"") +
                            dev + "\" sm=\"80\"/></pci></cpu></system>";
    auto bad = ParseNcclTopoXml(doc);
    ASSERT_FALSE(bad.ok()) << dev;
    EXPECT_NE(bad.status().message().find("dev="), std::string::npos) << bad.status().message();
  }
  auto r = ParseNcclTopoXml("<system>\n<cpu>\n<nic><net dev=\"0\"/></nic></cpu></system>");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("line 3"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace loom::topology
