// HCA port selection and RoCE GID choice (see select.h).
#include "transports/ib/select.h"

#include <cstdio>

namespace loom::ib {

namespace {

std::string PortName(const PortInfo& p) { return p.device + ":" + std::to_string(p.port); }

const char* TypeName(GidEntry::Type t) {
  switch (t) {
    case GidEntry::Type::kIb: return "IB";
    case GidEntry::Type::kRoceV1: return "RoCEv1";
    case GidEntry::Type::kRoceV2: return "RoCEv2";
  }
  return "?";
}

std::string GidText(const std::array<uint8_t, 16>& g) {
  if (auto v4 = MappedIpv4(g)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "::ffff:%u.%u.%u.%u", *v4 >> 24, (*v4 >> 16) & 255,
                  (*v4 >> 8) & 255, *v4 & 255);
    return buf;
  }
  std::string s;
  for (size_t i = 0; i < g.size(); i += 2) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%s%02x%02x", i == 0 ? "" : ":", g[i], g[i + 1]);
    s += buf;
  }
  return s;
}

std::string Table(const PortInfo& p) {
  if (p.gids.empty()) return "an empty GID table";
  std::string s = "GID table";
  for (const GidEntry& e : p.gids) {
    s += (e.index == p.gids.front().index ? " " : ", ") + std::to_string(e.index) + "=" +
         TypeName(e.type) + " " + GidText(e.gid);
    if (!e.netdev.empty()) s += " (" + e.netdev + ")";
  }
  return s;
}

bool OnSubnet(uint32_t addr, const Ipv4Subnet& net) {
  if (net.prefix <= 0) return true;
  const uint32_t mask = net.prefix >= 32 ? 0xffffffffu : ~(0xffffffffu >> net.prefix);
  return (addr & mask) == (net.address & mask);
}

}  // namespace

std::optional<uint32_t> MappedIpv4(const std::array<uint8_t, 16>& g) {
  for (int i = 0; i < 10; ++i) {
    if (g[i] != 0) return std::nullopt;
  }
  if (g[10] != 0xff || g[11] != 0xff) return std::nullopt;
  return (uint32_t{g[12]} << 24) | (uint32_t{g[13]} << 16) | (uint32_t{g[14]} << 8) | g[15];
}

PortChoice SelectPorts(const std::vector<PortInfo>& found, const HcaFilter& filter) {
  PortChoice c;
  if (found.empty()) {
    c.absent = true;
    c.why_none = "zero IB devices";
    return c;
  }
  std::string listed, down;
  for (const PortInfo& p : found) {
    listed += (listed.empty() ? "" : ", ") + PortName(p) + (p.active ? " (active)" : " (down)");
    if (!filter.Matches(p.device, p.port)) continue;
    if (!p.active) {
      down += (down.empty() ? "" : ", ") + PortName(p);
      continue;
    }
    c.ports.push_back(p);
  }
  if (!c.ports.empty()) return c;
  if (!down.empty()) {
    c.why_none = "no selected port is active (down: " + down + ")";
  } else {
    c.why_none = "NCCL_IB_HCA=" + filter.spec() + " (" + filter.Describe() + ") selects none of " +
                 listed;
  }
  return c;
}

Result<int> ChooseGid(const PortInfo& port, int gid_index, const std::optional<Ipv4Subnet>& subnet) {
  auto find = [&](int index) -> const GidEntry* {
    for (const GidEntry& e : port.gids) {
      if (e.index == index) return &e;
    }
    return nullptr;
  };
  if (!port.ethernet || gid_index >= 0) {
    const int want = gid_index >= 0 ? gid_index : 0;
    if (find(want) != nullptr) return want;
    return InvalidUsage(PortName(port) + " has no GID at index " + std::to_string(want) +
                        (gid_index >= 0 ? " (NCCL_IB_GID_INDEX)" : "") + "; it has " +
                        Table(port));
  }
  // RoCE, automatic: best class first, table order within a class.
  const GidEntry* best = nullptr;
  int best_rank = 5;
  for (const GidEntry& e : port.gids) {
    const auto v4 = MappedIpv4(e.gid);
    int rank = 5;
    if (e.type == GidEntry::Type::kRoceV2 && v4 && subnet && OnSubnet(*v4, *subnet)) {
      rank = 0;
    } else if (e.type == GidEntry::Type::kRoceV2 && v4 && !subnet) {
      rank = 1;
    } else if (e.type == GidEntry::Type::kRoceV2 && v4) {
      rank = 2;  // IPv4 but another subnet: usable, not preferred
    } else if (e.type == GidEntry::Type::kRoceV2) {
      rank = 3;
    } else if (e.type == GidEntry::Type::kRoceV1) {
      rank = 4;
    }
    if (rank < best_rank) {
      best = &e;
      best_rank = rank;
    }
  }
  if (best != nullptr) return best->index;
  return InvalidUsage(PortName(port) + " is RoCE but has no RoCE GID; it has " + Table(port) +
                      "; set NCCL_IB_GID_INDEX");
}

}  // namespace loom::ib
