// Several data NICs per host for TCP: the address list a rank publishes
// (one listener per NIC) and which NIC pairs two ranks stripe their sockets
// over (same subnet), as pure functions so both ends agree by construction.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace loom {

// One listening NIC: "10.1.0.2:41234" with its prefix length and name.
struct TcpNic {
  std::string endpoint;  // "a.b.c.d:port" or "[v6]:port"
  int prefix_len = 0;    // 0: unknown (matches only the identical address family)
  std::string ifname;    // local only; not published
};

// Published form. One NIC: "10.1.0.2:41234", exactly the single-NIC format.
// Several: "10.1.0.2:41234/24,10.2.0.2:41235/24" (prefix after the port).
std::string FormatNicList(const std::vector<TcpNic>& nics);
// InvalidArgument naming the text when an entry is malformed.
Result<std::vector<TcpNic>> ParseNicList(std::string_view text);

// The NIC pairs (index into `lower`, index into `higher`) two ranks stripe
// over: for each of the lower rank's NICs in order, the first unused NIC of
// the higher rank on the same IPv4/IPv6 subnet (the shorter prefix of the
// two). When none match, {(0, 0)}: the first NICs, as with one NIC.
// Both ends call it with the same (lower, higher) order on the published
// lists (ParseNicList of each end's FormatNicList), so they agree.
// Pure; thread-safe.
std::vector<std::pair<int, int>> MatchNics(const std::vector<TcpNic>& lower,
                                           const std::vector<TcpNic>& higher);

}  // namespace loom
