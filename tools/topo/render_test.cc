// Tests of `loom topo` output: golden JSON per fixture, the text matrix of
// the DGX fixture, the algorithm table as the runtime selector makes it
// (knobs included), and the DGX selection table in docs/TOPOLOGY.md.
// LOOM_UPDATE_GOLDEN=1 rewrites the golden files.
#include "tools/topo/render.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "topology/topo_file.h"

namespace loom::tools {
namespace {

topology::Topology Fixture(const std::string& name) {
  auto t = topology::LoadTopologyFile(std::string(LOOM_TOPO_FIXTURE_DIR) + "/" + name + ".json");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : topology::Topology::WithMachine("broken");
}

// `loom topo` without options: one host, a rank per GPU, no knobs.
JobSpec OneHost(const topology::Topology& t) {
  return MakeJobSpec(t, 1, 0, "", "").value();
}

// The "algo" of each row of the JSON table, by size in bytes.
std::map<size_t, std::string> ChoicesOf(const json::Value& report) {
  std::map<size_t, std::string> out;
  for (const json::Value& row : report.Find("allreduce")->array()) {
    out[static_cast<size_t>(row.Find("bytes")->number())] = row.Find("algo")->string();
  }
  return out;
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
  for (const char* key :
       {"schema", "hostname", "devices", "matrix", "paths", "gpus", "nics", "job", "allreduce"}) {
    EXPECT_NE(parsed->Find(key), nullptr) << key;
  }
  // Every row has the runtime's candidates; an algorithm that cannot run is null.
  for (const json::Value& row : parsed->Find("allreduce")->array()) {
    for (const char* key : {"bytes", "algo", "source", "ring_us", "recdoubling_us", "tree_us",
                            "direct_us", "hierarchical_us"}) {
      EXPECT_NE(row.Find(key), nullptr) << key;
    }
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

TEST(AlgorithmTableTest, IsTheRuntimeSelectorsChoiceForTheDerivedLinks) {
  const topology::Topology t = Fixture("dgx_h100");
  const JobSpec job = MakeJobSpec(t, 2, 8, "", "").value();
  const CostModel model(topology::JobTopology::Uniform(2, 8, job.links.intra, job.links.inter));
  const std::map<size_t, std::string> choices = ChoicesOf(RenderJson(t, job));
  ASSERT_EQ(choices.size(), 10u);
  for (const auto& [bytes, algo] : choices) {
    EXPECT_EQ(
        algo,
        ShortAlgoName(SelectAlgo(OpKind::kAllReduce, bytes, model, AlgoFilter(), TuneTable()).algo))
        << bytes;
  }
  EXPECT_EQ(choices.at(2u << 20), "hierarchical");
  const std::string text = RenderText(t, "test", job);
  EXPECT_NE(text.find("  2 MiB      hierarchical"), std::string::npos) << text;
  EXPECT_EQ(text.find("n/a: hierarchical"), std::string::npos) << text;
  // One host: Hierarchical is offered but cannot run, and the table says why.
  EXPECT_NE(RenderText(t, "test", OneHost(t)).find("n/a: hierarchical (one host)"),
            std::string::npos);
}

TEST(AlgorithmTableTest, HonoursNcclAlgoAndLoomTune) {
  const topology::Topology t = Fixture("dgx_h100");
  // NCCL_ALGO restricts the candidates, case-insensitively.
  for (const auto& [bytes, algo] :
       ChoicesOf(RenderJson(t, MakeJobSpec(t, 16, 8, "Tree", "").value()))) {
    EXPECT_EQ(algo, "tree") << bytes;
  }
  // LOOM_TUNE names an algorithm per range; the text marks it.
  const JobSpec tuned = MakeJobSpec(t, 16, 8, "", "allreduce:0-1K=ring").value();
  const json::Value report = RenderJson(t, tuned);
  for (const json::Value& row : report.Find("allreduce")->array()) {
    const bool small = row.Find("bytes")->number() < 1024;
    EXPECT_EQ(row.Find("source")->string(), small ? "tune" : "model");
    if (small) {
      EXPECT_EQ(row.Find("algo")->string(), "ring");
    }
  }
  EXPECT_EQ(report.Find("job")->Find("loom_tune")->string(), "allreduce:0-1K=ring");
  const std::string text = RenderText(t, "test", tuned);
  EXPECT_NE(text.find("ring (tune)"), std::string::npos) << text;
  EXPECT_NE(text.find("with LOOM_TUNE=allreduce:0-1K=ring"), std::string::npos) << text;
  // Forcing Hierarchical on one host: nothing allowed runs, the model decides.
  const std::string forced = RenderText(t, "test", MakeJobSpec(t, 1, 8, "hier", "").value());
  EXPECT_NE(forced.find("recdoubling (fallback)"), std::string::npos) << forced;
}

TEST(AlgorithmTableTest, MalformedKnobsFailAsTheCommunicatorWould) {
  const topology::Topology t = Fixture("cpu_only");
  const auto bad_algo = MakeJobSpec(t, 1, 0, "ring,bogus", "");
  ASSERT_FALSE(bad_algo.ok());
  EXPECT_NE(bad_algo.status().ToString().find("bogus"), std::string::npos);
  const auto bad_tune = MakeJobSpec(t, 1, 0, "", "allreduce:10-5=ring");
  ASSERT_FALSE(bad_tune.ok());
  EXPECT_NE(bad_tune.status().ToString().find("LOOM_TUNE"), std::string::npos);
  // Awkward shapes are clamped, not rejected.
  const JobSpec job = MakeJobSpec(t, 0, 0, "", "").value();
  EXPECT_EQ(job.hosts, 1);
  EXPECT_EQ(job.ranks_per_host, 16);  // no GPUs: a rank per core
  EXPECT_EQ(job.ranks_note, "one rank per core: no GPUs");
  EXPECT_EQ(MakeJobSpec(t, 1, 3, "", "")->ranks_note, "");  // given, so nothing to say
}

// "8 B", "32 KiB", "1 GiB" -> bytes.
size_t ParseDocSize(const std::string& text) {
  std::istringstream in(text);
  size_t v = 0;
  std::string unit;
  in >> v >> unit;
  const std::map<std::string, int> shift = {{"B", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}};
  return shift.count(unit) != 0 ? v << shift.at(unit) : 0;
}

// Cells of one markdown table row, trimmed: "| a | b |" -> {"a", "b"}.
std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line.substr(1));
  std::string cell;
  while (std::getline(in, cell, '|')) {
    const size_t b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
    out.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
  }
  return out;
}

TEST(AlgorithmTableTest, DgxSelectionTableInTheDocsIsWhatLoomTopoPrints) {
  auto doc = topology::ReadWholeFile(std::string(LOOM_DOCS_DIR) + "/TOPOLOGY.md");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  const topology::Topology t = Fixture("dgx_h100");
  // The first "| size" table of section 8: a column per host count.
  std::istringstream in(doc->substr(doc->find("\n## 8.")));
  std::string line;
  std::vector<int> hosts;
  int rows = 0;
  while (std::getline(in, line)) {
    if (hosts.empty()) {
      if (line.rfind("| size", 0) != 0) continue;
      const std::vector<std::string> head = Cells(line);
      for (size_t i = 1; i < head.size(); ++i) hosts.push_back(std::atoi(head[i].c_str()));
      std::getline(in, line);  // |---|
      continue;
    }
    if (line.rfind("|", 0) != 0) break;
    const std::vector<std::string> cells = Cells(line);
    ASSERT_EQ(cells.size(), hosts.size() + 1) << line;
    const size_t bytes = ParseDocSize(cells[0]);
    for (size_t i = 0; i < hosts.size(); ++i) {
      const auto choices = ChoicesOf(RenderJson(t, MakeJobSpec(t, hosts[i], 8, "", "").value()));
      ASSERT_EQ(choices.count(bytes), 1u) << cells[0];
      EXPECT_EQ(cells[i + 1], choices.at(bytes)) << cells[0] << " at " << hosts[i] << " hosts";
    }
    ++rows;
  }
  EXPECT_EQ(hosts, (std::vector<int>{1, 2, 16, 512}));
  EXPECT_EQ(rows, 7);
}

TEST(RenderDotTest, EveryNodeAndLinkAppears) {
  const topology::Topology t = Fixture("far_nic");
  const std::string dot = RenderDot(t);
  EXPECT_EQ(dot.rfind("graph \"far-nic\" {", 0), 0u);
  EXPECT_NE(dot.find("\"gpu0\" -- \"gpu1\" [label=\"NV12 240 GB/s\", style=bold]"),
            std::string::npos)
      << dot;
  EXPECT_NE(dot.find("\"numa0\" -- \"numa1\" [label=\"SMP 16 GB/s\", style=dashed]"),
            std::string::npos);
  EXPECT_NE(dot.find("\"hb2\" -- \"mlx5_0\" [label=\"24 GB/s\"]"), std::string::npos);
  for (const auto& n : t.nodes)
    EXPECT_NE(dot.find("\"" + n.id + "\" [label="), std::string::npos) << n.id;
}

TEST(RenderSimulationTest, CoversEightToFourThousandRanks) {
  const topology::Topology t = Fixture("dgx_h100");
  const std::string sim = RenderSimulation(t, OneHost(t));
  EXPECT_NE(sim.find("\n      8      1  "), std::string::npos) << sim;
  EXPECT_NE(sim.find("\n   4096    512  "), std::string::npos) << sim;
  EXPECT_NE(sim.find("hierarchical"), std::string::npos) << sim;
  // 16 ranks per host: the 8-rank row would repeat the 16-rank one.
  const std::string wide = RenderSimulation(t, MakeJobSpec(t, 1, 16, "", "").value());
  EXPECT_EQ(wide.find("\n      8 "), std::string::npos) << wide;
  EXPECT_NE(wide.find("\n     16      1  "), std::string::npos) << wide;
  // The knobs apply here too.
  const std::string ring = RenderSimulation(t, MakeJobSpec(t, 1, 8, "ring", "").value());
  EXPECT_EQ(ring.find("recdoubling"), std::string::npos) << ring;
  EXPECT_NE(ring.find("with NCCL_ALGO=ring"), std::string::npos) << ring;
}

}  // namespace
}  // namespace loom::tools
