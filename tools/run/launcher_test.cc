// Tests of `loom run`'s parsing and helpers, plus a few in-process Launch
// runs (tests/launcher/ runs the built binary with more processes).
#include "tools/run/launcher.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace loom::tools {
namespace {

// Owns argv storage for ParseRunArgs; argv[0] is "run" like RunMain gets.
Result<LaunchOptions> Parse(std::initializer_list<std::string> args) {
  std::vector<std::string> storage{"run"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  return ParseRunArgs(static_cast<int>(storage.size()), argv.data());
}

// The error message of a parse that must fail.
std::string ParseError(std::initializer_list<std::string> args) {
  Result<LaunchOptions> r = Parse(args);
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  return r.status().message();
}

TEST(ParseRunArgs, MinimalCommandAndDefaults) {
  Result<LaunchOptions> r = Parse({"-np", "4", "hostname"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->num_ranks, 4);
  EXPECT_EQ(r->command, std::vector<std::string>{"hostname"});
  EXPECT_FALSE(r->tag_output);
  EXPECT_TRUE(r->output_dir.empty());
  EXPECT_EQ(r->root_host, "127.0.0.1");
  EXPECT_EQ(r->root_port, 0);
  EXPECT_EQ(r->kill_grace_ms, 3000);
  EXPECT_EQ(r->timeout_s, 0);
  EXPECT_TRUE(r->extra_env.empty());
}

TEST(ParseRunArgs, SynonymsForRankCount) {
  for (const char* flag : {"-n", "-np", "--np"}) {
    Result<LaunchOptions> r = Parse({flag, "2", "true"});
    ASSERT_TRUE(r.ok()) << flag;
    EXPECT_EQ(r->num_ranks, 2) << flag;
  }
  Result<LaunchOptions> r = Parse({"--np=3", "true"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_ranks, 3);
}

TEST(ParseRunArgs, AllOptionsBothSpellings) {
  Result<LaunchOptions> r = Parse({"-np", "2", "--tag-output", "-x", "A=1", "-x", "B=x=y",
                                   "--root-host", "10.0.0.1", "--root-port=2900", "--kill-grace-ms",
                                   "0", "--timeout=1.5", "--", "prog", "-np", "--flag-for-prog"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->tag_output);
  EXPECT_EQ(r->extra_env, (std::vector<std::string>{"A=1", "B=x=y"}));
  EXPECT_EQ(r->root_host, "10.0.0.1");
  EXPECT_EQ(r->root_port, 2900);
  EXPECT_EQ(r->kill_grace_ms, 0);
  EXPECT_DOUBLE_EQ(r->timeout_s, 1.5);
  EXPECT_EQ(r->command, (std::vector<std::string>{"prog", "-np", "--flag-for-prog"}));
}

TEST(ParseRunArgs, CommandStartsAtFirstNonOption) {
  Result<LaunchOptions> r = Parse({"-np", "1", "sh", "-c", "--tag-output"});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->tag_output);
  EXPECT_EQ(r->command, (std::vector<std::string>{"sh", "-c", "--tag-output"}));
  // A lone "-" is a command name, not an option.
  r = Parse({"-np", "1", "-"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->command, std::vector<std::string>{"-"});
}

TEST(ParseRunArgs, OutputDir) {
  Result<LaunchOptions> r = Parse({"-n", "1", "--output-dir", "/tmp/x", "true"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->output_dir, "/tmp/x");
}

TEST(ParseRunArgs, HelpWinsEvenWithoutCommand) {
  for (const char* flag : {"--help", "-h"}) {
    Result<LaunchOptions> r = Parse({flag});
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->show_help);
  }
  EXPECT_NE(RunUsage().find("-np N"), std::string_view::npos);
}

TEST(ParseRunArgs, BadRankCounts) {
  EXPECT_NE(ParseError({"-np", "0", "true"}).find("-np"), std::string::npos);
  EXPECT_NE(ParseError({"-np", "-3", "true"}).find("'-3'"), std::string::npos);
  EXPECT_NE(ParseError({"-np", "4x", "true"}).find("'4x'"), std::string::npos);
  EXPECT_NE(ParseError({"-np", "", "true"}).find("-np"), std::string::npos);
  EXPECT_NE(ParseError({"-np", "99999999999", "true"}).find("4096"), std::string::npos);
  EXPECT_NE(ParseError({"-np", "4097", "true"}).find("4096"), std::string::npos);
  EXPECT_TRUE(Parse({"-np", "4096", "true"}).ok());
}

TEST(ParseRunArgs, MissingPieces) {
  EXPECT_NE(ParseError({"true"}).find("missing -np"), std::string::npos);
  EXPECT_NE(ParseError({}).find("missing -np"), std::string::npos);
  EXPECT_NE(ParseError({"-np", "2"}).find("missing the command"), std::string::npos);
  EXPECT_NE(ParseError({"-np", "2", "--"}).find("missing the command"), std::string::npos);
  EXPECT_NE(ParseError({"-np"}).find("-np needs a value"), std::string::npos);
  EXPECT_NE(ParseError({"-np", "2", "--timeout"}).find("--timeout needs a value"),
            std::string::npos);
}

TEST(ParseRunArgs, UnknownAndMalformedOptions) {
  EXPECT_NE(ParseError({"-np", "2", "--bogus", "true"}).find("unknown option '--bogus'"),
            std::string::npos);
  EXPECT_NE(ParseError({"-np", "2", "--tag-output=yes", "true"}).find("takes no value"),
            std::string::npos);
  EXPECT_NE(ParseError({"-np", "2", "--output-dir=", "true"}).find("--output-dir"),
            std::string::npos);
  EXPECT_NE(ParseError({"-np", "2", "--root-host", "", "true"}).find("--root-host"),
            std::string::npos);
  EXPECT_NE(ParseError({"-np", "2", "--root-port", "65536", "true"}).find("--root-port"),
            std::string::npos);
  EXPECT_NE(ParseError({"-np", "2", "--kill-grace-ms", "-1", "true"}).find("--kill-grace-ms"),
            std::string::npos);
}

TEST(ParseRunArgs, Timeouts) {
  EXPECT_TRUE(Parse({"-np", "1", "--timeout", "0", "true"}).ok());
  EXPECT_TRUE(Parse({"-np", "1", "--timeout", "2592000", "true"}).ok());
  for (const char* bad : {"-1", "nan", "inf", "1s", "", "2592001"}) {
    EXPECT_NE(ParseError({"-np", "1", "--timeout", bad, "true"}).find("--timeout"),
              std::string::npos)
        << bad;
  }
}

TEST(ParseRunArgs, ExtraEnvironment) {
  Result<LaunchOptions> r = Parse({"-np", "1", "-x", "EMPTY=", "-x", "KEEP", "true"});
  ASSERT_TRUE(r.ok());
  // A bare NAME is accepted for mpirun compatibility and needs no entry.
  EXPECT_EQ(r->extra_env, std::vector<std::string>{"EMPTY="});
  for (const char* bad : {"=v", "1A=v", "A-B=v", ""}) {
    EXPECT_NE(ParseError({"-np", "1", "-x", bad, "true"}).find("NAME=value"), std::string::npos)
        << bad;
  }
  EXPECT_NE(ParseError({"-np", "1", "-x", "LOOM_RANK=1", "true"}).find("launcher sets"),
            std::string::npos);
  EXPECT_NE(ParseError({"-np", "1", "-x", "LOOM_ROOT", "true"}).find("launcher sets"),
            std::string::npos);
}

TEST(ParseRunArgs, BindTo) {
  EXPECT_EQ(Parse({"-np", "1", "true"})->bind_to, BindTo::kAuto);
  EXPECT_EQ(Parse({"-np", "1", "--bind-to", "core", "true"})->bind_to, BindTo::kCore);
  EXPECT_EQ(Parse({"-np", "1", "--bind-to=none", "true"})->bind_to, BindTo::kNone);
  EXPECT_EQ(Parse({"-np", "1", "--bind-to=auto", "true"})->bind_to, BindTo::kAuto);
  EXPECT_NE(ParseError({"-np", "1", "--bind-to", "socket", "true"}).find("auto, core or none"),
            std::string::npos);
}

using Cpus = std::vector<std::vector<int>>;

TEST(Bindings, GroupsOfCpusInOrderOfFirstCpu) {
  // CPUs 0 and 2 share core "a", 1 and 3 core "b"; CPU 4 is alone.
  auto key = [](int cpu) { return cpu == 4 ? std::string("c") : std::string(cpu % 2 ? "b" : "a"); };
  EXPECT_EQ(GroupCpus({0, 1, 2, 3, 4}, key), (Cpus{{0, 2}, {1, 3}, {4}}));
  EXPECT_EQ(GroupCpus({3, 4}, key), (Cpus{{3}, {4}}));
  EXPECT_EQ(CpuListString({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(CpuListString({}), "");
}

TEST(Bindings, CorePerRankWhenTheRanksFit) {
  const Cpus cores = {{0, 2}, {1, 3}, {4}};
  const Cpus numa = {{0, 1, 2, 3, 4}};
  for (BindTo b : {BindTo::kAuto, BindTo::kCore}) {
    Result<Placement> two = Bindings(b, 2, cores, numa);
    ASSERT_TRUE(two.ok());
    EXPECT_EQ(two->cpus, (Cpus{{0, 2}, {1, 3}}));
    EXPECT_EQ(two->note, "");
  }
  Result<Placement> none = Bindings(BindTo::kNone, 2, cores, numa);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->cpus, (Cpus{{}, {}}));
}

TEST(Bindings, MoreRanksThanCores) {
  const Cpus cores = {{0}, {1}, {2}, {3}};
  Result<Placement> strict = Bindings(BindTo::kCore, 5, cores, {{0, 1, 2, 3}});
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("5 ranks but only 4 cores"), std::string::npos);

  // One NUMA node: unbound, said once.
  Result<Placement> flat = Bindings(BindTo::kAuto, 5, cores, {{0, 1, 2, 3}});
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->cpus, (Cpus(5)));
  EXPECT_NE(flat->note.find("5 ranks but only 4 cores: ranks are not bound"), std::string::npos);

  // Two NUMA nodes: ranks in blocks, neighbours on one node.
  Result<Placement> numa = Bindings(BindTo::kAuto, 6, cores, {{0, 1}, {2, 3}});
  ASSERT_TRUE(numa.ok());
  EXPECT_EQ(numa->cpus, (Cpus{{0, 1}, {0, 1}, {0, 1}, {2, 3}, {2, 3}, {2, 3}}));
  EXPECT_NE(numa->note.find("NUMA"), std::string::npos);
}

TEST(ParseRunArgs, TagOutputAndOutputDirExclude) {
  EXPECT_NE(ParseError({"-np", "1", "--tag-output", "--output-dir", "d", "true"})
                .find("cannot be combined"),
            std::string::npos);
}

TEST(LineTagger, WholeLinesOnly) {
  LineTagger t("[3] ");
  EXPECT_EQ(t.Feed(""), "");
  EXPECT_EQ(t.Feed("hel"), "");
  EXPECT_EQ(t.Feed("lo\nwor"), "[3] hello\n");
  EXPECT_EQ(t.Feed("ld\n\nx\ny"), "[3] world\n[3] \n[3] x\n");
  EXPECT_EQ(t.Flush(), "[3] y\n");
  EXPECT_EQ(t.Flush(), "");
  EXPECT_EQ(t.Feed("\n"), "[3] \n");
}

TEST(LineTagger, KeepsBinaryAndCarriageReturns) {
  LineTagger t("[0] ");
  std::string data("a\0b\r\n", 5);
  EXPECT_EQ(t.Feed(data), "[0] " + data);
}

TEST(LineTagger, SplitsOverlongLines) {
  LineTagger t("[1] ");
  std::string big(1 << 20, 'z');
  std::string out = t.Feed(big);
  EXPECT_EQ(out, "[1] " + big + "\n");
  EXPECT_EQ(t.Flush(), "");
}

// Wait statuses from real children, not hand-built bit patterns.
int StatusOfChild(void (*body)()) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(WaitStatus, ExitAndSignal) {
  int exit0 = StatusOfChild([] { _exit(0); });
  int exit3 = StatusOfChild([] { _exit(3); });
  int killed = StatusOfChild([] { raise(SIGKILL); });
  EXPECT_EQ(DescribeWaitStatus(exit0), "exited with code 0");
  EXPECT_EQ(DescribeWaitStatus(exit3), "exited with code 3");
  EXPECT_EQ(DescribeWaitStatus(killed), "killed by signal 9 (Killed)");
  EXPECT_EQ(ExitCodeOf(exit0), 0);
  EXPECT_EQ(ExitCodeOf(exit3), 3);
  EXPECT_EQ(ExitCodeOf(killed), 137);
}

TEST(RankEnvironment, SetsLauncherVariablesAndOverrides) {
  LaunchOptions o;
  o.num_ranks = 4;
  o.extra_env = {"FOO=x", "BAR=1", "FOO=y"};
  const char* base[] = {"HOME=/root",      "FOO=inherited",     "LOOM_RANK=9",
                        "LOOM_JOB_ID=old", "LOOM_TIMEOUT_MS=5", nullptr};
  std::vector<std::string> env = RankEnvironment(o, 2, "127.0.0.1:999", "00ff", base);
  std::vector<std::string> want{"HOME=/root",
                                "LOOM_TIMEOUT_MS=5",
                                "BAR=1",
                                "FOO=y",
                                "LOOM_RANK=2",
                                "LOOM_WORLD_SIZE=4",
                                "LOOM_LOCAL_RANK=2",
                                "LOOM_LOCAL_SIZE=4",
                                "LOOM_ROOT=127.0.0.1:999",
                                "LOOM_JOB_ID=00ff"};
  EXPECT_EQ(env, want);
  EXPECT_EQ(RankEnvironment(o, 0, "h:1", "id", nullptr).size(), 8u);  // 2 from -x, 6 LOOM_*
}

class FindInPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/loom_launcher_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(mkdir((dir_ + "/a").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((dir_ + "/b").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((dir_ + "/a/tool").c_str(), 0755), 0);  // a directory, not a program
    Touch(dir_ + "/a/plain", 0644);                         // not executable
    Touch(dir_ + "/b/plain", 0755);
    Touch(dir_ + "/b/tool", 0755);
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  static void Touch(const std::string& path, mode_t mode) {
    std::ofstream(path) << "#!/bin/sh\n";
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
  }
  std::string dir_;
};

TEST_F(FindInPathTest, SkipsDirectoriesAndNonExecutables) {
  std::string path = dir_ + "/a:" + dir_ + "/b";
  EXPECT_EQ(FindInPath("tool", path), dir_ + "/b/tool");
  EXPECT_EQ(FindInPath("plain", path), dir_ + "/b/plain");
  EXPECT_EQ(FindInPath("missing", path), std::nullopt);
  EXPECT_EQ(FindInPath("", path), std::nullopt);
  EXPECT_EQ(FindInPath("tool", ""), std::nullopt);  // only the current directory
}

TEST_F(FindInPathTest, SlashMeansNoLookup) {
  EXPECT_EQ(FindInPath("./x", "/nonexistent"), "./x");
  EXPECT_EQ(FindInPath("/bin/sh", ""), "/bin/sh");
}

TEST(FormatRootAddress, BracketsIpv6) {
  EXPECT_EQ(FormatRootAddress("127.0.0.1", 29500), "127.0.0.1:29500");
  EXPECT_EQ(FormatRootAddress("node7", 1), "node7:1");
  EXPECT_EQ(FormatRootAddress("::1", 80), "[::1]:80");
  EXPECT_EQ(FormatRootAddress("[::1]", 80), "[::1]:80");
}

// ---- Launch in this process (single-threaded gtest main) -------------------

LaunchOptions Job(int n, std::vector<std::string> command) {
  LaunchOptions o;
  o.num_ranks = n;
  o.command = std::move(command);
  o.kill_grace_ms = 500;
  return o;
}

TEST(Launch, ExitCodes) {
  EXPECT_EQ(Launch(Job(3, {"true"})), 0);
  EXPECT_EQ(Launch(Job(2, {"sh", "-c", "exit $((LOOM_RANK * 5))"})), 5);
  EXPECT_EQ(Launch(Job(1, {"sh", "-c", "kill -9 $$"})), 137);
  EXPECT_EQ(Launch(Job(2, {"loom-launcher-test-no-such-command"})), kExitNotFound);
  EXPECT_EQ(Launch(Job(2, {"/dev/null"})), kExitNotExecutable);
}

TEST(Launch, TimeoutAndKillAfterGrace) {
  LaunchOptions o = Job(2, {"sh", "-c", "trap '' TERM; sleep 30"});
  o.timeout_s = 0.2;
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Launch(o), kExitTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Launch, OutputDirHoldsEachRanksStreams) {
  char tmpl[] = "/tmp/loom_launcher_out.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  LaunchOptions o = Job(2, {"sh", "-c", "echo out $LOOM_RANK $LOOM_LOCAL_SIZE $V; echo err >&2"});
  o.output_dir = std::string(tmpl) + "/nested/dir";
  o.extra_env = {"V=x"};
  ASSERT_EQ(Launch(o), 0);
  for (int r = 0; r < 2; ++r) {
    std::string base = o.output_dir + "/rank." + std::to_string(r);
    std::stringstream out, err;
    out << std::ifstream(base + ".out").rdbuf();
    err << std::ifstream(base + ".err").rdbuf();
    EXPECT_EQ(out.str(), "out " + std::to_string(r) + " 2 x\n");
    EXPECT_EQ(err.str(), "err\n");
  }
  std::string cmd = std::string("rm -rf '") + tmpl + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
}

// "Cpus_allowed_list:\t0-1,4\n" -> {0, 1, 4}.
std::set<int> CpuList(const std::string& line) {
  std::set<int> cpus;
  std::stringstream in(line.substr(line.find('\t') + 1));
  std::string range;
  while (std::getline(in, range, ',')) {
    const size_t dash = range.find('-');
    const int lo = std::stoi(range.substr(0, dash));
    const int hi = dash == std::string::npos ? lo : std::stoi(range.substr(dash + 1));
    for (int c = lo; c <= hi; ++c) cpus.insert(c);
  }
  return cpus;
}

TEST(Launch, BindToCoreGivesEachRankItsOwnCpus) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  if (CPU_COUNT(&mine) < 2) GTEST_SKIP() << "needs two CPUs";
  char tmpl[] = "/tmp/loom_launcher_bind.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  LaunchOptions o = Job(2, {"sh", "-c", "grep Cpus_allowed_list /proc/self/status"});
  o.output_dir = tmpl;
  o.bind_to = BindTo::kCore;
  const int rc = Launch(o);
  std::string lists[2];
  for (int r = 0; r < 2; ++r) {
    std::stringstream out;
    out << std::ifstream(o.output_dir + "/rank." + std::to_string(r) + ".out").rdbuf();
    lists[r] = out.str();
  }
  std::string cmd = std::string("rm -rf '") + tmpl + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  if (rc == kExitLaunchError) GTEST_SKIP() << "fewer than two cores (hardware threads of one)";
  ASSERT_EQ(rc, 0);
  std::set<int> got[2];
  for (int r = 0; r < 2; ++r) {
    got[r] = CpuList(lists[r]);
    EXPECT_FALSE(got[r].empty()) << lists[r];
    for (int c : got[r]) EXPECT_TRUE(CPU_ISSET(c, &mine)) << c;
    EXPECT_LT(got[r].size(), static_cast<size_t>(CPU_COUNT(&mine))) << lists[r];
  }
  for (int c : got[0]) EXPECT_EQ(got[1].count(c), 0u) << "both ranks on CPU " << c;
}

}  // namespace
}  // namespace loom::tools
