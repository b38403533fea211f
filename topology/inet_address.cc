// Socket address parsing, resolution, printing and classification.
#include "topology/inet_address.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netdb.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace loom {
namespace {

const sockaddr_in* AsIn(const sockaddr* sa) {
  return reinterpret_cast<const sockaddr_in*>(sa);
}
const sockaddr_in6* AsIn6(const sockaddr* sa) {
  return reinterpret_cast<const sockaddr_in6*>(sa);
}

// The address bytes in network order, and their count (4 or 16; 0 otherwise).
const uint8_t* AddressBytes(const sockaddr* sa, size_t* len) {
  if (sa != nullptr && sa->sa_family == AF_INET) {
    *len = 4;
    return reinterpret_cast<const uint8_t*>(&AsIn(sa)->sin_addr);
  }
  if (sa != nullptr && sa->sa_family == AF_INET6) {
    *len = 16;
    return AsIn6(sa)->sin6_addr.s6_addr;
  }
  *len = 0;
  return nullptr;
}

void SetPort(sockaddr_storage* ss, uint16_t port) {
  if (ss->ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(ss)->sin_port = htons(port);
  if (ss->ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(ss)->sin6_port = htons(port);
}

std::string Quote(std::string_view s) {
  std::string q = "'";
  q += s;
  q += "'";
  return q;
}

}  // namespace

socklen_t SockaddrLen(const sockaddr* sa) {
  if (sa == nullptr) return 0;
  if (sa->sa_family == AF_INET) return sizeof(sockaddr_in);
  if (sa->sa_family == AF_INET6) return sizeof(sockaddr_in6);
  return 0;
}

std::string FormatAddress(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  size_t len = 0;
  const uint8_t* bytes = AddressBytes(sa, &len);
  if (bytes == nullptr || inet_ntop(sa->sa_family, bytes, buf, sizeof(buf)) == nullptr) return "";
  std::string out = buf;
  if (sa->sa_family == AF_INET6 && AsIn6(sa)->sin6_scope_id != 0) {
    const uint32_t scope = AsIn6(sa)->sin6_scope_id;
    char name[IF_NAMESIZE] = {};
    out += '%';
    out += if_indextoname(scope, name) != nullptr ? std::string(name) : std::to_string(scope);
  }
  return out;
}

std::string FormatHostPort(const sockaddr* sa) {
  std::string host = FormatAddress(sa);
  if (host.empty()) return "";
  const std::string port = std::to_string(SockaddrPort(sa));
  if (sa->sa_family == AF_INET6) return "[" + host + "]:" + port;
  return host + ":" + port;
}

uint16_t SockaddrPort(const sockaddr* sa) {
  if (sa == nullptr) return 0;
  if (sa->sa_family == AF_INET) return ntohs(AsIn(sa)->sin_port);
  if (sa->sa_family == AF_INET6) return ntohs(AsIn6(sa)->sin6_port);
  return 0;
}

bool IsLoopbackAddress(const sockaddr* sa) {
  size_t len = 0;
  const uint8_t* b = AddressBytes(sa, &len);
  if (len == 4) return b[0] == 127;
  if (len == 16) {
    const in6_addr& a = AsIn6(sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && b[12] == 127);
  }
  return false;
}

bool IsLinkLocalAddress(const sockaddr* sa) {
  size_t len = 0;
  const uint8_t* b = AddressBytes(sa, &len);
  if (len == 4) return b[0] == 169 && b[1] == 254;
  if (len == 16) return IN6_IS_ADDR_LINKLOCAL(&AsIn6(sa)->sin6_addr);
  return false;
}

bool InSameSubnet(const sockaddr* local, int prefix_len, const sockaddr* remote) {
  size_t len = 0, remote_len = 0;
  const uint8_t* a = AddressBytes(local, &len);
  const uint8_t* b = AddressBytes(remote, &remote_len);
  if (a == nullptr || b == nullptr || local->sa_family != remote->sa_family) return false;
  if (len == 16 && AsIn6(local)->sin6_scope_id != AsIn6(remote)->sin6_scope_id) return false;
  int bits = std::clamp(prefix_len, 0, static_cast<int>(len * 8));
  for (size_t i = 0; bits > 0; ++i, bits -= 8) {
    const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((a[i] & mask) != (b[i] & mask)) return false;
  }
  return true;
}

Result<sockaddr_storage> ParseIpAddress(std::string_view text) {
  const std::string s(text);
  const size_t pct = s.find('%');
  const std::string addr = s.substr(0, pct);
  sockaddr_storage ss{};
  auto* in = reinterpret_cast<sockaddr_in*>(&ss);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, addr.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
  } else if (inet_pton(AF_INET6, addr.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
  } else {
    return InvalidArgument(Quote(text) + " is not a numeric IPv4 or IPv6 address");
  }
  if (pct == std::string::npos) return ss;

  const std::string scope = s.substr(pct + 1);
  if (ss.ss_family != AF_INET6 || scope.empty()) {
    return InvalidArgument(Quote(text) + ": a %scope suffix needs an IPv6 address and a scope");
  }
  if (std::all_of(scope.begin(), scope.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    errno = 0;
    const unsigned long n = std::strtoul(scope.c_str(), nullptr, 10);
    if (errno != 0 || n > UINT32_MAX)
      return InvalidArgument(Quote(text) + ": scope id out of range");
    in6->sin6_scope_id = static_cast<uint32_t>(n);
  } else {
    in6->sin6_scope_id = if_nametoindex(scope.c_str());
    if (in6->sin6_scope_id == 0) {
      return InvalidArgument(Quote(text) + ": no interface named " + Quote(scope) +
                             " on this host");
    }
  }
  return ss;
}

Result<sockaddr_storage> ResolveHost(std::string_view host, uint16_t port) {
  if (host.empty()) return InvalidArgument("empty host name");
  // Numeric addresses skip the resolver: no DNS round trip, and a %scope is kept.
  Result<sockaddr_storage> numeric = ParseIpAddress(host);
  if (numeric.ok()) {
    SetPort(&numeric.value(), port);
    return numeric;
  }

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  // No AI_ADDRCONFIG: it hides IPv4 answers in a namespace that only has lo.
  addrinfo* list = nullptr;
  const std::string name(host);
  const int rv = getaddrinfo(name.c_str(), nullptr, &hints, &list);
  if (rv != 0) {
    std::string m = "could not resolve host " + Quote(host) + " (" + gai_strerror(rv);
    if (rv == EAI_SYSTEM) m += std::string(": ") + std::strerror(errno);
    m += "); use an IP address, or fix /etc/hosts or DNS on this host";
    // A resolver that cannot be reached is the system's problem; an unknown
    // name is the caller's.
    if (rv == EAI_AGAIN || rv == EAI_SYSTEM || rv == EAI_MEMORY || rv == EAI_FAIL) {
      return SystemError(std::move(m));
    }
    return InvalidArgument(std::move(m));
  }
  const addrinfo* chosen = nullptr;
  for (const addrinfo* p = list; p != nullptr; p = p->ai_next) {
    if (p->ai_family == AF_INET) {
      chosen = p;
      break;
    }
    if (p->ai_family == AF_INET6 && chosen == nullptr) chosen = p;
  }
  sockaddr_storage ss{};
  if (chosen != nullptr) std::memcpy(&ss, chosen->ai_addr, chosen->ai_addrlen);
  freeaddrinfo(list);
  if (chosen == nullptr)
    return InvalidArgument("host " + Quote(host) + " has no IPv4 or IPv6 address");
  SetPort(&ss, port);
  return ss;
}

Result<sockaddr_storage> ParseHostPort(std::string_view text) {
  std::string_view host, port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return InvalidArgument(Quote(text) + " is not of the form [IPv6 address]:port");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return InvalidArgument(Quote(text) +
                             " has no port; expected host:port or [IPv6 address]:port");
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return InvalidArgument(Quote(text) + ": put an IPv6 address in brackets, as in [::1]:29500");
    }
  }
  if (host.empty()) return InvalidArgument(Quote(text) + " has an empty host");

  // from_chars takes digits only: no sign, no blanks, no overflow.
  uint32_t port_value = 0;
  const char* port_end = port.data() + port.size();
  const auto [stop, ec] = std::from_chars(port.data(), port_end, port_value);
  const bool digits = !port.empty() && ec == std::errc() && stop == port_end;
  if (!digits || port_value > 65535) {
    return InvalidArgument(Quote(text) + ": port " + Quote(port) +
                           " is not a number in [0, 65535]");
  }

  if (text.front() == '[') {
    LOOM_ASSIGN_OR_RETURN(sockaddr_storage ss, ParseIpAddress(host));
    if (ss.ss_family != AF_INET6) {
      return InvalidArgument(Quote(text) +
                             ": brackets hold an IPv6 address; write an IPv4 address without them");
    }
    SetPort(&ss, static_cast<uint16_t>(port_value));
    return ss;
  }
  return ResolveHost(host, static_cast<uint16_t>(port_value));
}

}  // namespace loom
