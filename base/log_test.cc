// Tests for the logger: NCCL_DEBUG / NCCL_DEBUG_SUBSYS / NCCL_DEBUG_FILE
// parsing, LOOM_* precedence, line format, and whole lines under concurrency.
#include "base/log.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/params.h"

namespace loom::log {
namespace {

const char* const kVars[] = {"LOOM_DEBUG",        "NCCL_DEBUG",      "LOOM_DEBUG_SUBSYS",
                             "NCCL_DEBUG_SUBSYS", "LOOM_DEBUG_FILE", "NCCL_DEBUG_FILE",
                             "LOOM_CONF_FILE",    "NCCL_CONF_FILE"};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) out.push_back(line);
  return out;
}

// The host part of the prefix, computed the way NCCL does.
std::string ExpectedHost() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  std::string h(buf);
  h = h.substr(0, h.find('.'));
  for (char& c : h) {
    if (c == '%' || c == '/') c = '-';
  }
  return h;
}

std::string Prefix(const char* level) {
  return ExpectedHost() + ":" + std::to_string(getpid()) + ":" + std::to_string(gettid()) +
         " loom " + level + " ";
}

// Clears every variable the logger reads, points the config search at an
// empty file (so ~/.nccl.conf cannot leak in) and restores it all afterwards.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_.emplace_back(v, old ? std::optional<std::string>(old) : std::nullopt);
      unsetenv(v);
    }
    std::string tmpl = ::testing::TempDir() + "loom_log_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    conf_ = dir_ + "/empty.conf";
    std::ofstream(conf_).close();
    setenv("LOOM_CONF_FILE", conf_.c_str(), 1);
    Reload();
  }

  void TearDown() override {
    for (auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
    Reload();  // closes any debug file before its directory goes away
    std::string cmd = "rm -rf '" + dir_ + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }

  static void Reload() {
    params::ReloadConfigFilesForTest();
    ReloadFromEnv();
  }

  static int LevelAfter(const char* nccl_debug) {
    setenv("NCCL_DEBUG", nccl_debug, 1);
    Reload();
    return internal::g_level;
  }

  static uint64_t MaskAfter(const char* subsys) {
    setenv("NCCL_DEBUG_SUBSYS", subsys, 1);
    Reload();
    return internal::g_subsys_mask;
  }

  // Whether a system-wide config file could shadow a default on this machine.
  static bool SystemConfigPresent() {
    return access("/etc/loom.conf", F_OK) == 0 || access("/etc/nccl.conf", F_OK) == 0;
  }

  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
  std::string dir_;
  std::string conf_;
};

TEST_F(LogTest, UnsetMeansNoOutput) {
  if (SystemConfigPresent()) GTEST_SKIP() << "/etc/loom.conf or /etc/nccl.conf exists";
  EXPECT_EQ(internal::g_level, static_cast<int>(Level::kNone));
  EXPECT_FALSE(Enabled(Level::kWarn, kAll));
  EXPECT_FALSE(Enabled(Level::kVersion, kAll));
  ::testing::internal::CaptureStderr();
  LOOM_WARN(kInit, "must not appear %d", 1);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST_F(LogTest, LevelNamesAnyCase) {
  EXPECT_EQ(LevelAfter("VERSION"), 1);
  EXPECT_EQ(LevelAfter("warn"), 2);
  EXPECT_EQ(LevelAfter("Info"), 3);
  EXPECT_EQ(LevelAfter("abort"), 4);
  EXPECT_EQ(LevelAfter("TrAcE"), 5);
}

TEST_F(LogTest, UnknownLevelMeansNone) {
  EXPECT_EQ(LevelAfter("INFO2"), 0);
  EXPECT_EQ(LevelAfter("debug"), 0);
  EXPECT_EQ(LevelAfter(" INFO"), 0);
}

TEST_F(LogTest, LoomDebugBeatsNcclDebug) {
  setenv("LOOM_DEBUG", "WARN", 1);
  EXPECT_EQ(LevelAfter("TRACE"), 2);
  setenv("LOOM_DEBUG", "", 1);  // empty counts as unset
  EXPECT_EQ(LevelAfter("TRACE"), 5);
}

TEST_F(LogTest, LevelFromConfigFile) {
  std::ofstream(conf_) << "# comment\nNCCL_DEBUG=INFO\n";
  Reload();
  EXPECT_EQ(internal::g_level, 3);
  EXPECT_EQ(LevelAfter("WARN"), 2);  // the environment beats the file
}

TEST_F(LogTest, DefaultSubsysMaskIsNcclDefault) {
  if (SystemConfigPresent()) GTEST_SKIP() << "/etc/loom.conf or /etc/nccl.conf exists";
  EXPECT_EQ(internal::g_subsys_mask, kInit | kBootstrap | kEnv);
}

TEST_F(LogTest, SubsysList) {
  EXPECT_EQ(MaskAfter("COLL,net"), kColl | kNet);
  EXPECT_EQ(MaskAfter("INIT,COLL,P2P,SHM,NET,GRAPH,TUNING,ENV,ALLOC,CALL,PROXY,NVLS,BOOTSTRAP,REG,"
                      "PROFILE,RAS"),
            0xffffull);
  EXPECT_EQ(MaskAfter(" coll , ,P2P,"), kColl | kP2P);
  EXPECT_EQ(MaskAfter("ALL"), static_cast<uint64_t>(kAll));
}

TEST_F(LogTest, SubsysInverted) {
  EXPECT_EQ(MaskAfter("^INIT,ENV"), ~static_cast<uint64_t>(kInit | kEnv));
  EXPECT_EQ(MaskAfter("^ALL"), 0u);
  EXPECT_EQ(MaskAfter("^"), static_cast<uint64_t>(kAll));
  EXPECT_EQ(MaskAfter("COLL,^NET"), kColl);  // '^' only counts in front
}

TEST_F(LogTest, UnknownSubsysIsSkippedWithAWarning) {
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_SUBSYS", "BOGUS,COLL", 1);
  ::testing::internal::CaptureStderr();
  Reload();
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(internal::g_subsys_mask, kColl);
  EXPECT_NE(err.find("loom WARN ignoring unknown debug subsystem(s) 'BOGUS'"), std::string::npos)
      << err;
}

TEST_F(LogTest, LoomSubsysBeatsNccl) {
  setenv("LOOM_DEBUG_SUBSYS", "NET", 1);
  EXPECT_EQ(MaskAfter("COLL"), kNet);
}

TEST_F(LogTest, EnabledFollowsLevelAndMask) {
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "COLL", 1);
  Reload();
  EXPECT_TRUE(Enabled(Level::kInfo, kColl));
  EXPECT_TRUE(Enabled(Level::kInfo, kColl | kNet));
  EXPECT_FALSE(Enabled(Level::kInfo, kNet));
  EXPECT_TRUE(Enabled(Level::kWarn, kNet));  // WARN ignores the mask
  EXPECT_TRUE(Enabled(Level::kVersion, kNet));
  EXPECT_FALSE(Enabled(Level::kTrace, kColl));
}

TEST_F(LogTest, LineFormatInFileWithHostAndPid) {
  setenv("NCCL_DEBUG", "TRACE", 1);
  setenv("NCCL_DEBUG_SUBSYS", "ALL", 1);
  setenv("NCCL_DEBUG_FILE", (dir_ + "/log.%h.%p").c_str(), 1);
  Reload();
  LOOM_WARN(kNet, "warn %d", 1);
  LOOM_INFO(kColl, "info %s", "two");
  const int trace_line = __LINE__ + 1;
  LOOM_TRACE(kP2P, "trace %u", 3u);
  Write(Level::kVersion, kInit, __FILE__, __LINE__, "loom 0.1");

  std::string path = dir_ + "/log." + ExpectedHost() + "." + std::to_string(getpid());
  std::vector<std::string> lines = Lines(ReadFile(path));
  ASSERT_EQ(lines.size(), 4u) << path;
  EXPECT_EQ(lines[0], Prefix("WARN") + "warn 1");
  EXPECT_EQ(lines[1], Prefix("INFO") + "info two");
  EXPECT_EQ(lines[2], Prefix("TRACE") + "log_test.cc:" + std::to_string(trace_line) + " trace 3");
  EXPECT_EQ(lines[3], Prefix("VERSION") + "loom 0.1");
}

TEST_F(LogTest, FileNameEscapes) {
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("LOOM_DEBUG_FILE", (dir_ + "/a%%b%xc%").c_str(), 1);
  setenv("NCCL_DEBUG_FILE", (dir_ + "/not-this-one").c_str(), 1);
  Reload();
  LOOM_WARN(kInit, "x");
  EXPECT_EQ(Lines(ReadFile(dir_ + "/a%b%xc%")).size(), 1u);
  EXPECT_NE(access((dir_ + "/not-this-one").c_str(), F_OK), 0);
}

TEST_F(LogTest, ReloadTruncatesTheFile) {
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", (dir_ + "/log").c_str(), 1);
  Reload();
  LOOM_WARN(kInit, "first");
  Reload();
  LOOM_WARN(kInit, "second");
  std::vector<std::string> lines = Lines(ReadFile(dir_ + "/log"));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], Prefix("WARN") + "second");
}

TEST_F(LogTest, VersionLevelDoesNotCreateTheFile) {
  setenv("NCCL_DEBUG", "VERSION", 1);
  setenv("NCCL_DEBUG_FILE", (dir_ + "/log").c_str(), 1);
  ::testing::internal::CaptureStderr();
  Reload();
  Write(Level::kVersion, kInit, __FILE__, __LINE__, "v");
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(access((dir_ + "/log").c_str(), F_OK), 0);
  EXPECT_EQ(err, Prefix("VERSION") + "v\n");
}

TEST_F(LogTest, UnopenableFileFallsBackToStderr) {
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_FILE", (dir_ + "/no/such/dir/log").c_str(), 1);
  ::testing::internal::CaptureStderr();
  Reload();
  LOOM_WARN(kInit, "still visible");
  std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind(Prefix("WARN") + "cannot open debug file", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("env NCCL_DEBUG_FILE"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("No such file or directory"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1], Prefix("WARN") + "still visible");
}

TEST_F(LogTest, LongMessagesAndTrailingNewline) {
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "ALL", 1);
  setenv("NCCL_DEBUG_FILE", (dir_ + "/log").c_str(), 1);
  Reload();
  std::string big(5000, 'z');
  LOOM_INFO(kNet, "[%s]", big.c_str());
  LOOM_INFO(kNet, "ends its own line\n");
  LOOM_INFO(kNet, "%s", "");
  std::vector<std::string> lines = Lines(ReadFile(dir_ + "/log"));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], Prefix("INFO") + "[" + big + "]");
  EXPECT_EQ(lines[1], Prefix("INFO") + "ends its own line");
  EXPECT_EQ(lines[2], Prefix("INFO"));
}

TEST_F(LogTest, WriteChecksTheLevelItself) {
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", (dir_ + "/log").c_str(), 1);
  Reload();
  Write(Level::kInfo, kAll, __FILE__, __LINE__, "filtered");
  EXPECT_EQ(ReadFile(dir_ + "/log"), "");
}

// Lines that are long enough that a split write would show.
void CheckWholeLines(const std::string& text, size_t expected, size_t payload) {
  std::vector<std::string> lines = Lines(text);
  ASSERT_EQ(lines.size(), expected);
  for (const std::string& l : lines) {
    size_t info = l.find(" loom INFO ");
    ASSERT_NE(info, std::string::npos) << l;
    std::string body = l.substr(info + 11);
    ASSERT_EQ(body.size(), payload + 1) << l.substr(0, 200);
    EXPECT_EQ(body.find_first_not_of(body[0]), std::string::npos) << l.substr(0, 200);
  }
}

TEST_F(LogTest, ConcurrentFirstUseAndWholeLinesFromThreads) {
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "COLL", 1);
  setenv("NCCL_DEBUG_FILE", (dir_ + "/log").c_str(), 1);
  params::ReloadConfigFilesForTest();
  __atomic_store_n(&internal::g_level, -1, __ATOMIC_RELEASE);  // as before the first use
  constexpr int kThreads = 8, kLines = 200;
  constexpr size_t kPayload = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      std::string body(kPayload + 1, static_cast<char>('a' + t));
      for (int i = 0; i < kLines; ++i) LOOM_INFO(kColl, "%s", body.c_str());
    });
  }
  for (auto& th : threads) th.join();
  CheckWholeLines(ReadFile(dir_ + "/log"), kThreads * kLines, kPayload);
}

TEST_F(LogTest, WholeLinesFromProcesses) {
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "COLL", 1);
  setenv("NCCL_DEBUG_FILE", (dir_ + "/log").c_str(), 1);
  Reload();
  constexpr int kProcs = 3, kLines = 300;
  constexpr size_t kPayload = 3000;
  // The children wait at a pipe until all exist, so that they really overlap.
  int start[2];
  ASSERT_EQ(pipe(start), 0);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(start[1]);
      char c;
      while (read(start[0], &c, 1) < 0 && errno == EINTR) {
      }
      std::string body(kPayload + 1, static_cast<char>('A' + p));
      for (int i = 0; i < kLines; ++i) LOOM_INFO(kColl, "%s", body.c_str());
      _exit(0);
    }
    children.push_back(pid);
  }
  close(start[0]);
  close(start[1]);  // EOF releases the children together
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  CheckWholeLines(ReadFile(dir_ + "/log"), kProcs * kLines, kPayload);
}

}  // namespace
}  // namespace loom::log
