// NIC address lists and subnet matching for striped TCP (nics.h).
#include "transports/tcp/nics.h"

#include <arpa/inet.h>

#include <array>
#include <cstdlib>
#include <optional>

namespace loom {

namespace {

// The address bytes of "a.b.c.d:port" / "[v6]:port" (4 or 16 of them).
std::optional<std::vector<uint8_t>> AddressBytes(std::string_view endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string host(endpoint.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (auto pct = host.find('%'); pct != std::string::npos) host.resize(pct);
  std::array<uint8_t, 16> buf{};
  if (inet_pton(AF_INET, host.c_str(), buf.data()) == 1) {
    return std::vector<uint8_t>(buf.begin(), buf.begin() + 4);
  }
  if (inet_pton(AF_INET6, host.c_str(), buf.data()) == 1) {
    return std::vector<uint8_t>(buf.begin(), buf.end());
  }
  return std::nullopt;
}

bool SameSubnet(const TcpNic& a, const TcpNic& b) {
  auto x = AddressBytes(a.endpoint), y = AddressBytes(b.endpoint);
  if (!x || !y || x->size() != y->size()) return false;
  int prefix = std::min(a.prefix_len, b.prefix_len);
  if (prefix <= 0) return false;
  for (size_t i = 0; i < x->size() && prefix > 0; ++i, prefix -= 8) {
    const uint8_t mask = prefix >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - prefix));
    if (((*x)[i] & mask) != ((*y)[i] & mask)) return false;
  }
  return true;
}

}  // namespace

std::string FormatNicList(const std::vector<TcpNic>& nics) {
  if (nics.size() == 1) return nics[0].endpoint;
  std::string out;
  for (const TcpNic& n : nics) {
    out += (out.empty() ? "" : ",") + n.endpoint + "/" + std::to_string(n.prefix_len);
  }
  return out;
}

Result<std::vector<TcpNic>> ParseNicList(std::string_view text) {
  std::vector<TcpNic> out;
  for (bool more = !text.empty(); more;) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    more = comma != std::string_view::npos;
    if (more) text = text.substr(comma + 1);
    TcpNic n;
    const size_t slash = item.rfind('/');
    if (slash != std::string_view::npos) {
      const std::string prefix(item.substr(slash + 1));
      char* end = nullptr;
      const long p = std::strtol(prefix.c_str(), &end, 10);
      if (prefix.empty() || *end != '\0' || p < 0 || p > 128) {
        return InvalidArgument("bad prefix length in TCP address '" + std::string(item) + "'");
      }
      n.prefix_len = static_cast<int>(p);
      item = item.substr(0, slash);
    }
    if (!AddressBytes(item)) return InvalidArgument("bad TCP address '" + std::string(item) + "'");
    n.endpoint = std::string(item);
    out.push_back(std::move(n));
  }
  if (out.empty()) return InvalidArgument("empty TCP address list");
  return out;
}

std::vector<std::pair<int, int>> MatchNics(const std::vector<TcpNic>& lower,
                                           const std::vector<TcpNic>& higher) {
  std::vector<std::pair<int, int>> pairs;
  std::vector<bool> used(higher.size(), false);
  for (size_t i = 0; i < lower.size(); ++i) {
    for (size_t j = 0; j < higher.size(); ++j) {
      if (used[j] || !SameSubnet(lower[i], higher[j])) continue;
      used[j] = true;
      pairs.emplace_back(static_cast<int>(i), static_cast<int>(j));
      break;
    }
  }
  if (pairs.empty()) pairs.emplace_back(0, 0);
  return pairs;
}

}  // namespace loom
