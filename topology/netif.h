// The network interfaces of this host with an IPv4/IPv6 address, and their
// link attributes from sysfs: the inventory interface selection, the doctor
// and the topology model start from.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace loom {

// One address of one interface: an interface with an IPv4 and two IPv6
// addresses appears three times, in getifaddrs order. A plain value.
struct NetInterface {
  std::string name;         // as getifaddrs reports it, alias label included ("eth0:1")
  int family = AF_UNSPEC;   // AF_INET or AF_INET6
  sockaddr_storage addr{};  // port 0; IPv6 link-local carries its scope id
  socklen_t addr_len = 0;
  std::string address;      // printable, no port: "10.0.0.2", "fe80::1%eth0"
  int prefix_len = 0;       // from the netmask: 24 for 255.255.255.0
  bool loopback = false;    // IFF_LOOPBACK
  bool up = false;          // IFF_RUNNING: up with carrier (operstate "up" or "unknown")
  int mtu = -1;             // -1: unknown
  int64_t speed_mbps = -1;  // -1: unknown (virtual links, no carrier)
  bool is_virtual = false;  // no /sys/class/net/<if>/device: lo, veth, bridge, docker0, ...

  const sockaddr* sockaddr_ptr() const { return reinterpret_cast<const sockaddr*>(&addr); }
};

// The interfaces that are administratively up (IFF_UP) and have an IPv4 or
// IPv6 address, in getifaddrs order, with attributes from /sys/class/net.
// An interface that is up but has no carrier is listed with up=false, so a
// caller can say why it was not used. Missing sysfs files leave the fields
// at "unknown"; they are never an error. SystemError only when getifaddrs
// fails. Thread-safe; blocks briefly on netlink and sysfs reads.
Result<std::vector<NetInterface>> ListInterfaces();

// Fills mtu, speed_mbps and is_virtual of `iface` from
// <sys_class_net>/<base name>/{mtu,speed,device}, where the base name drops
// an alias label (":1"). Unreadable or out-of-range values mean unknown.
// Split out so tests can point it at a fake sysfs tree.
void ReadLinkAttributes(std::string_view sys_class_net, NetInterface* iface);

// A synthetic interface for tests and for topology files: `cidr` is
// "10.0.0.2/24", "fd00::2/64" or "fe80::1%3/64" (numeric scope id); without
// "/len" the prefix is the full address. up=true, loopback when the address
// is a loopback address, attributes unknown. InvalidArgument on a bad
// address or prefix length. Never resolves names.
Result<NetInterface> MakeNetInterface(std::string_view name, std::string_view cidr);

// "eth0 10.0.0.2/24 up mtu 1500 25000Mb/s": one line for logs and errors.
std::string DescribeInterface(const NetInterface& iface);

}  // namespace loom
