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
                        "alltoall", "sendrecv"}) {
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

TEST_F(PerfMainTest, CorruptionMakesTheCheckFail) {
  EXPECT_EQ(Run({"all_reduce", "-b", "1K", "-e", "1K", "-n", "1", "--corrupt-for-test"}), 1);
  EXPECT_EQ(Run({"all_gather", "-b", "1K", "-e", "1K", "-n", "1", "-d", "bfloat16",
                 "--corrupt-for-test"}),
            1);
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
  EXPECT_EQ(Run({"all_reduce", "-b", "8", "-e", "8", "--json", "/nonexistent-dir/x.json"}), 3);
}

}  // namespace
