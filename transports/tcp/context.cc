// TcpContext: Boost.Asio acceptor/connect with deadlines; a 24-byte hello
// (magic, tag, rank, socket index) authenticates each connection before use.
#include "transports/tcp/context.h"

#include <boost/asio.hpp>
#include <algorithm>
#include <map>

#include "comm/base/log.h"
#include "transports/tcp/connection.h"

namespace loom {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr uint64_t kHelloMagic = 0x6c6f6f6d74637031ull;  // "loomtcp1"

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
  tcp::acceptor acceptor{io};
  std::string ifname;
  uint64_t tag = 0;
};

TcpContext::~TcpContext() = default;

Result<std::unique_ptr<TcpContext>> TcpContext::Create(const std::string& bind_address,
                                                       const std::string& ifname, uint64_t tag) {
  std::unique_ptr<TcpContext> ctx(new TcpContext());
  ctx->impl_ = std::make_unique<Impl>();
  Impl& im = *ctx->impl_;
  im.ifname = ifname;
  im.tag = tag;
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(bind_address, ec);
  if (ec) return InvalidArgument("bad bind address '" + bind_address + "': " + ec.message());
  tcp::endpoint ep(addr, 0);
  im.acceptor.open(ep.protocol(), ec);
  if (!ec) im.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) im.acceptor.bind(ep, ec);
  if (!ec) im.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return SystemError("cannot listen on " + bind_address + " (" + ifname + "): " + ec.message() +
                       "; choose another interface with NCCL_SOCKET_IFNAME");
  }
  LOOM_INFO(log::kInit | log::kNet, "NET/Socket : Using [0]%s:%s", ifname.c_str(),
            ctx->address().c_str());
  return ctx;
}

std::string TcpContext::address() const {
  auto ep = impl_->acceptor.local_endpoint();
  std::string host = ep.address().to_string();
  if (ep.address().is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(ep.port());
}

Result<std::vector<std::unique_ptr<Connection>>> TcpContext::Connect(
    int rank, const std::vector<int>& peers, const std::vector<std::string>& addresses,
    const std::vector<std::string>& hosts, int nsocks, Deadline deadline) {
  Impl& im = *impl_;
  std::map<int, std::vector<int>> fd_of;  // peer -> connected fds by index (-1 = not yet)
  for (int p : peers) fd_of[p].assign(nsocks, -1);
  int connected = 0;
  const int wanted = static_cast<int>(peers.size()) * nsocks;
  int expected_accepts = 0;
  Status failure;
  bool finished = false;  // late handlers (cancellations) must not report errors
  std::vector<std::unique_ptr<tcp::socket>> sockets;

  // Higher rank connects to the lower one and introduces itself.
  for (int p : peers) {
    if (p > rank) {
      expected_accepts += nsocks;
      continue;
    }
    auto ep = ParseEndpoint(addresses[p]);
    if (!ep.ok()) return ep.status();
    for (int index = 0; index < nsocks; ++index) {
      auto sock = std::make_unique<tcp::socket>(im.io);
      tcp::socket* s = sock.get();
      auto hello = std::make_shared<Hello>(Hello{kHelloMagic, im.tag, rank, index});
      s->async_connect(ep.value(), [&, s, p, index, hello](const boost::system::error_code& ec) {
        if (finished) return;
        if (ec) {
          if (failure.ok()) {
            failure = SystemError("cannot connect to rank " + std::to_string(p) + " (" + hosts[p] +
                                  ") at " + addresses[p] + ": " + ec.message() +
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
  std::function<void()> accept_one = [&]() {
    auto sock = std::make_shared<tcp::socket>(im.io);
    im.acceptor.async_accept(*sock, [&, sock](const boost::system::error_code& ec) {
      if (finished) return;
      if (ec) {
        if (failure.ok()) failure = SystemError("accept failed: " + ec.message());
        return;
      }
      auto hello = std::make_shared<Hello>();
      asio::async_read(*sock, asio::buffer(hello.get(), sizeof(Hello)),
                       [&, sock, hello](const boost::system::error_code& ec2, size_t) {
                         if (finished) return;
                         auto it = fd_of.find(hello->rank);
                         bool valid = !ec2 && hello->magic == kHelloMagic && hello->tag == im.tag &&
                                      hello->rank > rank && it != fd_of.end() &&
                                      hello->index >= 0 && hello->index < nsocks &&
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
                         if (expected_accepts > 0) accept_one();
                       });
    });
  };
  if (expected_accepts > 0) accept_one();

  while (failure.ok() && connected < wanted) {
    if (deadline.expired()) break;
    im.io.run_for(std::chrono::milliseconds(deadline.RemainingMs(100)));
    if (im.io.stopped()) im.io.restart();
  }
  finished = true;
  im.acceptor.cancel();
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
    conns.push_back(std::make_unique<TcpConnection>(p, hosts[p], "NET/Socket/" + im.ifname,
                                                    std::move(fd_of[p])));
    LOOM_INFO(log::kInit | log::kNet, "rank %d -> rank %d via NET/Socket/%s (%d socket%s)", rank, p,
              im.ifname.c_str(), nsocks, nsocks > 1 ? "s" : "");
  }
  return conns;
}

}  // namespace loom
