// Which network interfaces the socket transports and bootstrap use: the
// NCCL_SOCKET_IFNAME filter grammar, NCCL's default interface order, and the
// interface on a remote address's subnet. All pure functions over an
// interface list (see netif.h), so every rule is testable without real NICs.
#pragma once

#include <sys/socket.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "topology/netif.h"

namespace loom {

// A list of interface-name prefixes in NCCL's grammar (parseStringList and
// matchIfList in NCCL), used by NCCL_SOCKET_IFNAME and, later, NCCL_IB_HCA:
//
//   "eth,ib"     names starting with "eth" or "ib"
//   "^docker,lo" names starting with neither (a leading '^' excludes)
//   "=eth0"      exactly "eth0", not "eth0.2093" (a leading '=' is exact)
//   "^=eth0"     every name except exactly "eth0" ("=^" is not this: after
//                '=' a '^' is an ordinary character)
//   "mlx5_0:1"   an entry may carry ":port"; the text after ':' up to the
//                next ',' is the port (atoi), and the entry matches only that
//                port when the caller passes one
//
// Like NCCL: entries are split at ',' and empty entries dropped; spaces are
// NOT trimmed (" ib0" never matches, see Warnings()); an empty list matches
// every name, so "^" alone matches none. A plain immutable value; thread-safe.
//
// Right:  Parse("=bond0").Matches("bond0.2093") == false
// Wrong:  Parse("bond0") to mean only bond0: it also takes the VLAN bond0.2093.
class SocketIfnameFilter {
 public:
  struct Entry {
    std::string prefix;
    int port = -1;  // -1: any port
  };

  SocketIfnameFilter() = default;  // matches every name

  // Never fails: every string means something in NCCL's grammar.
  static SocketIfnameFilter Parse(std::string_view spec);

  // Whether `ifname` (and `port`, -1 for "not a port-specific query") is selected.
  bool Matches(std::string_view ifname, int port = -1) const;

  // How the filter reads, for logs and errors: "names starting with eth or ib",
  // "names other than exactly eth0", "every name".
  std::string Describe() const;

  // Entries that can never match a Linux interface name, each with a hint:
  // whitespace inside (NCCL does not trim), longer than 15 characters, or
  // "=^…" written for "^=…". Empty when the filter looks sane.
  std::vector<std::string> Warnings() const;

  const std::string& spec() const { return spec_; }
  bool exclude() const { return exclude_; }
  bool exact() const { return exact_; }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::string spec_;
  bool exclude_ = false;
  bool exact_ = false;
  std::vector<Entry> entries_;
};

// NCCL_SOCKET_FAMILY: "" means any (AF_UNSPEC), "AF_INET", "AF_INET6".
// InvalidArgument for anything else (NCCL silently ignores such values; a
// typo here should not go unnoticed).
Result<int> ParseSocketFamily(std::string_view family_spec);

// The interfaces to use for sockets, best first, as NCCL's ncclFindInterfaces
// picks them; at most one address per interface name, at most max_count (> 0).
//
// ifname_spec (NCCL_SOCKET_IFNAME): when longer than one character it is the
// only rule (NCCL ignores a one-character value, and so does this). Otherwise
// the first of these passes that finds anything wins:
//   1. names starting with "ib";
//   2. if root_hint is given (NCCL_COMM_ID's address): the interface on its
//      subnet (InterfaceForRemote);
//   3. names not starting with "docker", "lo" or "virbr";
//   4. "docker*", then 5. "lo*", then 6. "virbr*".
// In every pass an address qualifies when its interface is up, its family is
// allowed by family_spec, and it is not ::1. Per interface the IPv4 address
// is preferred, then a global IPv6, then a link-local IPv6 (NCCL gets this
// order from getifaddrs). Interfaces that only have IPv6 link-local addresses
// are dropped while any interface in the same pass has a better address:
// a link-local address is rarely reachable from other hosts (FAILURE_MODES
// row 1). Order otherwise follows `all`.
//
// When nothing qualifies: InvalidUsage if ifname_spec or family_spec narrowed
// the choice, else SystemError; the message lists every interface of `all`
// with the reason it was rejected, the filter, and how to set
// NCCL_SOCKET_IFNAME. InvalidArgument for a bad family_spec or max_count.
// Pure; thread-safe.
Result<std::vector<NetInterface>> SelectSocketInterfaces(const std::vector<NetInterface>& all,
                                                         std::string_view ifname_spec,
                                                         std::string_view family_spec,
                                                         int max_count,
                                                         const sockaddr* root_hint = nullptr);

// The first interface of `all` that is up and whose subnet contains `remote`
// (family, prefix and, for IPv6, scope id must agree), as NCCL's
// ncclFindInterfaceMatchSubnet; nullopt when none does or remote is null.
// Unlike NCCL, interfaces that are down are skipped. Example: 127.0.0.1 -> lo.
// Pure; thread-safe.
std::optional<NetInterface> InterfaceForRemote(const std::vector<NetInterface>& all,
                                               const sockaddr* remote);

}  // namespace loom
