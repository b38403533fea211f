// StoreServer: Asio sessions on one thread; all state is touched only there.
// What a stranger can cost (no secret): at most kMaxPending connections of
// one socket and a kMaxHelloBytes read each, for at most kHelloWithin; the
// oldest is dropped for a newer one, and a closed one is freed. A rank's
// kSet values take at most kMaxKeysPerRank x kMaxValueBytes.
#include "comm/bootstrap/store_server.h"

#include <unistd.h>

#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <list>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "base/log.h"
#include "comm/bootstrap/wire.h"

namespace loom::bootstrap {

namespace asio = boost::asio;
using asio::ip::tcp;

// Connections that have not said a valid hello yet.
constexpr size_t kMaxPending = 64;
constexpr std::chrono::seconds kHelloWithin{10};
// A frame body kept between messages beyond this is given back.
constexpr size_t kKeptBodyBytes = 64 << 10;

class StoreServer::Impl : public std::enable_shared_from_this<StoreServer::Impl> {
 public:
  struct Session : std::enable_shared_from_this<Session> {
    explicit Session(tcp::socket s)
        : socket(std::move(s)), hello_timer(socket.get_executor()) {}
    tcp::socket socket;
    asio::steady_timer hello_timer;  // closes a connection that never says hello
    std::list<std::shared_ptr<Session>>::iterator pending;  // valid while in_pending
    bool in_pending = false;  // in pending_: no hello yet, not closed
    uint32_t header[2]{};
    std::string body;
    std::deque<std::string> outbox;
    int rank = -1;
    std::string host;
    int64_t pid = 0;
    uint32_t keys = 0;  // kSet keys holding a value of this rank
    bool said_bye = false;
    bool closed = false;
  };

  Impl(uint64_t secret) : secret_(secret), acceptor_(io_), accept_timer_(io_) {}

  Status Bind(const std::string& host, uint16_t port) {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(host, ec);
    if (ec) return InvalidArgument("store address '" + host + "' is not numeric: " + ec.message());
    tcp::endpoint ep(addr, port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return SystemError("cannot serve the rendezvous store on " + host + ":" +
                         std::to_string(port) + ": " + ec.message() +
                         " (port taken by another job? pick another LOOM_ROOT/MASTER_PORT)");
    }
    port_ = acceptor_.local_endpoint().port();
    return Status::Ok();
  }

  void Run() {
    Accept();
    thread_ = std::thread([this] { io_.run(); });
  }

  void Stop() {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  uint16_t port() const { return port_; }

  bool WaitUntilDone(Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline.at(), [&] { return done_; });
  }

  void Adopt(int fd) {
    asio::post(io_, [this, fd] {
      tcp::socket socket(io_);
      boost::system::error_code ec;
      socket.assign(tcp::v4(), fd, ec);
      if (ec) {
        close(fd);
        return;
      }
      Serve(std::move(socket));
    });
  }
 private:
  void Accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;  // stopped
      if (ec) {
        // Out of descriptors (EMFILE, ENFILE) or a connection that went away
        // first: the store must still take the ranks that come later.
        LOOM_WARN(log::kBootstrap, "store: accepting a connection failed (%s); trying again in "
                  "100 ms", ec.message().c_str());
        accept_timer_.expires_after(std::chrono::milliseconds(100));
        accept_timer_.async_wait([this](boost::system::error_code e) {
          if (!e) Accept();
        });
        return;
      }
      Serve(std::move(socket));
      Accept();
    });
  }

  // A new connection, on the io thread: a pending session until its hello.
  void Serve(tcp::socket socket) {
    auto s = std::make_shared<Session>(std::move(socket));
    if (pending_.size() >= kMaxPending) {
      // A real rank says hello at once: the oldest silent one goes.
      LOOM_INFO(log::kBootstrap, "store: %zu connections without a hello; dropping the oldest",
                pending_.size());
      std::shared_ptr<Session> oldest = pending_.front();
      Closed(oldest);
    }
    s->pending = pending_.insert(pending_.end(), s);
    s->in_pending = true;
    s->hello_timer.expires_after(kHelloWithin);
    s->hello_timer.async_wait([this, weak = std::weak_ptr<Session>(s)](
                                  boost::system::error_code e) {
      if (auto silent = weak.lock(); !e && silent && silent->rank < 0) Closed(silent);
    });
    ReadHeader(s);
  }



  void ReadHeader(const std::shared_ptr<Session>& s) {
    asio::async_read(s->socket, asio::buffer(s->header, 8),
                     [this, s](boost::system::error_code ec, size_t) {
                       if (ec) return Closed(s);
                       const uint32_t len = s->header[0];
                       // Nothing but a small hello is read before the secret is checked.
                       const uint32_t cap = s->rank < 0 ? kMaxHelloBytes : kMaxFrameBytes;
                       if (len < 4 || len > cap) return Closed(s);
                       if (s->rank < 0 && static_cast<MsgType>(s->header[1]) != MsgType::kHello) {
                         return Reject(s, "first message is not a hello");
                       }
                       s->body.resize(len - 4);
                       asio::async_read(s->socket, asio::buffer(s->body),
                                        [this, s](boost::system::error_code ec2, size_t) {
                                          if (ec2) return Closed(s);
                                          Handle(s, static_cast<MsgType>(s->header[1]));
                                          if (s->body.capacity() > kKeptBodyBytes) {
                                            std::string().swap(s->body);
                                          }
                                          if (!s->closed) ReadHeader(s);
                                        });
                     });
  }

  // A session leaves pending_ when it said hello or closed.
  void Unpend(const std::shared_ptr<Session>& s) {
    if (!s->in_pending) return;
    s->in_pending = false;
    pending_.erase(s->pending);
    s->hello_timer.cancel();
  }

  void Send(const std::shared_ptr<Session>& s, std::string frame) {
    if (s->closed) return;
    s->outbox.push_back(std::move(frame));
    if (s->outbox.size() == 1) Flush(s);
  }

  void Flush(const std::shared_ptr<Session>& s) {
    asio::async_write(s->socket, asio::buffer(s->outbox.front()),
                      [this, s](boost::system::error_code ec, size_t) {
                        if (ec) return;
                        s->outbox.pop_front();
                        if (!s->outbox.empty()) Flush(s);
                      });
  }

  void Reject(const std::shared_ptr<Session>& s, const std::string& why) {
    LOOM_WARN(log::kBootstrap, "store: refused a client: %s", why.c_str());
    Writer w;
    w.Str(why);
    // Write the error, then close once it is out.
    auto frame = std::make_shared<std::string>(w.Frame(MsgType::kError));
    s->closed = true;
    Unpend(s);
    asio::async_write(s->socket, asio::buffer(*frame), [s, frame](boost::system::error_code, size_t) {
      boost::system::error_code ignored;
      s->socket.shutdown(tcp::socket::shutdown_both, ignored);
      s->socket.close(ignored);
    });
  }

  void Handle(const std::shared_ptr<Session>& s, MsgType type) {
    Reader r(s->body);
    if (s->rank < 0 && type != MsgType::kHello) return Reject(s, "first message is not a hello");
    switch (type) {
      case MsgType::kHello: {
        uint64_t magic = r.U64();
        uint32_t version = r.U32();
        uint64_t secret = r.U64();
        int rank = r.I32();
        int size = r.I32();
        std::string host = r.Str();
        int64_t pid = static_cast<int64_t>(r.U64());
        if (r.failed() || magic != kStoreMagic) return Reject(s, "not a loom client");
        if (version != kProtocolVersion) {
          return Reject(s, "protocol version " + std::to_string(version) + " of rank " +
                               std::to_string(rank) + " on " + host + " differs from the store's " +
                               std::to_string(kProtocolVersion) +
                               ": all hosts must run the same loom version");
        }
        if (secret != secret_) {
          return Reject(s, "job secret mismatch: rank " + std::to_string(rank) + " on " + host +
                               " holds a UniqueId of another (or an earlier) job");
        }
        if (size < 1) {
          return Reject(s, "rank " + std::to_string(rank) + " on " + host +
                               " claims a world size of " + std::to_string(size) +
                               " (at least 1)");
        }
        if (size_ == 0) size_ = size;
        if (size != size_) {
          // Every rank already in the job fails now, not at its deadline.
          std::string joined;
          for (auto& [r, peer] : by_rank_) joined += (joined.empty() ? "" : ",") + std::to_string(r);
          const std::string why =
              "rank " + std::to_string(rank) + " on " + host + " (pid " + std::to_string(pid) +
              ") was started with a world size of " + std::to_string(size) + ", but " +
              (joined.empty() ? std::string("the job") : "rank(s) " + joined) + " joined with " +
              std::to_string(size_) + ": every rank must be given the same world size";
          Writer w;
          w.I32(-1);
          w.Str(why);
          const std::string frame = w.Frame(MsgType::kPeerFailed);
          for (auto& [r, peer] : by_rank_) Send(peer, frame);
          return Reject(s, why);
        }
        if (rank < 0 || rank >= size_) {
          return Reject(s, "rank " + std::to_string(rank) + " of " + std::to_string(size) +
                               " does not fit this job of " + std::to_string(size_) + " ranks");
        }
        if (by_rank_.count(rank) != 0) {
          auto& other = by_rank_[rank];
          return Reject(s, "rank " + std::to_string(rank) + " joined twice (" + host + " pid " +
                               std::to_string(pid) + ", and " + other->host + " pid " +
                               std::to_string(other->pid) + ")");
        }
        s->rank = rank;
        s->host = host;
        s->pid = pid;
        Unpend(s);
        by_rank_[rank] = s;
        Writer ok;
        ok.U32(kStoreKeys);
        Send(s, ok.Frame(MsgType::kHelloOk));
        break;
      }
      case MsgType::kAllGather: {
        std::string tag = r.Str();
        std::string value = r.Str();
        if (r.failed()) return Reject(s, "malformed all-gather");
        auto& g = gathers_[tag];
        g.values.emplace(s->rank, std::move(value));  // a rank's first value counts
        if (static_cast<int>(g.values.size()) == size_) {
          Writer w;
          w.Str(tag);
          w.U32(static_cast<uint32_t>(size_));
          for (auto& [rank, v] : g.values) w.Str(v);
          std::string frame = w.Frame(MsgType::kGathered);
          for (auto& [rank, peer] : by_rank_) Send(peer, frame);
          gathers_.erase(tag);
        }
        break;
      }
      case MsgType::kAbort: {
        std::string why = r.Str();
        Broadcast(s, "rank " + std::to_string(s->rank) + " (" + s->host + ", pid " +
                         std::to_string(s->pid) + ") failed: " + why);
        break;
      }
      case MsgType::kBye:
        s->said_bye = true;
        break;
      case MsgType::kQuery: {
        // For a rank whose all-gather timed out: name the missing ranks.
        std::string tag = r.Str();
        Writer w;
        w.Str(tag);
        w.U32(static_cast<uint32_t>(by_rank_.size()));
        for (auto& [rank, peer] : by_rank_) w.I32(rank);
        auto it = gathers_.find(tag);
        std::vector<int> reached;
        if (it != gathers_.end()) {
          for (const auto& [rank, v] : it->second.values) reached.push_back(rank);
        }
        w.U32(static_cast<uint32_t>(reached.size()));
        for (int rank : reached) w.I32(rank);
        Send(s, w.Frame(MsgType::kQueryReply));
        break;
      }
      case MsgType::kNotify: {
        const int target = r.I32();
        std::string payload = r.Str();
        if (r.failed()) return Reject(s, "malformed notice");
        auto it = by_rank_.find(target);
        const bool gone = it == by_rank_.end() || it->second->closed || it->second->said_bye;
        Writer w;
        w.I32(gone ? target : s->rank);
        w.U32(gone ? 1 : 0);
        w.Str(payload);
        Send(gone ? s : it->second, w.Frame(MsgType::kNotified));
        break;
      }
      case MsgType::kSet: {
        std::string key = r.Str();
        std::string value = r.Str();
        if (r.failed()) return Reject(s, "malformed set");
        Set(s, std::move(key), std::move(value));
        break;
      }
      case MsgType::kGet: {
        const uint32_t id = r.U32();
        std::string key = r.Str();
        if (r.failed()) return Reject(s, "malformed get");
        // Only the ranks holding a value: the answer's size follows what
        // ranks stored, never the world size a hello claimed.
        Writer w;
        w.U32(id);
        auto it = values_.find(key);
        if (it == values_.end()) {
          w.U32(0);
        } else {
          w.U32(static_cast<uint32_t>(it->second.size()));
          for (const auto& [rank, value] : it->second) {
            w.I32(rank);
            w.Str(value);
          }
        }
        Send(s, w.Frame(MsgType::kGot));
        break;
      }
      default:
        return Reject(s, "unknown message type " + std::to_string(static_cast<uint32_t>(type)));
    }
  }

  // A rank's value under `key`: replaced, or removed when empty. Over the
  // limits it is dropped with a warning (a rank's bug, not a reason to cut
  // the rank off from the store).
  void Set(const std::shared_ptr<Session>& s, std::string key, std::string value) {
    auto it = values_.find(key);
    const bool had = it != values_.end() && it->second.count(s->rank) != 0;
    if (value.empty()) {
      if (!had) return;
      it->second.erase(s->rank);
      if (it->second.empty()) values_.erase(it);
      --s->keys;
      return;
    }
    if (key.size() > kMaxKeyBytes || value.size() > kMaxValueBytes ||
        (!had && s->keys >= kMaxKeysPerRank)) {
      LOOM_WARN(log::kBootstrap,
                "store: rank %d set '%.64s' (%zu bytes) beyond the limits (%u keys "
                "of %u bytes); dropped",
                s->rank, key.c_str(), value.size(), kMaxKeysPerRank, kMaxValueBytes);
      return;
    }
    if (!had) ++s->keys;
    values_[std::move(key)][s->rank] = std::move(value);
  }

  void Broadcast(const std::shared_ptr<Session>& from, const std::string& message) {
    Writer w;
    w.I32(from->rank);
    w.Str(message);
    std::string frame = w.Frame(MsgType::kPeerFailed);
    for (auto& [rank, peer] : by_rank_) {
      if (peer != from) Send(peer, frame);
    }
  }

  void Closed(const std::shared_ptr<Session>& s) {
    Unpend(s);
    if (s->closed && s->rank < 0) return;
    bool was_closed = s->closed;
    s->closed = true;
    boost::system::error_code ignored;
    s->socket.close(ignored);
    std::string().swap(s->body);
    if (s->rank < 0 || was_closed) return;
    if (!s->said_bye) {
      LOOM_WARN(log::kBootstrap, "store: rank %d (%s, pid %lld) vanished without goodbye", s->rank,
                s->host.c_str(), static_cast<long long>(s->pid));
      Broadcast(s, "rank " + std::to_string(s->rank) + " (" + s->host + ", pid " +
                       std::to_string(s->pid) +
                       ") lost its connection to the rendezvous store without saying goodbye: "
                       "it exited, crashed or was killed");
    }
    ++ended_;
    if (size_ > 0 && ended_ == size_) {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      cv_.notify_all();
    }
  }

  // The values that arrived, by rank: memory in proportion to what ranks
  // sent, not to the world size a hello claimed.
  struct Gather {
    std::map<int, std::string> values;
  };

  uint64_t secret_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  asio::steady_timer accept_timer_;  // re-arms the acceptor after an error
  std::thread thread_;
  int size_ = 0;
  int ended_ = 0;
  std::list<std::shared_ptr<Session>> pending_;  // oldest first
  std::map<int, std::shared_ptr<Session>> by_rank_;
  std::map<std::string, Gather> gathers_;
  std::map<std::string, std::map<int, std::string>> values_;  // kSet: key -> rank -> value
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

StoreServer::StoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StoreServer::~StoreServer() { impl_->Stop(); }

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host, uint16_t port,
                                                        uint64_t secret) {
  auto impl = std::make_unique<Impl>(secret);
  LOOM_TRY(impl->Bind(host, port));
  impl->Run();
  LOOM_INFO(log::kBootstrap, "rendezvous store serving on %s:%u", host.c_str(), impl->port());
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(impl)));
}

uint16_t StoreServer::port() const { return impl_->port(); }
void StoreServer::ServeConnection(int fd) { impl_->Adopt(fd); }
bool StoreServer::WaitUntilDone(Deadline deadline) { return impl_->WaitUntilDone(deadline); }

namespace {

struct Registry {
  std::mutex mu;
  std::map<uint16_t, std::unique_ptr<StoreServer>> servers;
  ~Registry() {
    // At process exit, give live jobs a moment to say goodbye.
    for (auto& [port, s] : servers) s->WaitUntilDone(Deadline::After(std::chrono::milliseconds(2000)));
  }
};

Registry& GetRegistry() {
  static Registry registry;
  return registry;
}

// Servers whose job ended are dropped when the next one is adopted.
void Reap(Registry& reg) {
  for (auto it = reg.servers.begin(); it != reg.servers.end();) {
    if (it->second->WaitUntilDone(Deadline::At(std::chrono::steady_clock::now()))) {
      it = reg.servers.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace

void AdoptServer(std::unique_ptr<StoreServer> server) {
  Registry& reg = GetRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  Reap(reg);
  uint16_t port = server->port();
  reg.servers[port] = std::move(server);
}

Status EnsureServer(const std::string& host, uint16_t port, uint64_t secret) {
  Registry& reg = GetRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  Reap(reg);
  if (reg.servers.count(port) != 0) return Status::Ok();
  LOOM_ASSIGN_OR_RETURN(auto server, StoreServer::Start(host, port, secret));
  reg.servers[port] = std::move(server);
  return Status::Ok();
}

}  // namespace loom::bootstrap
