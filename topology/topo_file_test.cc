// Tests of the loom topology file: round trip and strict reading.
#include "topology/topo_file.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace loom::topology {
namespace {

constexpr const char* kHost = R"({
  "format": "loom-topology", "version": 1, "hostname": "h",
  "nodes": [
    {"id": "machine", "kind": "machine"},
    {"id": "numa0", "kind": "numa", "parent": "machine", "numa_id": 0, "cores": 4, "cpuset": "0-3"},
    {"id": "gpu0", "kind": "gpu", "parent": "numa0", "bus_id": "3B:00.0", "sm": 80},
    {"id": "gpu1", "kind": "gpu", "parent": "numa0", "bus_id": "0000:3c:00.0", "sm": 80},
    {"id": "eth0", "kind": "nic", "parent": "numa0", "link_layer": "eth", "rate_gbps": 25.5, "up": false}
  ],
  "links": [{"a": "gpu0", "b": "gpu1", "kind": "nvlink", "count": 2, "bw_gbs": 40}]
})";

TEST(TopoFileTest, ReadsNormalisesAndRoundTrips) {
  auto t = ParseTopologyJson(kHost);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->nodes[2].bus_id, "0000:3b:00.0");
  EXPECT_EQ(t->nodes[4].rate_gbps, 25.5);
  EXPECT_FALSE(t->nodes[4].up);
  ASSERT_EQ(t->links.size(), 1u);
  EXPECT_EQ(t->links[0].count, 2);
  const std::string once = DumpTopologyJson(*t);
  auto again = ParseTopologyJson(once);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(DumpTopologyJson(*again), once);
}

TEST(TopoFileTest, StrictAboutEveryMistake) {
  struct Case {
    const char* from;
    const char* to;
    const char* expect;
  };
  const Case cases[] = {
      {"\"loom-topology\"", "\"other\"", "format"},
      {"\"version\": 1", "\"version\": 2", "version"},
      {"\"cores\": 4", "\"cores\": 4.5", "integer"},
      {"\"cores\": 4", "\"cores\": \"4\"", "integer"},
      {"\"sm\": 80}", "\"sm\": 80, \"rate_gbps\": 1}", "not a member of a gpu"},
      {"\"parent\": \"numa0\", \"bus_id\": \"3B", "\"parent\": \"gpu1\", \"bus_id\": \"3B", "listed before"},
      {"\"kind\": \"machine\"", "\"kind\": \"host\"", "node kind"},
      {"\"link_layer\": \"eth\"", "\"link_layer\": \"roce\"", "link layer"},
      {"\"b\": \"gpu1\"", "\"b\": \"gpu9\"", "no node 'gpu9'"},
      {"\"bw_gbs\": 40", "\"bw_gbs\": 0", "positive"},
      {"\"hostname\": \"h\"", "\"hostname\": \"h\", \"extra\": 1", "unknown member"},
      {"\"bus_id\": \"3B:00.0\"", "\"bus_id\": \"3B:00\"", "bus id"},
      {"\"bus_id\": \"0000:3c:00.0\"", "\"bus_id\": \"0000:3b:00.0\"", "duplicate bus id"},
      {"{\"id\": \"machine\", \"kind\": \"machine\"},", "", "parent 'machine' is not a node"},
  };
  for (const Case& c : cases) {
    std::string text = kHost;
    const size_t at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    text.replace(at, std::string(c.from).size(), c.to);
    auto t = ParseTopologyJson(text);
    ASSERT_FALSE(t.ok()) << "accepted: " << c.to;
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos) << t.status().message();
  }
}

TEST(TopoFileTest, FilesAndFormatSniffing) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/loom_topo_file_test.json";
  auto t = ParseTopologyJson(kHost);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(WriteTopologyFile(path, *t).ok());
  auto back = LoadTopologyFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(DumpTopologyJson(*back), DumpTopologyJson(*t));

  const std::string junk = dir + "/loom_topo_file_test.txt";
  std::FILE* f = std::fopen(junk.c_str(), "w");
  std::fputs("  hello", f);
  std::fclose(f);
  auto bad = LoadTopologyFile(junk);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(junk), std::string::npos);

  auto missing = LoadTopologyFile(dir + "/does-not-exist.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kSystemError);
  EXPECT_FALSE(WriteTopologyFile(dir + "/no/such/dir/x.json", *t).ok());
  std::remove(path.c_str());
  std::remove(junk.c_str());
}

}  // namespace
}  // namespace loom::topology
