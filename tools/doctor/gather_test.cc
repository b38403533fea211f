// Hostfile formats, the environment filter, limits and live facts.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <tuple>

#include "tools/doctor/gather.h"

namespace loom::doctor {
namespace {

TEST(DoctorHostfile, LauncherFormats) {
  auto h = ParseHostfile(
      "# cluster\n"
      "node1 slots=8\n"
      "node2:8\n"
      "  10.0.0.3   # by address\n"
      "\n"
      "[fd00::4]:2\n"
      "fd00::5\n"
      "node1 slots=8\n");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h.value(), (std::vector<std::string>{"node1", "node2", "10.0.0.3", "fd00::4", "fd00::5"}));
  EXPECT_TRUE(ParseHostfile("").value().empty());
  EXPECT_EQ(ParseHostfile("a\r\nb").value(), (std::vector<std::string>{"a", "b"}));
}

TEST(DoctorHostfile, ErrorsNameTheLine) {
  auto h = ParseHostfile("node1\nslots=4\n");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("line 2"), std::string::npos);
  EXPECT_FALSE(ParseHostfile("[fd00::1\n").ok());
  EXPECT_FALSE(ParseHostfile(":8\n").ok());
}

TEST(DoctorGather, RelevantEnvKeepsOnlyOurPrefixes) {
  char a[] = "NCCL_DEBUG=INFO", b[] = "PATH=/bin", c[] = "LOOM_X=", d[] = "UCX_TLS=tcp", e[] = "LOOM_Y=1";
  char* env[] = {a, b, c, d, e, nullptr};
  auto m = RelevantEnv(env);
  EXPECT_EQ(m, (std::map<std::string, std::string>{{"NCCL_DEBUG", "INFO"}, {"UCX_TLS", "tcp"}, {"LOOM_Y", "1"}}));
  EXPECT_TRUE(RelevantEnv(nullptr).empty());
}

TEST(DoctorGather, ResolveNumericAndUnknown) {
  Resolution r = ResolveName("127.0.0.1");
  ASSERT_EQ(r.addresses.size(), 1u);
  EXPECT_EQ(r.addresses[0], "127.0.0.1");
  r = ResolveName("no-such-host.invalid");
  EXPECT_TRUE(r.addresses.empty());
  EXPECT_FALSE(r.error.empty());
}

TEST(DoctorGather, LimitsAndLiveFacts) {
  Limits l = ReadLimits();
  EXPECT_NE(l.nofile, -1);
  EXPECT_NE(l.memlock_bytes, -1);
  EXPECT_EQ(ReadLimits("/no/such/dir").shm_bytes, -1);
  setenv("LOOM_HOSTID", "doctor-test-host", 1);
  HostFacts f = GatherLocalFacts({3, "127.0.0.1:29400", {"localhost"}, 29401});
  unsetenv("LOOM_HOSTID");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.label, "doctor-test-host");
  EXPECT_EQ(f.probe_port, 29401);
  EXPECT_FALSE(f.interfaces.empty());
  EXPECT_FALSE(f.fingerprint.empty());
  ASSERT_EQ(f.resolutions.size(), 1u);  // a numeric root adds nothing to resolve
  EXPECT_EQ(f.resolutions[0].name, "localhost");
  EXPECT_TRUE(f.topology.has_value());
}

// A 4 KiB config space with the given extended capabilities chained from
// 0x100: (id, offset, ACS control value).
std::string Config(const std::vector<std::tuple<uint16_t, size_t, uint16_t>>& caps) {
  std::string c(4096, '\0');
  for (size_t i = 0; i < caps.size(); ++i) {
    const auto [id, off, control] = caps[i];
    const uint32_t next = i + 1 < caps.size() ? static_cast<uint32_t>(std::get<1>(caps[i + 1])) : 0;
    const uint32_t header = id | 1u << 16 | next << 20;
    for (int b = 0; b < 4; ++b) c[off + b] = static_cast<char>(header >> (8 * b));
    c[off + 6] = static_cast<char>(control & 0xff);
    c[off + 7] = static_cast<char>(control >> 8);
  }
  return c;
}

TEST(DoctorGather, AcsRedirectFromConfigSpace) {
  constexpr uint16_t kAer = 0x0001, kAcs = 0x000d;
  // SrcValid alone (bit 0) does not redirect; ReqRedir (bit 2) does, found after AER.
  EXPECT_EQ(AcsRedirects(Config({{kAcs, 0x100, 0x0001}})), false);
  EXPECT_EQ(AcsRedirects(Config({{kAer, 0x100, 0}, {kAcs, 0x148, 0x001d}})), true);
  EXPECT_EQ(AcsRedirects(Config({{kAer, 0x100, 0}, {kAcs, 0x148, 1u << 5}})), true);  // egress control
  EXPECT_EQ(AcsRedirects(Config({{kAer, 0x100, 0}})), false);                          // no ACS at all
  EXPECT_EQ(AcsRedirects(std::string(4096, '\0')), false);                             // no extended caps
  EXPECT_EQ(AcsRedirects(std::string(64, '\x01')), std::nullopt);                      // an unprivileged read
  // A pointer off the end, and a loop in the list, end without hanging.
  std::string off_end = Config({{kAer, 0x100, 0}});
  off_end[0x103] = static_cast<char>(0xff);  // next = 0xff0 > size - 8 after truncation
  EXPECT_EQ(AcsRedirects(off_end.substr(0, 0x800)), std::nullopt);
  std::string loop = Config({{kAer, 0x100, 0}});
  loop[0x103] = 0x10;  // next = 0x100: itself
  EXPECT_EQ(AcsRedirects(loop), false);
}

TEST(DoctorGather, PciFactsFromAFakeSysfs) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("doctor-sysfs-" + std::to_string(getpid()));
  fs::remove_all(root);
  const fs::path dev = root / "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0";
  fs::create_directories(dev / "iommu_group");
  std::ofstream(dev / "iommu_group" / "type") << "DMA-FQ\n";
  // bus/<id> links to the device directories, as /sys/bus/pci/devices does.
  const fs::path bus = root / "pci";
  fs::create_directories(bus);
  fs::path walk = root / "devices/pci0000:00";
  for (const char* id : {"0000:00:01.0", "0000:01:00.0", "0000:02:08.0", "0000:03:00.0"}) {
    walk /= id;
    fs::create_directory_symlink(walk, bus / id);
  }
  std::ofstream(walk.parent_path() / "config", std::ios::binary) << Config({{0x000d, 0x100, 0x0004}});
  std::ofstream(root / "devices/pci0000:00/0000:00:01.0/config", std::ios::binary) << std::string(64, '\0');
  PciFacts p = ReadPciFacts("0000:03:00.0", bus.string());
  EXPECT_EQ(p.bridges, (std::vector<std::string>{"0000:00:01.0", "0000:01:00.0", "0000:02:08.0"}));
  EXPECT_EQ(p.acs_redirect, (std::vector<std::string>{"0000:02:08.0"}));
  EXPECT_EQ(p.iommu, "DMA-FQ");
  PciFacts none = ReadPciFacts("0000:ff:00.0", bus.string());
  EXPECT_TRUE(none.bridges.empty());
  EXPECT_TRUE(none.iommu.empty());
  fs::remove_all(root);
}

}  // namespace
}  // namespace loom::doctor
