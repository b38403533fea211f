// Loading UCX at run time: nothing of it is in the process until the
// transport is selected, a library that is missing or is not libucp is a
// clear error (never a crash), and loading it leaves the fatal signals to
// the program.
#include "transports/ucx/ucx_api.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <string>

#include "transports/ucx/context.h"

namespace loom {
namespace {

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

bool Loaded(const char* soname) {
  void* h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  if (h != nullptr) dlclose(h);  // drops only the reference NOLOAD took
  return h != nullptr;
}

// Every test below but the last leaves UCX unloaded, so this holds in any
// order the tests run.
TEST(UcxApi, NothingOfUcxIsLoadedUntilSelected) {
  if (Loaded("libucp.so.0")) GTEST_SKIP() << "UCX was loaded by an earlier test";
  EXPECT_FALSE(Loaded("libucs.so.0"));
  EXPECT_FALSE(Loaded("libuct.so.0"));
  EXPECT_FALSE(Loaded("libucm.so.0"));
}

TEST(UcxApi, MissingLibraryIsAClearError) {
  const UcxApi& api = LoadUcxApi("libloom-no-such-ucp.so.0");
  EXPECT_TRUE(Contains(api.error, "cannot dlopen libloom-no-such-ucp.so.0 (")) << api.error;
  EXPECT_TRUE(Contains(api.error, "cannot open shared object file")) << api.error;  // dlerror()
  EXPECT_TRUE(Contains(api.error, "libucx0")) << api.error;
  EXPECT_TRUE(Contains(api.error, "LD_LIBRARY_PATH")) << api.error;
  EXPECT_TRUE(Contains(api.error, "NCCL_NET=Socket")) << api.error;
  EXPECT_EQ(api.config_read, nullptr);
  // The same name is not retried: the first answer is kept.
  EXPECT_EQ(&LoadUcxApi("libloom-no-such-ucp.so.0"), &api);
}

TEST(UcxApi, LibraryWithoutUcpIsUnusable) {
  const UcxApi& api = LoadUcxApi("libc.so.6");
  EXPECT_TRUE(Contains(api.error, "libc.so.6 is unusable: ucp_config_read missing")) << api.error;
  EXPECT_TRUE(Contains(api.error, "loom is built against UCX " + std::to_string(UCP_API_MAJOR) +
                                      "." + std::to_string(UCP_API_MINOR)))
      << api.error;
}

TEST(UcxApi, SelectingUcxThatCannotLoadIsASystemErrorNamingTheRemedy) {
  UcxOptions options;
  options.library = "libloom-no-such-ucp.so.0";
  auto c = UcxContext::Create(options);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kSystemError) << c.status().ToString();
  EXPECT_TRUE(Contains(c.status().message(),
                       "cannot dlopen libloom-no-such-ucp.so.0 (libloom-no-such-ucp.so.0: "))
      << c.status().ToString();
  EXPECT_TRUE(Contains(c.status().message(), "libucx0")) << c.status().ToString();
}

// Loads the real UCX: keep it last.
TEST(UcxApi, LoadingLeavesTheFatalSignalsToTheProgram) {
  const UcxApi& api = LoadUcxApi();
  ASSERT_TRUE(api.error.empty()) << api.error;
  EXPECT_TRUE(Loaded("libucp.so.0"));
  EXPECT_NE(api.status_string(UCS_ERR_NO_MEMORY), nullptr);
  if (std::getenv("UCX_HANDLE_ERRORS") != nullptr) GTEST_SKIP() << "UCX_HANDLE_ERRORS is set";
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) {
    struct sigaction now {};
    ASSERT_EQ(sigaction(sig, nullptr, &now), 0);
    const void* handler = (now.sa_flags & SA_SIGINFO) != 0
                              ? reinterpret_cast<const void*>(now.sa_sigaction)
                              : reinterpret_cast<const void*>(now.sa_handler);
    Dl_info info{};
    if (now.sa_handler == SIG_DFL || now.sa_handler == SIG_IGN || dladdr(handler, &info) == 0 ||
        info.dli_fname == nullptr) {
      continue;
    }
    EXPECT_FALSE(Contains(info.dli_fname, "libucs")) << "signal " << sig << ": " << info.dli_fname;
  }
}

}  // namespace
}  // namespace loom
