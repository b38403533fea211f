// End-to-end tests of `loom perf` as one rank (no launcher): exit codes,
// the JSON file, and that --corrupt-for-test makes the data check fail.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/commands.h"

namespace {

class PerfMainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A launcher's variables would make PerfMain wait for other ranks.
    for (const char* name :
         {"LOOM_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
      unsetenv(name);
    }
  }

  // Runs `loom perf <words...>` and returns its exit code.
  static int Run(std::vector<std::string> words) {
    words.insert(words.begin(), "perf");
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    return loom::tools::PerfMain(static_cast<int>(words.size()), argv.data());
  }
};

TEST_F(PerfMainTest, AllCollectivesPassTheirCheckAndWriteJson) {
  const std::string json = ::testing::TempDir() + "loom_perf_" + std::to_string(getpid()) + ".json";
  EXPECT_EQ(Run({"all", "-b", "64", "-e", "4K", "-f", "8", "-n", "2", "-w", "1", "-d", "all", "-o",
                 "all", "--json", json}),
            0);
  std::ifstream in(json);
  ASSERT_TRUE(in.good()) << json;
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  for (const char* c : {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "\"reduce\"",
                        "alltoall", "sendrecv", "gather", "scatter", "hypercube"}) {
    EXPECT_NE(s.find(c), std::string::npos) << c;
  }
  EXPECT_NE(s.find("\"type\": \"bfloat16\", \"redop\": \"avg\""), std::string::npos);
  EXPECT_NE(s.find("\"type\": \"half\", \"redop\": \"mulsum\""), std::string::npos);
  EXPECT_NE(s.find("\"out_of_bounds\": 0"), std::string::npos);
  std::remove(json.c_str());
}

TEST_F(PerfMainTest, BlockingAndAggregatedModesPass) {
  EXPECT_EQ(Run({"all_reduce_perf", "-b", "1K", "-e", "1K", "-n", "3", "-z", "1"}), 0);
  EXPECT_EQ(Run({"all_gather", "-b", "8", "-e", "1K", "-f", "8", "-n", "3", "--back-to-back", "1"}),
            0);
  EXPECT_EQ(Run({"sendrecv", "-b", "1K", "-e", "2K", "-f", "2", "-n", "3", "-m", "4"}), 0);
  EXPECT_EQ(Run({"all_reduce", "-b", "8", "-e", "1K", "-f", "8", "-n", "3", "-w", "2",
                 "--warmup-per-size", "1"}),
            0);
  EXPECT_EQ(Run({"reduce_scatter", "-b", "1K", "-e", "1K", "-a", "0", "-d", "half"}), 0);
  // --fixed-buffers makes every timed call the same one (made once).
  EXPECT_EQ(Run({"all_reduce", "-b", "8", "-e", "64K", "-f", "32", "-n", "3", "--fixed-buffers",
                 "--back-to-back", "1"}),
            0);
  EXPECT_EQ(Run({"all_gather", "-b", "1K", "-e", "1K", "-n", "3", "-m", "2", "--fixed-buffers"}),
            0);
}

TEST_F(PerfMainTest, NcclTestsFlagsRun) {
  // Every root in turn, -c 3 checks, -z 2 and 3, CPU time, timestamps,
  // cycles, misaligned buffers, the memory line, and the accepted GPU flags.
  EXPECT_EQ(
      Run({"gather", "-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-r", "-1",  "-c", "3", "-z",
           "3",      "-C", "1", "-S", "1",  "-N", "2", "-u", "3", "-d", "all", "-M", "1"}),
      0);
  EXPECT_EQ(Run({"scatter", "-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-z",
                 "2",       "-u", "1", "-G", "10", "-y", "1", "-x", "1", "-D",
                 "1",       "-V", "4", "-I", "1",  "-K", "1", "-T", "60"}),
            0);
  EXPECT_EQ(Run({"hypercube", "-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-m", "2"}), 0);
  EXPECT_EQ(Run({"all_reduce", "-b", "8", "-e", "1K", "-f", "8", "-n", "2", "-u", "2", "-o", "all",
                 "-d", "half", "--back-to-back", "1"}),
            0);
}

TEST_F(PerfMainTest, PlotsTheRunAndSavedRuns) {
  const std::string dir = ::testing::TempDir() + "loom_perf_plot_" + std::to_string(getpid());
  const std::string a = dir + "_a.json", b = dir + "_b.json", svg = dir + ".svg";
  const std::string cmp = dir + "_cmp.svg";
  EXPECT_EQ(
      Run({"all_reduce", "-b", "8", "-e", "64K", "-f", "8", "-n", "2", "--json", a, "--plot", svg}),
      0);
  EXPECT_EQ(Run({"gather", "-b", "8", "-e", "64K", "-f", "8", "-n", "2", "--json", b}), 0);
  EXPECT_EQ(Run({"--plot", cmp, "--from", a, "--from", b}), 0);
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const std::string live = read(svg);
  EXPECT_NE(live.find("<svg"), std::string::npos);
  EXPECT_NE(live.find(">all_reduce</text>"), std::string::npos);
  const std::string both = read(cmp);
  const std::string stem_a = a.substr(a.find_last_of('/') + 1, a.size() - a.find_last_of('/') - 6);
  EXPECT_NE(both.find(">" + stem_a + " all_reduce</text>"), std::string::npos) << stem_a;
  EXPECT_NE(both.find(" gather</text>"), std::string::npos);
  EXPECT_EQ(Run({"--plot", cmp, "--from", dir + "_missing.json"}), 2);
  for (const std::string& f : {a, b, svg, cmp}) std::remove(f.c_str());
}

TEST_F(PerfMainTest, CorruptionMakesTheCheckFail) {
  EXPECT_EQ(Run({"all_reduce", "-b", "1K", "-e", "1K", "-n", "1", "--corrupt-for-test"}), 1);
  EXPECT_EQ(Run({"all_gather", "-b", "1K", "-e", "1K", "-n", "1", "-d", "bfloat16",
                 "--corrupt-for-test"}),
            1);
  for (const char* c : {"gather", "scatter", "hypercube"}) {
    EXPECT_EQ(Run({c, "-b", "1K", "-e", "1K", "-n", "1", "--corrupt-for-test"}), 1) << c;
  }
  // Without a check there is nothing to fail.
  EXPECT_EQ(Run({"all_reduce", "-b", "1K", "-e", "1K", "-n", "1", "-c", "0", "--corrupt-for-test"}),
            0);
}

TEST_F(PerfMainTest, UsageAndRuntimeErrors) {
  EXPECT_EQ(Run({"--help"}), 0);
  EXPECT_EQ(Run({"all_reduce", "-t", "2"}), 2);
  EXPECT_EQ(Run({"nonsense"}), 2);
  EXPECT_EQ(Run({}), 2);
  // Root 3 does not exist in a world of one.
  EXPECT_EQ(Run({"broadcast", "-b", "8", "-e", "8", "-r", "3"}), 3);
  EXPECT_EQ(Run({"scatter", "-b", "8", "-e", "8", "-r", "1"}), 3);
  EXPECT_EQ(Run({"all_reduce", "-b", "8", "-e", "8", "--json", "/nonexistent-dir/x.json"}), 3);
}

}  // namespace
