// IPv4/IPv6 socket addresses: "host:port" parsing and name resolution,
// printing, and the classifications topology and the doctor need (loopback,
// link-local, same subnet).
//
// All functions are thread-safe. Only ResolveHost and ParseHostPort block:
// they call getaddrinfo, which may ask DNS and takes as long as the
// resolver's own timeout.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace loom {

// sizeof(sockaddr_in) or sizeof(sockaddr_in6) by sa->sa_family; 0 for any
// other family or a null pointer.
socklen_t SockaddrLen(const sockaddr* sa);

// The numeric address without port: "10.1.2.3", "fd00::2", and for an IPv6
// address with a scope "fe80::1%eth0" (the scope's interface name, or its
// number when the index names no interface here). "" for a family other than
// AF_INET/AF_INET6.
std::string FormatAddress(const sockaddr* sa);

// FormatAddress plus the port: "10.1.2.3:29500", "[fe80::1%eth0]:29500".
// The form ParseHostPort reads back.
std::string FormatHostPort(const sockaddr* sa);

uint16_t SockaddrPort(const sockaddr* sa);  // host byte order; 0 for other families

// 127.0.0.0/8, ::1, and IPv4-mapped loopback (::ffff:127.x.y.z). A peer that
// resolves its own hostname to one of these (Debian's "127.0.1.1 hostname"
// line in /etc/hosts) hands other hosts an address they cannot reach:
// FAILURE_MODES row 2.
bool IsLoopbackAddress(const sockaddr* sa);

// 169.254.0.0/16 and fe80::/10: usable only on one link (and, for IPv6, only
// with the right scope id), never a good address to advertise to other hosts.
bool IsLinkLocalAddress(const sockaddr* sa);

// Whether `remote` lies in the subnet `local`/prefix_len. Families must be
// equal; for IPv6 the scope ids must be equal too (two links can carry the
// same fe80::/64). prefix_len is clamped to [0, 32] or [0, 128].
bool InSameSubnet(const sockaddr* local, int prefix_len, const sockaddr* remote);

// A numeric IPv4 or IPv6 address ("10.0.0.1", "::1", "fe80::1%eth0" or
// "fe80::1%3"), port 0. No name lookup, never blocks. InvalidArgument when
// `text` is not such an address or names an unknown scope interface.
Result<sockaddr_storage> ParseIpAddress(std::string_view text);

// Resolves `host` (a name or a numeric address; IPv6 without brackets) with
// getaddrinfo and returns the first IPv4 answer, else the first IPv6 answer,
// with `port` set. Blocks on the resolver. InvalidArgument naming the host and
// the resolver's reason when nothing resolves ("Could not resolve hostname
// node0" is FAILURE_MODES row 2); check IsLoopbackAddress on the answer
// before advertising it to other hosts.
Result<sockaddr_storage> ResolveHost(std::string_view host, uint16_t port);

// Parses "host:port", "1.2.3.4:port" or "[v6addr]:port" (a scope as in
// "[fe80::1%eth0]:port" is kept) and resolves the host with ResolveHost.
// The port must be a decimal number in [0, 65535]; 0 means "any", which is
// only meaningful for a listening address. InvalidArgument, quoting the text,
// for a missing or bad port, an empty host, an unbracketed IPv6 address, or
// a host that does not resolve. Blocks on the resolver for names.
Result<sockaddr_storage> ParseHostPort(std::string_view text);

}  // namespace loom
