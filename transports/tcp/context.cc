// TcpContext: Boost.Asio acceptors (one per NIC) and connects with
// deadlines; a 24-byte hello (magic, tag, rank, socket index) authenticates
// each connection before use.
#include "transports/tcp/context.h"

#include <boost/asio.hpp>
#include <algorithm>
#include <map>

#include "base/log.h"
#include "transports/tcp/connection.h"

namespace loom {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr uint64_t kHelloMagic = 0x6c6f6f6d74637031ull;  // "loomtcp1"

// Sockets to one peer: nsocks each way (the bulk lane), then one carrying
// small messages both ways (TcpConnection).
int SocketsPerPeer(int nsocks) {
  return 2 * nsocks + 1;
}

struct Hello {
  uint64_t magic;
  uint64_t tag;
  int32_t rank;
  int32_t index;  // which of the pair's sockets this is
};

Result<tcp::endpoint> ParseEndpoint(const std::string& text) {
  // "a.b.c.d:port" or "[v6]:port"
  auto colon = text.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("bad address '" + text + "'");
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return InvalidArgument("bad address '" + text + "': " + ec.message());
  int port = std::atoi(text.c_str() + colon + 1);
  return tcp::endpoint(addr, static_cast<uint16_t>(port));
}

}  // namespace

struct TcpContext::Impl {
  asio::io_context io;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;  // one per NIC
  std::vector<TcpNic> nics;  // what they listen on, with ports and names
  uint64_t tag = 0;
};

TcpContext::~TcpContext() = default;

Result<std::unique_ptr<TcpContext>> TcpContext::Create(const std::string& bind_address,
                                                       const std::string& ifname, uint64_t tag) {
  return Create(std::vector<TcpListen>{{bind_address, ifname, 0}}, tag);
}

Result<std::unique_ptr<TcpContext>> TcpContext::Create(const std::vector<TcpListen>& nics,
                                                       uint64_t tag) {
  if (nics.empty()) return InvalidArgument("TcpContext needs at least one interface");
  std::unique_ptr<TcpContext> ctx(new TcpContext());
  ctx->impl_ = std::make_unique<Impl>();
  Impl& im = *ctx->impl_;
  im.tag = tag;
  for (const TcpListen& nic : nics) {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(nic.address, ec);
    if (ec) return InvalidArgument("bad bind address '" + nic.address + "': " + ec.message());
    tcp::endpoint ep(addr, 0);
    auto acceptor = std::make_unique<tcp::acceptor>(im.io);
    acceptor->open(ep.protocol(), ec);
    if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor->bind(ep, ec);
    if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return SystemError("cannot listen on " + nic.address + " (" + nic.ifname + "): " +
                         ec.message() + "; choose another interface with NCCL_SOCKET_IFNAME");
    }
    auto local = acceptor->local_endpoint();
    std::string host = local.address().to_string();
    if (local.address().is_v6()) host = "[" + host + "]";
    im.nics.push_back(TcpNic{host + ":" + std::to_string(local.port()), nic.prefix_len, nic.ifname});
    LOOM_INFO(log::kInit | log::kNet, "NET/Socket : Using [%zu]%s:%s", im.acceptors.size(),
              nic.ifname.c_str(), im.nics.back().endpoint.c_str());
    im.acceptors.push_back(std::move(acceptor));
  }
  return ctx;
}

std::string TcpContext::address() const { return FormatNicList(impl_->nics); }

Result<std::vector<std::unique_ptr<Connection>>> TcpContext::Connect(
    int rank, const std::vector<int>& peers, const std::vector<std::string>& addresses,
    const std::vector<std::string>& hosts, int nsocks, Deadline deadline) {
  Impl& im = *impl_;
  // Per peer: the NIC pairs (lower rank's index, higher rank's), the socket
  // count, and the local NIC names for `via`.
  struct Plan {
    std::vector<TcpNic> theirs;
    std::vector<std::pair<int, int>> pairs;
    int nsocks = 0;
    std::string via;
  };
  // Match on what the peer sees of this rank (a single NIC is published
  // without its prefix), so both ends compute the same pairs; indices still
  // line up with im.nics.
  auto published = ParseNicList(FormatNicList(im.nics));
  if (!published.ok()) return published.status();
  std::map<int, Plan> plan;
  for (int p : peers) {
    Plan& pl = plan[p];
    auto theirs = ParseNicList(addresses[p]);
    if (!theirs.ok()) {
      return theirs.status().WithContext("rank " + std::to_string(p) + " (" + hosts[p] + ")");
    }
    pl.theirs = std::move(theirs).value();
    pl.pairs = p > rank ? MatchNics(*published, pl.theirs) : MatchNics(pl.theirs, *published);
    pl.nsocks = std::max(nsocks, static_cast<int>(pl.pairs.size()));
    for (auto [lo, hi] : pl.pairs) {
      pl.via += (pl.via.empty() ? "" : ",") + im.nics[p > rank ? lo : hi].ifname;
    }
  }
  std::map<int, std::vector<int>> fd_of;  // peer -> connected fds by index (-1 = not yet)
  int wanted = 0;
  for (int p : peers) {
    fd_of[p].assign(SocketsPerPeer(plan[p].nsocks), -1);
    wanted += SocketsPerPeer(plan[p].nsocks);
  }
  int connected = 0;
  int expected_accepts = 0;
  Status failure;
  bool finished = false;  // late handlers (cancellations) must not report errors
  std::vector<std::unique_ptr<tcp::socket>> sockets;

  // Higher rank connects to the lower one and introduces itself; with
  // several NICs each socket leaves from its local NIC's address.
  for (int p : peers) {
    const Plan& pl = plan[p];
    if (p > rank) {
      expected_accepts += SocketsPerPeer(pl.nsocks);
      continue;
    }
    for (int index = 0; index < SocketsPerPeer(pl.nsocks); ++index) {
      const auto [lo, hi] = pl.pairs[index % pl.pairs.size()];
      auto ep = ParseEndpoint(pl.theirs[lo].endpoint);
      if (!ep.ok()) return ep.status();
      auto sock = std::make_unique<tcp::socket>(im.io);
      tcp::socket* s = sock.get();
      if (im.nics.size() > 1) {
        boost::system::error_code bec;
        auto local = ParseEndpoint(im.nics[hi].endpoint);
        if (local.ok()) s->open(local->protocol(), bec);
        if (local.ok() && !bec) s->bind(tcp::endpoint(local->address(), 0), bec);
        if (!local.ok() || bec) {
          return SystemError("cannot bind a socket to " + im.nics[hi].endpoint + " (" +
                             im.nics[hi].ifname + ")" + (bec ? ": " + bec.message() : ""));
        }
      }
      auto hello = std::make_shared<Hello>(Hello{kHelloMagic, im.tag, rank, index});
      s->async_connect(ep.value(), [&, s, p, index, hello](const boost::system::error_code& ec) {
        if (finished) return;
        if (ec) {
          if (failure.ok()) {
            failure = SystemError("cannot connect to rank " + std::to_string(p) + " (" + hosts[p] +
                                  ") at " + addresses[p] + " from " + plan[p].via + ": " +
                                  ec.message() +
                                  " (firewall, wrong interface or unreachable network? see "
                                  "NCCL_SOCKET_IFNAME and `loom doctor`)");
          }
          return;
        }
        asio::async_write(*s, asio::buffer(hello.get(), sizeof(Hello)),
                          [&, s, p, index, hello](const boost::system::error_code& ec2, size_t) {
                            if (finished) return;
                            if (ec2) {
                              if (failure.ok()) {
                                failure = SystemError("hello to rank " + std::to_string(p) +
                                                      " failed: " + ec2.message());
                              }
                              return;
                            }
                            fd_of[p][index] = s->release();
                            ++connected;
                          });
      });
      sockets.push_back(std::move(sock));
    }
  }

  // Lower rank accepts; a connection that does not present our tag and a
  // valid rank is dropped (a stranger or a stale job), and we keep waiting.
  std::function<void(tcp::acceptor*)> accept_one = [&](tcp::acceptor* acceptor) {
    auto sock = std::make_shared<tcp::socket>(im.io);
    acceptor->async_accept(*sock, [&, sock, acceptor](const boost::system::error_code& ec) {
      if (finished) return;
      if (ec) {
        if (failure.ok()) failure = SystemError("accept failed: " + ec.message());
        return;
      }
      auto hello = std::make_shared<Hello>();
      asio::async_read(*sock, asio::buffer(hello.get(), sizeof(Hello)),
                       [&, sock, hello, acceptor](const boost::system::error_code& ec2, size_t) {
                         if (finished) return;
                         auto it = fd_of.find(hello->rank);
                         bool valid = !ec2 && hello->magic == kHelloMagic && hello->tag == im.tag &&
                                      hello->rank > rank && it != fd_of.end() &&
                                      hello->index >= 0 &&
                                      hello->index < static_cast<int>(it->second.size()) &&
                                      it->second[hello->index] < 0;
                         if (!valid) {
                           LOOM_WARN(log::kNet,
                                     "rank %d: refused a TCP connection that is not from this "
                                     "communicator (stale job or stranger)",
                                     rank);
                         } else {
                           it->second[hello->index] = sock->release();
                           ++connected;
                           --expected_accepts;
                         }
                         if (expected_accepts > 0) accept_one(acceptor);
                       });
    });
  };
  if (expected_accepts > 0) {
    for (auto& a : im.acceptors) accept_one(a.get());
  }

  while (failure.ok() && connected < wanted) {
    if (deadline.expired()) break;
    im.io.run_for(std::chrono::milliseconds(deadline.RemainingMs(100)));
    if (im.io.stopped()) im.io.restart();
  }
  finished = true;
  for (auto& a : im.acceptors) a->cancel();
  for (auto& s : sockets) {
    boost::system::error_code ignored;
    if (s->is_open()) s->close(ignored);
  }
  im.io.run_for(std::chrono::milliseconds(10));  // let cancelled handlers finish
  if (failure.ok() && connected < wanted) {
    std::string missing;
    for (int p : peers) {
      if (std::count(fd_of[p].begin(), fd_of[p].end(), -1) > 0) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(p);
      }
    }
    failure = TimeoutError("TCP connections from/to rank(s) " + missing +
                           " not established before the deadline");
  }
  if (!failure.ok()) {
    for (auto& [p, fds] : fd_of) {
      for (int fd : fds) {
        if (fd >= 0) ::close(fd);
      }
    }
    return failure;
  }
  std::vector<std::unique_ptr<Connection>> conns;
  for (int p : peers) {
    const Plan& pl = plan[p];
    std::vector<int> fds = std::move(fd_of[p]);
    const int small_fd = fds.back();  // the last: the small lane (TcpConnection)
    fds.pop_back();
    conns.push_back(std::make_unique<TcpConnection>(p, rank < p, hosts[p], "NET/Socket/" + pl.via,
                                                    std::move(fds), small_fd));
    LOOM_INFO(log::kInit | log::kNet,
              "rank %d -> rank %d via NET/Socket/%s (%d socket%s each way, 1 both ways for "
              "messages up to %zu bytes)",
              rank, p, pl.via.c_str(), pl.nsocks, pl.nsocks > 1 ? "s" : "",
              TcpConnection::kSmallLaneBytes);
  }
  return conns;
}

}  // namespace loom
