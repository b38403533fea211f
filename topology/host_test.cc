// Tests for Hostname, HostIdentity (and its env overrides) and HashString.
#include "topology/host.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <optional>

namespace loom {
namespace {

// Sets or clears an environment variable for one test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(HostTest, HostnameIsGethostname) {
  char buf[HOST_NAME_MAX + 1] = {};
  ASSERT_EQ(gethostname(buf, sizeof(buf) - 1), 0);
  EXPECT_EQ(Hostname(), buf);
  EXPECT_FALSE(Hostname().empty());
}

TEST(HostTest, IdentityIsHostnameAndBootId) {
  ScopedEnv a("LOOM_HOSTID", nullptr);
  ScopedEnv b("NCCL_HOSTID", nullptr);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  const std::string id = HostIdentity();
  EXPECT_EQ(id.rfind(Hostname(), 0), 0u) << id;
  if (!boot_id.empty()) {
    EXPECT_EQ(id, Hostname() + "/" + boot_id);
  }
  EXPECT_EQ(HostIdentity(), id) << "stable across calls";
}

TEST(HostTest, LoomHostIdOverridesVerbatim) {
  ScopedEnv a("LOOM_HOSTID", "fake-host-1 with spaces");
  ScopedEnv b("NCCL_HOSTID", "nccl-host");
  EXPECT_EQ(HostIdentity(), "fake-host-1 with spaces");
}

TEST(HostTest, NcclHostIdIsTheTwin) {
  ScopedEnv a("LOOM_HOSTID", nullptr);
  ScopedEnv b("NCCL_HOSTID", "nccl-host");
  EXPECT_EQ(HostIdentity(), "nccl-host");
}

TEST(HostTest, EmptyOverrideIsIgnored) {
  ScopedEnv a("LOOM_HOSTID", "");
  ScopedEnv b("NCCL_HOSTID", "");
  EXPECT_EQ(HostIdentity().rfind(Hostname(), 0), 0u);
}

TEST(HostTest, OverrideIsReadOnEachCall) {
  ScopedEnv b("NCCL_HOSTID", nullptr);
  std::string first, second;
  {
    ScopedEnv a("LOOM_HOSTID", "rank-a");
    first = HostIdentity();
  }
  {
    ScopedEnv a("LOOM_HOSTID", "rank-b");
    second = HostIdentity();
  }
  EXPECT_EQ(first, "rank-a");
  EXPECT_EQ(second, "rank-b");
}

TEST(HostTest, HashStringIsFnv1a64) {
  // Reference values of the FNV-1a 64-bit test suite.
  EXPECT_EQ(HashString(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(HashString("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(HashString("foobar"), 0x85944171f73967e8ull);
  // Bytes past a NUL and high bytes count.
  EXPECT_NE(HashString(std::string_view("a\0b", 3)), HashString("a"));
  EXPECT_NE(HashString("\xff"), HashString("\x7f"));
}

}  // namespace
}  // namespace loom
