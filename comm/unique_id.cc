// UniqueId: 128 bytes = magic, version, port, secret, numeric host address.
#include "comm/unique_id.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>

#include "base/params.h"
#include "comm/bootstrap/store_server.h"
#include "topology/inet_address.h"
#include "topology/netif.h"
#include "topology/socket_ifname.h"

namespace loom {

namespace {

constexpr uint32_t kIdMagic = 0x6d6f6f6c;  // "loom"
constexpr uint16_t kIdVersion = 1;

struct IdLayout {
  uint32_t magic;
  uint16_t version;
  uint16_t port;
  uint64_t secret;
  char host[112];
};
static_assert(sizeof(IdLayout) == sizeof(UniqueId::bytes));

uint64_t RandomSecret() {
  uint64_t v = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, &v, sizeof(v)) != static_cast<ssize_t>(sizeof(v))) v = 0;
    close(fd);
  }
  if (v == 0) v = std::random_device{}() * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(getpid());
  return v;
}

// The address a new store listens on: NCCL_SOCKET_IFNAME rules, first match.
Result<std::string> PickStoreAddress() {
  LOOM_ASSIGN_OR_RETURN(auto all, ListInterfaces());
  LOOM_ASSIGN_OR_RETURN(auto chosen,
                        SelectSocketInterfaces(all, params::kSocketIfname.Get(),
                                               params::kSocketFamily.Get(), 1));
  return chosen.front().address;
}

}  // namespace

namespace internal {

Result<UniqueIdParts> ParseUniqueId(const UniqueId& id) {
  IdLayout l;
  std::memcpy(&l, id.bytes.data(), sizeof(l));
  if (l.magic != kIdMagic || l.version != kIdVersion || l.port == 0 ||
      std::memchr(l.host, '\0', sizeof(l.host)) == nullptr) {
    return InvalidArgument("not a loom UniqueId (uninitialised, corrupted, or from another "
                           "library); get it from UniqueId::Create/ncclGetUniqueId on one rank");
  }
  return UniqueIdParts{l.host, l.port, l.secret};
}

UniqueId MakeUniqueId(const UniqueIdParts& p) {
  IdLayout l{};
  l.magic = kIdMagic;
  l.version = kIdVersion;
  l.port = p.port;
  l.secret = p.secret;
  std::snprintf(l.host, sizeof(l.host), "%s", p.host.c_str());
  UniqueId id;
  std::memcpy(id.bytes.data(), &l, sizeof(l));
  return id;
}

Status HostStoreForEnv(const LaunchEnv& env) {
  // Bind the numeric form of the root address (a hostname is resolved here).
  LOOM_ASSIGN_OR_RETURN(auto addr, ResolveHost(env.root_host, env.root_port));
  std::string host = FormatAddress(reinterpret_cast<const sockaddr*>(&addr));
  if (auto pct = host.find('%'); pct != std::string::npos) host = host.substr(0, pct);
  return bootstrap::EnsureServer(host, env.root_port, env.secret);
}

Result<UniqueId> CreateUniqueIdOn(const std::string& bind_host) {
  uint64_t secret = RandomSecret();
  LOOM_ASSIGN_OR_RETURN(auto server, bootstrap::StoreServer::Start(bind_host, 0, secret));
  UniqueIdParts parts{bind_host, server->port(), secret};
  bootstrap::AdoptServer(std::move(server));
  return MakeUniqueId(parts);
}

}  // namespace internal

Result<UniqueId> UniqueId::Create() {
  LOOM_ASSIGN_OR_RETURN(std::string host, PickStoreAddress());
  return internal::CreateUniqueIdOn(host);
}

Result<UniqueId> UniqueId::FromAddress(const std::string& host_port, uint64_t secret) {
  LOOM_ASSIGN_OR_RETURN(auto addr, ParseHostPort(host_port));
  const auto* sa = reinterpret_cast<const sockaddr*>(&addr);
  std::string host = FormatAddress(sa);
  return internal::MakeUniqueId({host, SockaddrPort(sa), secret});
}

std::string UniqueId::ToString() const {
  auto parts = internal::ParseUniqueId(*this);
  if (!parts.ok()) return "(invalid UniqueId)";
  char secret[17];
  std::snprintf(secret, sizeof(secret), "%016llx", static_cast<unsigned long long>(parts->secret));
  std::string host = parts->host;
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return host + ":" + std::to_string(parts->port) + "/" + secret;
}

Result<UniqueId> UniqueId::Parse(const std::string& text) {
  auto slash = text.rfind('/');
  if (slash == std::string::npos) return InvalidArgument("UniqueId text '" + text + "' lacks /secret");
  uint64_t secret = std::strtoull(text.c_str() + slash + 1, nullptr, 16);
  return FromAddress(text.substr(0, slash), secret);
}

}  // namespace loom
