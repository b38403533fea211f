// Tests of the topology model's invariants, names and bandwidth figures.
#include "topology/model.h"

#include <gtest/gtest.h>

#include "topology/paths.h"

namespace loom::topology {
namespace {

TEST(NormalizeBusIdTest, AcceptsTheUsualSpellings) {
  EXPECT_EQ(*NormalizeBusId("0000:3b:00.0"), "0000:3b:00.0");
  EXPECT_EQ(*NormalizeBusId("3B:00.1"), "0000:3b:00.1");
  EXPECT_EQ(*NormalizeBusId("00000000:3B:1F.7"), "0000:3b:1f.7");
  EXPECT_EQ(*NormalizeBusId("0001:c1:00.0"), "0001:c1:00.0");
  for (const char* bad : {"", "3b", "3b:00", "0000:3b:00.8", "0000:3b:20.0", "zz:00.0",
                          "0000:3b:00.0.1", "1:0000:3b:00.0", "000000000:3b:00.0", ":00.0"}) {
    EXPECT_FALSE(NormalizeBusId(bad).ok()) << bad;
  }
}

TEST(BandwidthTest, MatchesNcclFigures) {
  EXPECT_EQ(PcieLinkGbs(3, 16), 12);
  EXPECT_EQ(PcieLinkGbs(4, 16), 24);
  EXPECT_EQ(PcieLinkGbs(5, 16), 48);
  EXPECT_EQ(PcieLinkGbs(4, 4), 6);
  EXPECT_EQ(PcieLinkGbs(0, 16), kDefaultPcieGbs);
  EXPECT_EQ(PcieLinkGbs(7, 16), kDefaultPcieGbs);
  EXPECT_EQ(NvLinkLaneGbs(60), 18);
  EXPECT_EQ(NvLinkLaneGbs(80), 20);
  EXPECT_EQ(NvLinkLaneGbs(90), 20.6);
  EXPECT_EQ(NvLinkLaneGbs(100), 40.1);
}

TEST(NamesTest, RoundTripAndRejectUnknown) {
  for (auto k : {NodeKind::kMachine, NodeKind::kNuma, NodeKind::kPci, NodeKind::kGpu,
                 NodeKind::kNic, NodeKind::kNvSwitch}) {
    EXPECT_EQ(*ParseNodeKind(Name(k)), k);
  }
  EXPECT_FALSE(ParseNodeKind("GPU").ok());
  EXPECT_FALSE(ParseLinkKind("pcie").ok());
  EXPECT_EQ(*ParseLinkLayer("ib"), LinkLayer::kInfiniBand);
  EXPECT_EQ(*ParsePathType("nvl"), PathType::kNvl);
  EXPECT_EQ(*ParsePathType("Sys"), PathType::kSys);
  EXPECT_FALSE(ParsePathType("PXN").ok());
  EXPECT_LT(PathType::kPix, PathType::kPxb);
  EXPECT_LT(PathType::kNode, PathType::kSys);
}

Topology Small() {
  Topology t = Topology::WithMachine("h");
  Node numa;
  numa.kind = NodeKind::kNuma;
  numa.id = "numa0";
  numa.parent = 0;
  t.Add(numa);
  Node gpu;
  gpu.kind = NodeKind::kGpu;
  gpu.id = "gpu0";
  gpu.parent = 1;
  gpu.bus_id = "0000:01:00.0";
  t.Add(gpu);
  return t;
}

TEST(ValidateTest, AcceptsAMinimalHostAndNamesEachViolation) {
  EXPECT_TRUE(Small().Validate().ok());
  struct Case {
    const char* expect;
    void (*mutate)(Topology*);
  };
  const Case cases[] = {
      {"first node", [](Topology* t) { t->nodes[0].kind = NodeKind::kNuma; }},
      {"duplicate id", [](Topology* t) { t->nodes[2].id = "numa0"; }},
      {"empty id", [](Topology* t) { t->nodes[2].id.clear(); }},
      {"before it", [](Topology* t) { t->nodes[1].parent = 2; }},
      {"cannot have children", [](Topology* t) {
         Node n;
         n.id = "x";
         n.parent = 2;
         t->Add(n);
       }},
      {"not of the form", [](Topology* t) { t->nodes[2].bus_id = "01:00.0"; }},
      {"duplicate bus id", [](Topology* t) {
         Node n;
         n.id = "sw";
         n.parent = 1;
         n.bus_id = "0000:01:00.0";
         t->Add(n);
       }},
      {"PCIe generation", [](Topology* t) { t->nodes[2].pcie_gen = 9; }},
      {"two different", [](Topology* t) { t->links.push_back(Link{2, 2, LinkKind::kNvLink, 1, 1}); }},
      {"positive", [](Topology* t) { t->links.push_back(Link{1, 2, LinkKind::kSmp, 1, 0}); }},
      {"NVLink joins", [](Topology* t) { t->links.push_back(Link{1, 2, LinkKind::kNvLink, 1, 5}); }},
      {"SMP link", [](Topology* t) { t->links.push_back(Link{1, 2, LinkKind::kSmp, 1, 5}); }},
  };
  for (const Case& c : cases) {
    Topology t = Small();
    c.mutate(&t);
    const Status s = t.Validate();
    EXPECT_FALSE(s.ok()) << c.expect;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << s.message();
  }
}

TEST(PathTest, NvbThroughAnIntermediateGpu) {
  // gpu0 - gpu1 - gpu2 in a chain of direct NVLinks, all on one host bridge.
  Topology t = Small();
  for (int i = 1; i < 3; ++i) {
    Node g;
    g.kind = NodeKind::kGpu;
    g.id = "gpu" + std::to_string(i);
    g.parent = 1;
    t.Add(g);
  }
  t.links.push_back(Link{t.Find("gpu0"), t.Find("gpu1"), LinkKind::kNvLink, 4, 80});
  t.links.push_back(Link{t.Find("gpu1"), t.Find("gpu2"), LinkKind::kNvLink, 2, 40});
  ASSERT_TRUE(t.Validate().ok());
  const Path direct = ClassifyPath(t, t.Find("gpu0"), t.Find("gpu1"));
  EXPECT_EQ(direct.type, PathType::kNvl);
  EXPECT_EQ(direct.nvlinks, 4);
  const Path hop = ClassifyPath(t, t.Find("gpu0"), t.Find("gpu2"));
  EXPECT_EQ(hop.type, PathType::kNvb);
  EXPECT_EQ(hop.bw_gbs, 40);
  EXPECT_EQ(hop.nvlinks, 2);
  // A device to its own CPU is PHB, as NCCL says for GPU to CPU.
  EXPECT_EQ(ClassifyPath(t, t.Find("numa0"), t.Find("gpu0")).type, PathType::kPhb);
  EXPECT_EQ(ClosestNic(t, t.Find("gpu0")), -1);
}

}  // namespace
}  // namespace loom::topology
