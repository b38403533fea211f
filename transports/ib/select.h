// InfiniBand/RoCE choices that need no hardware: which HCA ports
// NCCL_IB_HCA selects among the discovered ones, and which GID a RoCE port
// uses. Pure functions over plain descriptions, so every rule is unit-tested
// here although this machine has no RDMA device.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "topology/socket_ifname.h"

namespace loom::ib {

// One GID table entry as the verbs library / sysfs reports it.
struct GidEntry {
  int index = 0;
  std::array<uint8_t, 16> gid{};
  enum class Type : uint8_t { kIb, kRoceV1, kRoceV2 } type = Type::kIb;
  std::string netdev;  // RoCE: the Ethernet interface behind it ("eth0")
};

// One HCA port as discovered.
struct PortInfo {
  std::string device;  // "mlx5_0"
  int port = 1;        // 1-based, as verbs numbers ports
  bool active = false; // IBV_PORT_ACTIVE
  bool ethernet = false;  // link layer: RoCE (true) or InfiniBand
  uint16_t lid = 0;
  std::vector<GidEntry> gids;
};

// NCCL_IB_HCA in NCCL's grammar (the NCCL_SOCKET_IFNAME list grammar):
// "mlx5_0:1,mlx5_1" selects port 1 of mlx5_0 and every port of mlx5_1 by
// name prefix; "^mlx5_2" excludes; "=mlx5_1" matches the exact name only
// (not mlx5_10); "" selects everything. The grammar is NCCL's one list
// grammar, so this shares SocketIfnameFilter's parser (NCCL's matchIfList
// serves both knobs). A plain value; thread-safe.
class HcaFilter {
 public:
  static HcaFilter Parse(std::string_view spec) { return HcaFilter(SocketIfnameFilter::Parse(spec)); }
  bool Matches(std::string_view device, int port) const { return list_.Matches(device, port); }
  const std::string& spec() const { return list_.spec(); }
  std::string Describe() const { return list_.Describe(); }

 private:
  explicit HcaFilter(SocketIfnameFilter list) : list_(std::move(list)) {}
  SocketIfnameFilter list_;
};

// The ports to use, in discovery order: active ones that the filter
// selects. When none qualifies, why_none says why in the words a user needs
// ("zero IB devices", "NCCL_IB_HCA=mlx5_9 selects none of mlx5_0:1 (active)",
// "no selected port is active: mlx5_0:1 down"), and `absent` tells "there is
// nothing here" (not a fallback) from "there is IB, but unusable" (a
// fallback, FAILURE_MODES row 5). Pure; thread-safe.
struct PortChoice {
  std::vector<PortInfo> ports;
  bool absent = false;     // nothing to choose from: not a fallback
  std::string why_none;    // set when ports is empty
};
PortChoice SelectPorts(const std::vector<PortInfo>& found, const HcaFilter& filter);

// An IPv4 subnet, for "the GID on the selected subnet".
struct Ipv4Subnet {
  uint32_t address = 0;  // host byte order
  int prefix = 0;        // 0..32
};

// The GID index to use on `port`:
//  - InfiniBand link layer: gid_index (default 0), which must exist.
//  - RoCE with gid_index >= 0 (NCCL_IB_GID_INDEX): that entry, which must exist.
//  - RoCE automatic (gid_index < 0): a RoCEv2 entry holding an IPv4-mapped
//    address (::ffff:a.b.c.d) on `subnet` when given, else the first RoCEv2
//    IPv4 entry, else the first RoCEv2 entry, else the first RoCEv1 entry
//    (as NCCL's ncclIbGetGidIndex prefers v2 and AF_INET).
// InvalidUsage naming the port and listing the table when nothing fits.
// Pure; thread-safe.
Result<int> ChooseGid(const PortInfo& port, int gid_index,
                      const std::optional<Ipv4Subnet>& subnet);

// The IPv4 address inside an IPv4-mapped GID, if it is one.
std::optional<uint32_t> MappedIpv4(const std::array<uint8_t, 16>& gid);

}  // namespace loom::ib
