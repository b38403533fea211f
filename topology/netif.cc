// Interface inventory: getifaddrs for addresses and flags, sysfs for link
// attributes.
#include "topology/netif.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <utility>

#include "topology/inet_address.h"

namespace loom {
namespace {

// The prefix length of a contiguous netmask; a null mask (point-to-point
// links may report none) means the whole address.
int PrefixLength(const sockaddr* mask, int family) {
  const int full = family == AF_INET ? 32 : 128;
  if (mask == nullptr || mask->sa_family != family) return full;
  const uint8_t* bytes =
      family == AF_INET
          ? reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(mask)->sin_addr)
          : reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr.s6_addr;
  int bits = 0;
  for (int i = 0; i < full / 8; ++i) bits += __builtin_popcount(bytes[i]);
  return bits;
}

// The printable address, with the interface's own name as the scope of a
// link-local IPv6 address (the name getifaddrs gave, not a second lookup).
std::string PrintableAddress(const sockaddr_storage& ss, std::string_view name) {
  sockaddr_storage copy = ss;
  uint32_t scope = 0;
  if (copy.ss_family == AF_INET6)
    std::swap(scope, reinterpret_cast<sockaddr_in6*>(&copy)->sin6_scope_id);
  std::string out = FormatAddress(reinterpret_cast<const sockaddr*>(&copy));
  if (scope != 0) {
    out += '%';
    out += name;
  }
  return out;
}

// The first token of a small sysfs file as an integer; false when the file
// is missing, unreadable (speed gives EINVAL without carrier) or not a number.
bool ReadInt64(const std::string& path, int64_t* value) {
  std::ifstream f(path);
  std::string text;
  if (!(f >> text)) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  return ec == std::errc() && ptr == end;
}

}  // namespace

void ReadLinkAttributes(std::string_view sys_class_net, NetInterface* iface) {
  // An alias ("eth0:1") shares the attributes of its device.
  const std::string base = iface->name.substr(0, iface->name.find(':'));
  const std::string dir = std::string(sys_class_net) + "/" + base + "/";
  int64_t v = 0;
  iface->mtu = ReadInt64(dir + "mtu", &v) && v > 0 && v <= INT32_MAX ? static_cast<int>(v) : -1;
  // Old kernels print an unknown speed as (u32)-1 = 4294967295; newer ones as -1.
  iface->speed_mbps = ReadInt64(dir + "speed", &v) && v > 0 && v < UINT32_MAX ? v : -1;
  struct stat st {};
  iface->is_virtual = stat((dir + "device").c_str(), &st) != 0;
}

Result<std::vector<NetInterface>> ListInterfaces() {
  ifaddrs* raw = nullptr;
  if (getifaddrs(&raw) != 0)
    return SystemError("getifaddrs failed listing network interfaces", errno);
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> list(raw, freeifaddrs);

  std::vector<NetInterface> out;
  for (const ifaddrs* ifa = list.get(); ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || (ifa->ifa_flags & IFF_UP) == 0) continue;
    const int family = ifa->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;

    NetInterface iface;
    iface.name = ifa->ifa_name;
    iface.family = family;
    iface.addr_len = SockaddrLen(ifa->ifa_addr);
    std::memcpy(&iface.addr, ifa->ifa_addr, iface.addr_len);
    iface.address = PrintableAddress(iface.addr, iface.name);
    iface.prefix_len = PrefixLength(ifa->ifa_netmask, family);
    iface.loopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    // IFF_RUNNING is the kernel's netif_oper_up(): operstate "up" or
    // "unknown" (lo, many virtual links), so sysfs operstate adds nothing.
    iface.up = (ifa->ifa_flags & IFF_RUNNING) != 0;
    ReadLinkAttributes("/sys/class/net", &iface);
    out.push_back(std::move(iface));
  }
  return out;
}

Result<NetInterface> MakeNetInterface(std::string_view name, std::string_view cidr) {
  const size_t slash = cidr.find('/');
  LOOM_ASSIGN_OR_RETURN(sockaddr_storage ss, ParseIpAddress(cidr.substr(0, slash)));
  NetInterface iface;
  iface.name = std::string(name);
  iface.family = ss.ss_family;
  iface.addr = ss;
  iface.addr_len = SockaddrLen(iface.sockaddr_ptr());
  iface.address = PrintableAddress(ss, name);
  const int full = iface.family == AF_INET ? 32 : 128;
  iface.prefix_len = full;
  if (slash != std::string_view::npos) {
    const std::string_view len = cidr.substr(slash + 1);
    auto [ptr, ec] = std::from_chars(len.data(), len.data() + len.size(), iface.prefix_len);
    if (len.empty() || ec != std::errc() || ptr != len.data() + len.size() ||
        iface.prefix_len < 0 || iface.prefix_len > full) {
      return InvalidArgument("'" + std::string(cidr) + "': prefix length must be a number in [0, " +
                             std::to_string(full) + "]");
    }
  }
  iface.loopback = IsLoopbackAddress(iface.sockaddr_ptr());
  iface.up = true;
  return iface;
}

std::string DescribeInterface(const NetInterface& iface) {
  std::string s = iface.name + " " + iface.address + "/" + std::to_string(iface.prefix_len);
  s += iface.up ? " up" : " down";
  if (iface.loopback) s += " loopback";
  if (iface.is_virtual && !iface.loopback) s += " virtual";
  if (iface.mtu > 0) s += " mtu " + std::to_string(iface.mtu);
  if (iface.speed_mbps > 0) s += " " + std::to_string(iface.speed_mbps) + "Mb/s";
  return s;
}

}  // namespace loom
