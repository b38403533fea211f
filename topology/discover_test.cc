// Tests of live discovery on this machine (whatever it has) and of merging
// probe results given as data.
#include "topology/discover.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#include "topology/paths.h"
#include "topology/topo_file.h"

namespace loom::topology {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/loom_topo_test_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { EXPECT_EQ(std::system(("rm -rf '" + path_ + "'").c_str()), 0); }
  const std::string& path() const { return path_; }
  void Write(const std::string& rel, const std::string& text) const {
    ASSERT_EQ(std::system(("mkdir -p \"$(dirname '" + path_ + "/" + rel + "')\"").c_str()), 0);
    std::ofstream(path_ + "/" + rel) << text;
  }

 private:
  std::string path_;
};

TEST(ProbeHwlocTest, SeesThisMachinesCores) {
  bool used = false;
  const Topology t = ProbeHwloc("here", &used);
  ASSERT_TRUE(t.Validate().ok()) << t.Validate().ToString();
  int cores = 0;
  for (int n : t.OfKind(NodeKind::kNuma)) cores += t.nodes[static_cast<size_t>(n)].cores;
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, static_cast<int>(std::thread::hardware_concurrency()));
#ifdef LOOM_HAVE_HWLOC
  EXPECT_TRUE(used);
#endif
  std::printf("hwloc=%d NUMA nodes=%zu cores=%d\n", used, t.OfKind(NodeKind::kNuma).size(), cores);
}

TEST(DiscoverTest, FindsEth0WhenPresent) {
  struct stat st {};
  if (stat("/sys/class/net/eth0", &st) != 0) GTEST_SKIP() << "no eth0 here";
  const Topology t = DiscoverTopology();
  ASSERT_TRUE(t.Validate().ok()) << t.Validate().ToString();
  bool found = false;
  for (int n : t.OfKind(NodeKind::kNic)) found = found || t.nodes[static_cast<size_t>(n)].netdev == "eth0";
  EXPECT_TRUE(found) << DumpTopologyJson(t);
}

TEST(ProbeVerbsTest, NoIbIsAnEmptyListWithAReason) {
  const VerbsProbe missing = ProbeVerbs("libloom-no-such-verbs.so.1");
  EXPECT_TRUE(missing.devices.empty());
  EXPECT_NE(missing.no_ib_reason.find("not found"), std::string::npos) << missing.no_ib_reason;
  const VerbsProbe real = ProbeVerbs();
  EXPECT_TRUE(!real.devices.empty() || !real.no_ib_reason.empty());
  std::printf("verbs: %zu devices (%s)\n", real.devices.size(), real.no_ib_reason.c_str());
}

TEST(ProbeNvmlTest, NoDriverIsZeroGpus) {
  const NvmlProbe missing = ProbeNvml("libloom-no-such-nvml.so.1");
  EXPECT_TRUE(missing.gpus.empty());
  EXPECT_FALSE(missing.no_gpu_reason.empty());
  const NvmlProbe real = ProbeNvml();
  EXPECT_TRUE(!real.gpus.empty() || !real.no_gpu_reason.empty());
  std::printf("NVML: %zu GPUs (%s)\n", real.gpus.size(), real.no_gpu_reason.c_str());
}

TEST(ProbeSysfsNetTest, ReadsAFakeTree) {
  TempDir d;
  d.Write("devices/pci0000:00/0000:3b:00.0/net/x", "");
  d.Write("net/eth9/type", "1\n");
  d.Write("net/eth9/operstate", "up\n");
  d.Write("net/eth9/mtu", "9000\n");
  d.Write("net/eth9/speed", "25000\n");
  ASSERT_EQ(symlink((d.path() + "/devices/pci0000:00/0000:3b:00.0").c_str(),
                    (d.path() + "/net/eth9/device").c_str()), 0);
  d.Write("net/lo/type", "772\n");
  d.Write("net/veth0/type", "1\n");
  d.Write("net/veth0/operstate", "down\n");
  d.Write("net/veth0/speed", "-1\n");
  d.Write("net/veth0/mtu", "garbage\n");
  const auto devs = ProbeSysfsNet(d.path() + "/net");
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[0].name, "eth9");
  EXPECT_EQ(devs[0].bus_id, "0000:3b:00.0");
  EXPECT_TRUE(devs[0].up);
  EXPECT_EQ(devs[0].mtu, 9000);
  EXPECT_EQ(devs[0].speed_gbps, 25);
  EXPECT_EQ(devs[1].name, "veth0");
  EXPECT_EQ(devs[1].bus_id, "");
  EXPECT_FALSE(devs[1].up);
  EXPECT_EQ(devs[1].mtu, 0);
  EXPECT_EQ(devs[1].speed_gbps, 0);
  EXPECT_TRUE(ProbeSysfsNet(d.path() + "/missing").empty());
}

TEST(MergeProbesTest, JoinsSourcesByBusId) {
  Topology t = Topology::WithMachine("m");
  Node numa;
  numa.kind = NodeKind::kNuma;
  numa.id = "numa0";
  numa.parent = 0;
  numa.numa_id = 0;
  const int n0 = t.Add(numa);
  Node sw;
  sw.id = "sw";
  sw.parent = n0;
  sw.bus_id = "0000:3a:00.0";
  const int s = t.Add(sw);
  Node nic;
  nic.kind = NodeKind::kNic;
  nic.id = "ens1";  // as hwloc names it without a verbs OS device
  nic.parent = s;
  nic.bus_id = "0000:3b:00.0";
  t.Add(nic);

  SysfsNetDevice ens1{"ens1", "0000:3b:00.0", 1, true, 9000, 100};
  SysfsNetDevice veth{"veth0", "", 1, true, 1500, 0};
  SysfsNetDevice eno{"eno2", "0000:01:00.0", 1, false, 1500, 10};
  VerbsProbe verbs;
  verbs.devices.push_back(VerbsDevice{"mlx5_0", "0000:3b:00.0",
                                      {VerbsPort{1, true, LinkLayer::kEthernet, 100, 4096, "ens1", 2}}});
  NvmlProbe nvml;
  for (int g = 0; g < 2; ++g) {
    NvmlGpu gpu;
    gpu.index = g;
    gpu.bus_id = g == 0 ? "0000:18:00.0" : "0000:2a:00.0";
    gpu.sm = 90;
    gpu.model = "H100";
    for (int l = 0; l < 4; ++l) gpu.nvlinks.push_back({"0000:99:00.0", true});
    nvml.gpus.push_back(gpu);
  }
  MergeProbes({ens1, veth, eno}, verbs, nvml, &t);
  ASSERT_TRUE(t.Validate().ok()) << t.Validate().ToString() << DumpTopologyJson(t);

  const int mlx = t.Find("mlx5_0");
  ASSERT_GE(mlx, 0) << DumpTopologyJson(t);
  const Node& m = t.nodes[static_cast<size_t>(mlx)];
  EXPECT_EQ(m.netdev, "ens1");
  EXPECT_TRUE(m.rdma);
  EXPECT_EQ(m.roce_version, 2);
  EXPECT_EQ(m.parent, s);
  EXPECT_EQ(t.Find("veth0"), -1);
  const int e = t.Find("eno2");
  ASSERT_GE(e, 0);
  EXPECT_FALSE(t.nodes[static_cast<size_t>(e)].up);
  EXPECT_EQ(t.nodes[static_cast<size_t>(e)].rate_gbps, 10);
  ASSERT_EQ(t.OfKind(NodeKind::kGpu).size(), 2u);
  ASSERT_EQ(t.OfKind(NodeKind::kNvSwitch).size(), 1u);
  const Path p = ClassifyPath(t, t.Find("gpu0"), t.Find("gpu1"));
  EXPECT_EQ(p.type, PathType::kNvl);
  EXPECT_EQ(p.nvlinks, 4);
  EXPECT_NEAR(p.bw_gbs, 4 * 20.6, 1e-9);
}

TEST(LocalTopologyTest, FileWinsAndIsDumpedUnchanged) {
  TempDir d;
  const std::string fixture = std::string(LOOM_TOPO_FIXTURE_DIR) + "/dgx_h100.json";
  const std::string dump = d.path() + "/dump.json";
  setenv("LOOM_TOPO_FILE", fixture.c_str(), 1);
  setenv("LOOM_TOPO_DUMP_FILE", dump.c_str(), 1);
  auto t = LocalTopology();
  unsetenv("LOOM_TOPO_FILE");
  unsetenv("LOOM_TOPO_DUMP_FILE");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->hostname, "dgx-h100");
  EXPECT_EQ(*ReadWholeFile(dump), *ReadWholeFile(fixture));

  setenv("NCCL_TOPO_FILE", (d.path() + "/absent.xml").c_str(), 1);
  auto missing = LocalTopology();
  unsetenv("NCCL_TOPO_FILE");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kSystemError);
  EXPECT_NE(missing.status().message().find("absent.xml"), std::string::npos);
}

}  // namespace
}  // namespace loom::topology
