// Tests of `loom topo` output: golden JSON per fixture, and the text matrix
// of the DGX fixture. LOOM_UPDATE_GOLDEN=1 rewrites the golden files.
#include "tools/topo/render.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "topology/topo_file.h"

namespace loom::tools {
namespace {

topology::Topology Fixture(const std::string& name) {
  auto t = topology::LoadTopologyFile(std::string(LOOM_TOPO_FIXTURE_DIR) + "/" + name + ".json");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : topology::Topology::WithMachine("broken");
}

topology::JobShape OneHost(const topology::Topology& t) {
  const int gpus = static_cast<int>(t.OfKind(topology::NodeKind::kGpu).size());
  return topology::ShapeFor(t, 1, gpus > 0 ? gpus : 1);
}

class GoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenTest, JsonMatchesGolden) {
  const topology::Topology t = Fixture(GetParam());
  const std::string got = json::Dump(RenderJson(t, OneHost(t)));
  const std::string path =
      std::string(LOOM_TOPO_FIXTURE_DIR) + "/golden/" + GetParam() + ".topo.json";
  if (std::getenv("LOOM_UPDATE_GOLDEN") != nullptr) std::ofstream(path) << got;
  auto want = topology::ReadWholeFile(path);
  ASSERT_TRUE(want.ok()) << want.status().ToString() << " (run with LOOM_UPDATE_GOLDEN=1)";
  EXPECT_EQ(got, *want);
  // The output is valid JSON with the documented top-level members.
  auto parsed = json::Parse(got);
  ASSERT_TRUE(parsed.ok());
  for (const char* key : {"schema", "hostname", "devices", "matrix", "paths", "gpus", "nics", "job",
                          "allreduce"}) {
    EXPECT_NE(parsed->Find(key), nullptr) << key;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest,
                         ::testing::Values("dgx_h100", "pcie_4gpu", "far_nic", "roce", "cpu_only"));

TEST(RenderTextTest, DgxMatrixShowsNvLinkBetweenGpusAndPixToTheirNics) {
  const topology::Topology t = Fixture("dgx_h100");
  for (int i = 0; i < 8; ++i) {
    const int g = t.Find("gpu" + std::to_string(i));
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(CellLabel(t, g, t.Find("gpu" + std::to_string(j))), i == j ? "X" : "NV18");
    }
    EXPECT_EQ(CellLabel(t, g, t.Find("mlx5_" + std::to_string(i))), "PIX");
  }
  const std::string text = RenderText(t, "test", OneHost(t));
  EXPECT_NE(text.find("gpu0   X      NV18   NV18"), std::string::npos) << text;
  EXPECT_NE(text.find("mlx5_0     IB        400Gb/s  port 1"), std::string::npos) << text;
  EXPECT_NE(text.find("eno1       Ethernet  25Gb/s"), std::string::npos) << text;
}

TEST(RenderTextTest, CpuOnlyHostHasNoMatrixButListsNics) {
  const topology::Topology t = Fixture("cpu_only");
  EXPECT_EQ(MatrixDevices(t).size(), 2u);
  const std::string text = RenderText(t, "test", OneHost(t));
  EXPECT_NE(text.find("enp65s0    Ethernet  100Gb/s"), std::string::npos) << text;
  const topology::Topology empty = topology::Topology::WithMachine("bare");
  EXPECT_NE(RenderText(empty, "test", OneHost(empty)).find("no GPUs or NICs"), std::string::npos);
}

TEST(RenderDotTest, EveryNodeAndLinkAppears) {
  const topology::Topology t = Fixture("far_nic");
  const std::string dot = RenderDot(t);
  EXPECT_EQ(dot.rfind("graph \"far-nic\" {", 0), 0u);
  EXPECT_NE(dot.find("\"gpu0\" -- \"gpu1\" [label=\"NV12 240 GB/s\", style=bold]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("\"numa0\" -- \"numa1\" [label=\"SMP 16 GB/s\", style=dashed]"), std::string::npos);
  EXPECT_NE(dot.find("\"hb2\" -- \"mlx5_0\" [label=\"24 GB/s\"]"), std::string::npos);
  for (const auto& n : t.nodes) EXPECT_NE(dot.find("\"" + n.id + "\" [label="), std::string::npos) << n.id;
}

TEST(RenderSimulationTest, CoversEightToFourThousandRanks) {
  const std::string sim = RenderSimulation(Fixture("dgx_h100"), 8);
  EXPECT_NE(sim.find("\n      8      1  "), std::string::npos) << sim;
  EXPECT_NE(sim.find("\n   4096    512  "), std::string::npos) << sim;
}

}  // namespace
}  // namespace loom::tools
