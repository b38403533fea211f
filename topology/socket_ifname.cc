// NCCL_SOCKET_IFNAME grammar and NCCL's socket interface choice.
#include "topology/socket_ifname.h"

#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <climits>

#include "topology/inet_address.h"

namespace loom {
namespace {

constexpr size_t kMaxIfnameLen = 15;  // IFNAMSIZ - 1

// C's atoi, which NCCL applies to the text after ':': leading blanks, an
// optional sign, then digits up to the first non-digit; 0 when there are none.
int LeadingInt(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  long long v = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i)
    v = std::min<long long>(v * 10 + (s[i] - '0'), INT_MAX);
  return static_cast<int>(negative ? -v : v);
}

std::string Quoted(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

// Preference among one interface's addresses: lower is better.
int AddressRank(const NetInterface& iface) {
  if (iface.family == AF_INET) return 0;
  return IsLinkLocalAddress(iface.sockaddr_ptr()) ? 2 : 1;
}

// Why this address is never chosen whatever the names, or "" if it may be.
std::string AddressUnusable(const NetInterface& iface, int family) {
  if (family != AF_UNSPEC && iface.family != family) return "excluded by NCCL_SOCKET_FAMILY";
  if (iface.family == AF_INET6 &&
      IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&iface.addr)->sin6_addr)) {
    return "::1 is never used";
  }
  return "";
}

bool Usable(const NetInterface& iface, int family) {
  return iface.up && AddressUnusable(iface, family).empty();
}

// One pass of ncclFindInterfaces: the usable addresses whose names `filter`
// selects, one per name (the best-ranked), link-local-only names dropped when
// a better one exists, at most max_count.
std::vector<NetInterface> FindMatching(const std::vector<NetInterface>& all,
                                       const SocketIfnameFilter& filter, int family,
                                       int max_count) {
  std::vector<NetInterface> picked;
  for (const NetInterface& iface : all) {
    if (!Usable(iface, family) || !filter.Matches(iface.name)) continue;
    auto same = std::find_if(picked.begin(), picked.end(),
                             [&](const NetInterface& p) { return p.name == iface.name; });
    if (same == picked.end()) {
      picked.push_back(iface);
    } else if (AddressRank(iface) < AddressRank(*same)) {
      *same = iface;
    }
  }
  const bool any_routable = std::any_of(picked.begin(), picked.end(),
                                        [](const NetInterface& p) { return AddressRank(p) < 2; });
  if (any_routable) {
    picked.erase(std::remove_if(picked.begin(), picked.end(),
                                [](const NetInterface& p) { return AddressRank(p) == 2; }),
                 picked.end());
  }
  if (picked.size() > static_cast<size_t>(max_count)) picked.resize(static_cast<size_t>(max_count));
  return picked;
}

// For errors: every interface with its addresses and why it was not chosen,
// one entry per name, then the names that could be chosen. Example:
// "interfaces here: lo (up, loopback; 127.0.0.1/8, ::1/128 [::1 is never
// used]): name not selected; eth1 (down; 10.0.1.2/24): down (no carrier);
// usable names: lo".
std::string RejectionList(const std::vector<NetInterface>& all, const SocketIfnameFilter* filter,
                          int family) {
  if (all.empty()) return "this host has no interface that is up with an IPv4 or IPv6 address";
  std::vector<std::string> names;
  for (const NetInterface& i : all) {
    if (std::find(names.begin(), names.end(), i.name) == names.end()) names.push_back(i.name);
  }
  std::string s = "interfaces here: ";
  std::string usable_names;
  for (const std::string& name : names) {
    const NetInterface* first = nullptr;
    std::string addresses;
    bool any_usable = false;
    for (const NetInterface& i : all) {
      if (i.name != name) continue;
      if (first == nullptr) first = &i;
      if (!addresses.empty()) addresses += ", ";
      addresses += i.address + "/" + std::to_string(i.prefix_len);
      const std::string why = AddressUnusable(i, family);
      if (!why.empty()) addresses += " [" + why + "]";
      any_usable = any_usable || Usable(i, family);
    }
    std::string state = first->up ? "up" : "down";
    if (first->loopback) state += ", loopback";
    if (first->is_virtual && !first->loopback) state += ", virtual";
    if (first->mtu > 0) state += ", mtu " + std::to_string(first->mtu);
    std::string verdict = "not selected";
    if (!first->up) {
      verdict = "down (no carrier)";
    } else if (filter != nullptr && !filter->Matches(name)) {
      verdict = "name not selected";
    } else if (!any_usable) {
      verdict = "no usable address";
    }
    s.append(name).append(" (").append(state).append("; ").append(addresses).append("): ");
    s.append(verdict).append("; ");
    if (any_usable) usable_names += (usable_names.empty() ? "" : ", ") + name;
  }
  s += "usable names: " + (usable_names.empty() ? std::string("none") : usable_names);
  return s;
}

}  // namespace

SocketIfnameFilter SocketIfnameFilter::Parse(std::string_view spec) {
  SocketIfnameFilter f;
  f.spec_ = std::string(spec);
  if (!spec.empty() && spec.front() == '^') {
    f.exclude_ = true;
    spec.remove_prefix(1);
  }
  if (!spec.empty() && spec.front() == '=') {
    f.exact_ = true;
    spec.remove_prefix(1);
  }
  while (!spec.empty()) {
    const size_t comma = std::min(spec.find(','), spec.size());
    const std::string_view item = spec.substr(0, comma);
    spec.remove_prefix(std::min(comma + 1, spec.size()));
    const size_t colon = item.find(':');
    Entry e{std::string(item.substr(0, colon)), -1};
    if (colon != std::string_view::npos) e.port = LeadingInt(item.substr(colon + 1));
    if (!e.prefix.empty()) f.entries_.push_back(std::move(e));
  }
  return f;
}

bool SocketIfnameFilter::Matches(std::string_view ifname, int port) const {
  bool listed = entries_.empty();  // NCCL: no list selects everything
  for (const Entry& e : entries_) {
    const bool name_ok =
        exact_ ? ifname == e.prefix : ifname.substr(0, e.prefix.size()) == e.prefix;
    const bool port_ok = port == -1 || e.port == -1 || port == e.port;
    if (name_ok && port_ok) {
      listed = true;
      break;
    }
  }
  return listed != exclude_;
}

std::string SocketIfnameFilter::Describe() const {
  if (entries_.empty()) return exclude_ ? "no name (an empty list excluded)" : "every name";
  std::string list;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (i > 0) list += " or ";
    list += Quoted(entries_[i].prefix);
    if (entries_[i].port != -1) list += " port " + std::to_string(entries_[i].port);
  }
  if (exact_) return (exclude_ ? "names other than exactly " : "names exactly ") + list;
  return (exclude_ ? "names not starting with " : "names starting with ") + list;
}

std::vector<std::string> SocketIfnameFilter::Warnings() const {
  std::vector<std::string> w;
  if (entries_.empty() && !spec_.empty()) {
    w.push_back(exclude_ ? Quoted(spec_) + " excludes an empty list and so selects no interface"
                         : Quoted(spec_) + " lists no name and so selects every interface");
  }
  for (const Entry& e : entries_) {
    if (std::any_of(e.prefix.begin(), e.prefix.end(),
                    [](unsigned char c) { return std::isspace(c); })) {
      w.push_back(
          "entry " + Quoted(e.prefix) +
          " contains whitespace and never matches (spaces are not trimmed: write \"eth0,ib0\")");
    } else if (e.prefix.size() > kMaxIfnameLen) {
      w.push_back("entry " + Quoted(e.prefix) +
                  " is longer than 15 characters, the longest interface name");
    }
  }
  if (exact_ && !entries_.empty() && entries_.front().prefix.front() == '^') {
    w.push_back("\"=^\" takes '^' literally; write \"^=name\" to exclude exact names");
  }
  return w;
}

Result<int> ParseSocketFamily(std::string_view family_spec) {
  if (family_spec.empty()) return AF_UNSPEC;
  if (family_spec == "AF_INET") return AF_INET;
  if (family_spec == "AF_INET6") return AF_INET6;
  return InvalidArgument("NCCL_SOCKET_FAMILY=" + Quoted(family_spec) +
                         " is not AF_INET or AF_INET6 (unset means either)");
}

Result<std::vector<NetInterface>> SelectSocketInterfaces(const std::vector<NetInterface>& all,
                                                         std::string_view ifname_spec,
                                                         std::string_view family_spec,
                                                         int max_count, const sockaddr* root_hint) {
  LOOM_ASSIGN_OR_RETURN(const int family, ParseSocketFamily(family_spec));
  if (max_count <= 0) return InvalidArgument("SelectSocketInterfaces: max_count must be positive");

  if (ifname_spec.size() > 1) {
    const SocketIfnameFilter filter = SocketIfnameFilter::Parse(ifname_spec);
    std::vector<NetInterface> picked = FindMatching(all, filter, family, max_count);
    if (!picked.empty()) return picked;
    std::string m =
        "no usable network interface matches NCCL_SOCKET_IFNAME=" + Quoted(ifname_spec) + " (" +
        filter.Describe() + ")";
    if (family != AF_UNSPEC) m += " with NCCL_SOCKET_FAMILY=" + std::string(family_spec);
    for (const std::string& w : filter.Warnings()) m += "; note: " + w;
    m += "; " + RejectionList(all, &filter, family);
    m += "; set NCCL_SOCKET_IFNAME to usable names (\"=eth0\" for exactly eth0, \"^docker\" to "
         "exclude)";
    return InvalidUsage(std::move(m));
  }

  // NCCL's default order; later passes are fallbacks for hosts without a
  // better network, and lo only works when every rank is on this host.
  std::vector<NetInterface> picked =
      FindMatching(all, SocketIfnameFilter::Parse("ib"), family, max_count);
  if (picked.empty() && root_hint != nullptr &&
      (family == AF_UNSPEC || root_hint->sa_family == family)) {
    if (std::optional<NetInterface> near = InterfaceForRemote(all, root_hint))
      picked.push_back(*near);
  }
  for (const char* spec : {"^docker,lo,virbr", "docker", "lo", "virbr"}) {
    if (!picked.empty()) break;
    picked = FindMatching(all, SocketIfnameFilter::Parse(spec), family, max_count);
  }
  if (!picked.empty()) return picked;

  std::string m = "no usable network interface found";
  if (family != AF_UNSPEC) m += " with NCCL_SOCKET_FAMILY=" + std::string(family_spec);
  m += " (default order: ib*, then all but docker*/lo*/virbr*, then docker*, lo*, virbr*); ";
  m += RejectionList(all, nullptr, family);
  m += "; bring an interface up or set NCCL_SOCKET_IFNAME";
  if (family != AF_UNSPEC) return InvalidUsage(std::move(m));
  return SystemError(std::move(m));
}

std::optional<NetInterface> InterfaceForRemote(const std::vector<NetInterface>& all,
                                               const sockaddr* remote) {
  if (remote == nullptr) return std::nullopt;
  for (const NetInterface& iface : all) {
    if (iface.up && InSameSubnet(iface.sockaddr_ptr(), iface.prefix_len, remote)) return iface;
  }
  return std::nullopt;
}

}  // namespace loom
