// ReadLaunchEnv: each launcher's variables, precedence, and bad input.
#include "comm/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace loom {
namespace {

Result<std::optional<LaunchEnv>> Read(const std::map<std::string, std::string>& env) {
  return ReadLaunchEnv([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchEnv, NothingSetMeansNoLauncher) {
  auto e = Read({});
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->has_value());
}

TEST(LaunchEnv, LoomVariables) {
  auto e = Read({{"LOOM_RANK", "2"}, {"LOOM_WORLD_SIZE", "4"}, {"LOOM_LOCAL_RANK", "2"},
                 {"LOOM_ROOT", "127.0.0.1:5555"}, {"LOOM_JOB_ID", "abc"}});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_TRUE(e->has_value());
  EXPECT_EQ((*e)->rank, 2);
  EXPECT_EQ((*e)->size, 4);
  EXPECT_EQ((*e)->root_host, "127.0.0.1");
  EXPECT_EQ((*e)->root_port, 5555);
  EXPECT_EQ((*e)->source, "loom");
  // The secret depends on the job id.
  auto other = Read({{"LOOM_RANK", "2"}, {"LOOM_WORLD_SIZE", "4"}, {"LOOM_ROOT", "127.0.0.1:5555"},
                     {"LOOM_JOB_ID", "xyz"}});
  EXPECT_NE((*e)->secret, (*other)->secret);
}

TEST(LaunchEnv, TorchrunUsesMasterPortPlusOne) {
  auto e = Read({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"},
                 {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->root_host, "10.0.0.1");
  EXPECT_EQ((*e)->root_port, 29501);
  EXPECT_EQ((*e)->source, "torchrun");
}

TEST(LaunchEnv, MpiAndSlurmNeedAnAddress) {
  auto e = Read({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
  EXPECT_NE(e.status().message().find("LOOM_ROOT"), std::string::npos);
  auto s = Read({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"LOOM_ROOT", "[::1]:7000"}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->root_host, "::1");
  EXPECT_EQ((*s)->source, "Slurm");
  auto pmi = Read({{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}});
  ASSERT_TRUE(pmi.ok());
  EXPECT_EQ((*pmi)->size, 1);
}

TEST(LaunchEnv, LoomWinsOverOthers) {
  auto e = Read({{"LOOM_RANK", "0"}, {"LOOM_WORLD_SIZE", "1"}, {"RANK", "5"}, {"WORLD_SIZE", "9"}});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->size, 1);
}

TEST(LaunchEnv, BadValuesAreNamed) {
  auto e = Read({{"LOOM_RANK", "x"}, {"LOOM_WORLD_SIZE", "2"}, {"LOOM_ROOT", "h:1"}});
  EXPECT_NE(e.status().message().find("LOOM_RANK"), std::string::npos);
  e = Read({{"LOOM_RANK", "2"}, {"LOOM_WORLD_SIZE", "2"}, {"LOOM_ROOT", "h:1"}});
  EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
  e = Read({{"LOOM_RANK", "0"}, {"LOOM_WORLD_SIZE", "2"}, {"LOOM_ROOT", "nohostport"}});
  EXPECT_NE(e.status().message().find("host:port"), std::string::npos);
  e = Read({{"LOOM_RANK", "0"}, {"LOOM_WORLD_SIZE", "2"}, {"LOOM_ROOT", "h:70000"}});
  EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace loom
