// Tests for parameter lookup: LOOM_X over NCCL_X over config files over the
// default, config-file syntax and search order, and value parsing.
#include "base/params.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"

extern char** environ;

namespace loom {
namespace {

// Parameters private to these tests, one of each type.
constexpr int64_t kAnyInt = std::numeric_limits<int64_t>::min();
const IntParam kTestInt("TEST_INT", "42", true, "test", kAnyInt, INT64_MAX);
const IntParam kTestLoomOnly("TEST_LOOM_ONLY", "7", false, "test", kAnyInt, INT64_MAX);
const IntParam kTestRange("TEST_RANGE", "5", true, "test", 1, 9);
const BoolParam kTestFlagOn("TEST_FLAG_ON", "1", true, "test");
const BoolParam kTestFlagOff("TEST_FLAG_OFF", "0", true, "test");
const StringParam kTestStr("TEST_STR", "dflt", true, "test");

// Clears every LOOM_* / NCCL_* variable and HOME, points HOME at an empty
// directory, and restores it all afterwards (variables a test sets are
// removed). Config files are re-read for each test.
class ParamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("HOME") == nullptr) saved_.emplace_back("HOME", std::nullopt);
    for (const std::string& n : OurVariables()) {
      saved_.emplace_back(n, std::getenv(n.c_str()));
      unsetenv(n.c_str());
    }
    std::string tmpl = ::testing::TempDir() + "loom_params_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    setenv("HOME", dir_.c_str(), 1);
    Reload();
  }

  void TearDown() override {
    for (const std::string& n : OurVariables()) unsetenv(n.c_str());
    for (auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
    Reload();
    std::string cmd = "rm -rf '" + dir_ + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }

  // HOME and every LOOM_* / NCCL_* variable now set.
  static std::vector<std::string> OurVariables() {
    std::vector<std::string> names;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv(*e);
      std::string name = kv.substr(0, kv.find('='));
      if (name.rfind("LOOM_", 0) == 0 || name.rfind("NCCL_", 0) == 0 || name == "HOME") {
        names.push_back(name);
      }
    }
    return names;
  }

  static void Reload() {
    params::ReloadConfigFilesForTest();
    log::ReloadFromEnv();
  }

  // Writes a file under the test directory and returns its path.
  std::string WriteFile(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  // Whether a system-wide config file could shadow a default on this machine.
  static bool SystemConfigPresent() {
    return access("/etc/loom.conf", F_OK) == 0 || access("/etc/nccl.conf", F_OK) == 0;
  }

  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
  std::string dir_;
};

TEST_F(ParamsTest, DefaultsWhenNothingIsSet) {
  if (SystemConfigPresent()) GTEST_SKIP() << "/etc/loom.conf or /etc/nccl.conf exists";
  EXPECT_EQ(params::kTimeoutMs.Get(), 300000);
  EXPECT_EQ(params::kSocketIfname.Get(), "");
  EXPECT_EQ(params::kSocketFamily.Get(), "");
  EXPECT_EQ(params::kSocketNthreads.Get(), 1);
  EXPECT_EQ(params::kNsocksPerthread.Get(), 1);
  EXPECT_FALSE(params::kShmDisable.Get());
  EXPECT_EQ(params::kBuffsize.Get(), 1048576);
  EXPECT_EQ(params::kAlgo.Get(), "");
  EXPECT_EQ(params::kSpinUs.Get(), 50);
  EXPECT_EQ(params::kDebugSubsys.Get(), "INIT,BOOTSTRAP,ENV");
  for (const Param* p : params::All()) {
    Param::Raw raw = p->Lookup();
    EXPECT_EQ(raw.source, "default") << p->name();
    EXPECT_EQ(raw.value, p->default_value()) << p->name();
  }
}

TEST_F(ParamsTest, RegistryIsCompleteAndWellFormed) {
  const std::vector<const Param*>& all = params::All();
  ASSERT_EQ(all.size(), 34u);
  EXPECT_EQ(all.front(), &params::kTimeoutMs);
  EXPECT_EQ(all.back(), &params::kDebugFile);
  std::set<std::string> names;
  for (const Param* p : all) {
    EXPECT_TRUE(names.insert(p->name()).second) << "duplicate " << p->name();
    EXPECT_STRNE(p->doc(), "") << p->name();
    std::string def = p->default_value();
    if (p->type() == ParamType::kInt) {
      char* end = nullptr;
      std::strtoll(def.c_str(), &end, 0);
      EXPECT_TRUE(!def.empty() && *end == '\0') << p->name() << " default " << def;
    } else if (p->type() == ParamType::kBool) {
      EXPECT_TRUE(def == "0" || def == "1") << p->name() << " default " << def;
    }
  }
  EXPECT_FALSE(params::kTimeoutMs.nccl_twin());
  EXPECT_FALSE(params::kSpinUs.nccl_twin());
  EXPECT_TRUE(params::kSocketIfname.nccl_twin());
  EXPECT_TRUE(params::kBuffsize.nccl_twin());
}

TEST_F(ParamsTest, PrecedenceLoomEnvThenNcclEnvThenFileThenDefault) {
  std::string conf = WriteFile("conf", "NCCL_TEST_INT=2\nLOOM_TEST_INT=1\n");
  setenv("LOOM_CONF_FILE", conf.c_str(), 1);
  Reload();
  EXPECT_EQ(kTestInt.Get(), 1);  // LOOM_ beats NCCL_ within one file
  EXPECT_EQ(kTestInt.Lookup().source, "file " + conf);

  setenv("NCCL_TEST_INT", "3", 1);
  EXPECT_EQ(kTestInt.Get(), 3);  // env is read on every Get, no reload needed
  EXPECT_EQ(kTestInt.Lookup().source, "env NCCL_TEST_INT");

  setenv("LOOM_TEST_INT", "4", 1);
  EXPECT_EQ(kTestInt.Get(), 4);
  EXPECT_EQ(kTestInt.Lookup().source, "env LOOM_TEST_INT");

  setenv("LOOM_TEST_INT", "", 1);  // empty counts as unset
  EXPECT_EQ(kTestInt.Get(), 3);
  unsetenv("LOOM_TEST_INT");
  unsetenv("NCCL_TEST_INT");

  WriteFile("conf", "");
  Reload();
  EXPECT_EQ(kTestInt.Get(), 42);
  EXPECT_EQ(kTestInt.Lookup().source, "default");
}

TEST_F(ParamsTest, LoomOnlyParamIgnoresNcclNames) {
  std::string conf = WriteFile("conf", "NCCL_TEST_LOOM_ONLY=9\n");
  setenv("LOOM_CONF_FILE", conf.c_str(), 1);
  setenv("NCCL_TEST_LOOM_ONLY", "8", 1);
  Reload();
  EXPECT_EQ(kTestLoomOnly.Get(), 7);
  EXPECT_EQ(kTestLoomOnly.Lookup().source, "default");
  setenv("NCCL_TIMEOUT_MS", "5", 1);
  if (!SystemConfigPresent()) {
    EXPECT_EQ(params::kTimeoutMs.Get(), 300000);
  }
}

TEST_F(ParamsTest, IntSyntaxFollowsStrtollBaseZero) {
  struct Case {
    const char* text;
    int64_t want;
  };
  const Case cases[] = {{"0", 0},   {"-7", -7}, {"0x10", 16},
                        {"010", 8}, {"+5", 5},  {"9223372036854775807", INT64_MAX},
                        {" 12", 12}};
  for (const Case& c : cases) {
    setenv("LOOM_TEST_INT", c.text, 1);
    EXPECT_EQ(kTestInt.Get(), c.want) << c.text;
  }
}

TEST_F(ParamsTest, BadIntWarnsNamingVariableAndUsesDefault) {
  setenv("NCCL_DEBUG", "WARN", 1);
  Reload();
  for (const char* bad : {"abc", "12abc", "12 ", "1e3", "0x", "99999999999999999999", "08"}) {
    setenv("LOOM_TEST_INT", bad, 1);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(kTestInt.Get(), 42) << bad;
    std::string err = ::testing::internal::GetCapturedStderr();
    std::string want = std::string("loom WARN TEST_INT from env LOOM_TEST_INT is '") + bad +
                       "', not an integer from ";
    EXPECT_NE(err.find(want), std::string::npos) << err;
    EXPECT_NE(err.find("; using the default 42"), std::string::npos) << err;
  }
}

TEST_F(ParamsTest, IntegersOutsideTheirRangeAreRefusedNamingIt) {
  for (const char* v : {"0", "10", "-1"}) {
    setenv("NCCL_TEST_RANGE", v, 1);
    Status s = kTestRange.Check();
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << v;
    EXPECT_NE(s.message().find(std::string("NCCL_TEST_RANGE=") + v +
                               " is out of range: accepted 1 to 9 (default 5)"),
              std::string::npos)
        << s.message();
    EXPECT_EQ(kTestRange.Get(), 5) << v;  // Get() falls back, with a WARN
  }
  for (const char* v : {"1", "9", "0x9"}) {
    setenv("NCCL_TEST_RANGE", v, 1);
    EXPECT_TRUE(kTestRange.Check().ok()) << v;
  }
  setenv("NCCL_TEST_RANGE", "4M", 1);
  EXPECT_NE(kTestRange.Check().message().find("NCCL_TEST_RANGE=4M is not an integer: accepted 1 to 9"),
            std::string::npos)
      << kTestRange.Check().message();
}

// The cases that hung or went silent: a FIFO of no bytes, a negative timeout.
TEST_F(ParamsTest, ZeroBuffsizeAndNegativeTimeoutAreRefused) {
  setenv("NCCL_BUFFSIZE", "0", 1);
  setenv("LOOM_TIMEOUT_MS", "-5", 1);
  Status s = params::CheckAll();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("NCCL_BUFFSIZE=0 is out of range: accepted 4096 to 1073741824 "
                             "(default 1048576)"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("LOOM_TIMEOUT_MS=-5 is out of range: accepted 0 to"),
            std::string::npos)
      << s.message();
}

// Every integer and boolean parameter `loom info` lists refuses a malformed
// value, and an integer one value outside each end of its range.
TEST_F(ParamsTest, EveryListedParameterRefusesAMalformedValue) {
  EXPECT_TRUE(params::CheckAll().ok()) << params::CheckAll().message();
  int checked = 0;
  for (const Param* p : params::All()) {
    if (p->type() == ParamType::kString) continue;
    const std::string var = std::string("LOOM_") + p->name();
    std::vector<std::string> bad = {"bogus"};
    if (p->type() == ParamType::kInt) {
      if (p->min() > kAnyInt) bad.push_back(std::to_string(p->min() - 1));
      if (p->max() < INT64_MAX) bad.push_back(std::to_string(p->max() + 1));
    }
    for (const std::string& v : bad) {
      setenv(var.c_str(), v.c_str(), 1);
      Status s = params::CheckAll();
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << var << "=" << v;
      EXPECT_NE(s.message().find(var + "=" + v + " is "), std::string::npos) << s.message();
      ++checked;
    }
    unsetenv(var.c_str());
  }
  EXPECT_GE(checked, 30);
  EXPECT_TRUE(params::CheckAll().ok());
}

TEST_F(ParamsTest, BadIntInFileNamesTheFile) {
  std::string conf = WriteFile("conf", "NCCL_TEST_INT=lots\n");
  setenv("NCCL_CONF_FILE", conf.c_str(), 1);
  setenv("NCCL_DEBUG", "WARN", 1);
  Reload();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(kTestInt.Get(), 42);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("TEST_INT from file " + conf + " is 'lots'"), std::string::npos) << err;
}

TEST_F(ParamsTest, BoolSpellings) {
  for (const char* t : {"1", "true", "TRUE", "yes", "Yes", "on", "ON", "2", "-1", "0x1"}) {
    setenv("NCCL_TEST_FLAG_OFF", t, 1);
    EXPECT_TRUE(kTestFlagOff.Get()) << t;
  }
  for (const char* f : {"0", "false", "False", "no", "NO", "off", "Off", "0x0"}) {
    setenv("NCCL_TEST_FLAG_ON", f, 1);
    EXPECT_FALSE(kTestFlagOn.Get()) << f;
  }
  unsetenv("NCCL_TEST_FLAG_OFF");
  unsetenv("NCCL_TEST_FLAG_ON");
  EXPECT_TRUE(kTestFlagOn.Get());
  EXPECT_FALSE(kTestFlagOff.Get());
}

TEST_F(ParamsTest, BadBoolWarnsAndUsesDefault) {
  setenv("NCCL_DEBUG", "WARN", 1);
  Reload();
  for (const char* bad : {"maybe", "tru", "yes please", "1.0"}) {
    setenv("LOOM_TEST_FLAG_ON", bad, 1);
    setenv("LOOM_TEST_FLAG_OFF", bad, 1);
    ::testing::internal::CaptureStderr();
    EXPECT_TRUE(kTestFlagOn.Get()) << bad;
    EXPECT_FALSE(kTestFlagOff.Get()) << bad;
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(std::string("TEST_FLAG_ON from env LOOM_TEST_FLAG_ON is '") + bad +
                       "', not a boolean"),
              std::string::npos)
        << err;
  }
}

TEST_F(ParamsTest, StringsAreReturnedVerbatim) {
  setenv("NCCL_TEST_STR", " ^eth0,=ib0 ", 1);
  EXPECT_EQ(kTestStr.Get(), " ^eth0,=ib0 ");
  unsetenv("NCCL_TEST_STR");
  EXPECT_EQ(kTestStr.Get(), "dflt");
}

TEST_F(ParamsTest, ConfigFileSyntax) {
  std::string conf = WriteFile("conf",
                               "# a comment\n"
                               "\n"
                               "   \t\n"
                               "  # an indented comment: NCCL_TEST_STR=commented\n"
                               "no equals sign here\n"
                               "=value without a name\n"
                               "NCCL_TEST_STR = allreduce:ring=x \r\n"
                               "NCCL_TEST_STR=second is ignored\n"
                               "LOOM_TEST_FLAG_OFF=yes\n"
                               "NCCL_TEST_INT=0x20");  // no final newline
  setenv("LOOM_CONF_FILE", conf.c_str(), 1);
  Reload();
  EXPECT_EQ(kTestStr.Get(), "allreduce:ring=x");
  EXPECT_TRUE(kTestFlagOff.Get());
  EXPECT_EQ(kTestInt.Get(), 32);
}

TEST_F(ParamsTest, HomeFilesInOrder) {
  WriteFile(".loom_env", "NCCL_TEST_INT=1\n");
  WriteFile(".nccl.conf", "LOOM_TEST_INT=2\nNCCL_TEST_STR=from-nccl-conf\n");
  Reload();
  EXPECT_EQ(kTestInt.Get(), 1);  // the earlier file wins even with the NCCL_ name
  EXPECT_EQ(kTestInt.Lookup().source, "file " + dir_ + "/.loom_env");
  EXPECT_EQ(kTestStr.Get(), "from-nccl-conf");
}

TEST_F(ParamsTest, ConfFileVariableReplacesHomeFiles) {
  WriteFile(".loom_env", "NCCL_TEST_INT=1\nNCCL_TEST_STR=home\n");
  std::string nccl_conf = WriteFile("nccl-conf", "NCCL_TEST_INT=2\n");
  std::string loom_conf = WriteFile("loom-conf", "NCCL_TEST_INT=3\n");
  setenv("NCCL_CONF_FILE", nccl_conf.c_str(), 1);
  Reload();
  EXPECT_EQ(kTestInt.Get(), 2);
  EXPECT_EQ(kTestStr.Get(), "dflt");  // home files are not read at all
  setenv("LOOM_CONF_FILE", loom_conf.c_str(), 1);
  Reload();
  EXPECT_EQ(kTestInt.Get(), 3);
}

TEST_F(ParamsTest, EmptyValueInFileDoesNotHideLaterFile) {
  WriteFile(".loom_env", "NCCL_TEST_STR=\n");
  WriteFile(".nccl.conf", "NCCL_TEST_STR=later\n");
  Reload();
  EXPECT_EQ(kTestStr.Get(), "later");
}

TEST_F(ParamsTest, MissingNamedFileIsIgnored) {
  setenv("LOOM_CONF_FILE", (dir_ + "/does-not-exist").c_str(), 1);
  Reload();
  EXPECT_EQ(kTestInt.Get(), 42);
}

TEST_F(ParamsTest, FilesAreCachedUntilReload) {
  std::string conf = WriteFile("conf", "NCCL_TEST_INT=5\n");
  setenv("LOOM_CONF_FILE", conf.c_str(), 1);
  Reload();
  EXPECT_EQ(kTestInt.Get(), 5);
  WriteFile("conf", "NCCL_TEST_INT=6\n");
  EXPECT_EQ(kTestInt.Get(), 5);
  params::ReloadConfigFilesForTest();
  EXPECT_EQ(kTestInt.Get(), 6);
}

TEST_F(ParamsTest, ConcurrentGetAndReload) {
  std::string conf = WriteFile("conf", "NCCL_TEST_INT=5\n");
  setenv("LOOM_CONF_FILE", conf.c_str(), 1);
  Reload();
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        if (kTestInt.Get() != 5) ++wrong;
      }
    });
  }
  for (int i = 0; i < 100; ++i) params::ReloadConfigFilesForTest();
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace loom
