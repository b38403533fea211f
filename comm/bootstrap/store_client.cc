// StoreClient: blocking socket, a reader thread, condition variables with deadlines.
#include "comm/bootstrap/store_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "comm/bootstrap/wire.h"

namespace loom::bootstrap {

namespace {

// Reads exactly n bytes; false on EOF/error.
bool ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r == 0) return false;
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// One connect attempt bounded by `deadline`; returns fd or -errno.
int ConnectOnce(const sockaddr_storage& addr, socklen_t len, Deadline deadline) {
  int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, static_cast<int>(deadline.RemainingMs(1000)));
    if (rc <= 0) {
      ::close(fd);
      return rc == 0 ? -ETIMEDOUT : -errno;
    }
    int err = 0;
    socklen_t el = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) {
      ::close(fd);
      return -err;
    }
  } else if (rc != 0) {
    int err = errno;
    ::close(fd);
    return -err;
  }
  int flags = 0;  // back to blocking: the reader thread blocks in recv
  ioctl(fd, FIONBIO, &flags);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

Result<std::unique_ptr<StoreClient>> StoreClient::Connect(const std::string& host, uint16_t port,
                                                          uint64_t secret, const Identity& me,
                                                          Deadline deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) {
    return SystemError("cannot resolve the rendezvous host '" + host + "': " + gai_strerror(gai) +
                       " (use an IP address, or fix /etc/hosts)");
  }
  sockaddr_storage addr{};
  socklen_t len = static_cast<socklen_t>(res->ai_addrlen);
  std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);

  std::string desc = host + ":" + std::to_string(port);
  int fd = -1;
  int last_err = 0;
  int delay_ms = 5;
  while (fd < 0) {
    fd = ConnectOnce(addr, len, deadline);
    if (fd >= 0) break;
    last_err = -fd;
    // Refused means "not up yet" while the store's host starts; retry.
    if (deadline.expired()) {
      return TimeoutError("rank " + std::to_string(me.rank) + " could not reach the rendezvous store at " +
                          desc + " before the deadline (last error: " + std::strerror(last_err) +
                          "); is rank 0 running, is the address routable from " + me.host +
                          ", is a firewall dropping the port?");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    delay_ms = std::min(delay_ms * 2, 200);
  }

  std::unique_ptr<StoreClient> c(new StoreClient());
  c->fd_ = fd;
  c->me_ = me;
  c->store_desc_ = desc;
  Writer w;
  w.U64(kStoreMagic);
  w.U32(kProtocolVersion);
  w.U64(secret);
  w.I32(me.rank);
  w.I32(me.size);
  w.Str(me.host);
  w.U64(static_cast<uint64_t>(me.pid));
  LOOM_TRY(c->SendFrame(w.Frame(MsgType::kHello)));

  // The reply to the hello is read here, before the reader thread starts.
  pollfd p{fd, POLLIN, 0};
  int rc = ::poll(&p, 1, static_cast<int>(deadline.RemainingMs(INT32_MAX)));
  if (rc <= 0) return TimeoutError("no answer from the rendezvous store at " + desc);
  uint32_t hdr[2];
  if (!ReadAll(fd, hdr, 8) || hdr[0] < 4 || hdr[0] > kMaxFrameBytes) {
    return RemoteError("the rendezvous store at " + desc + " closed the connection during the hello");
  }
  std::string body(hdr[0] - 4, '\0');
  if (!ReadAll(fd, body.data(), body.size())) {
    return RemoteError("the rendezvous store at " + desc + " closed the connection during the hello");
  }
  if (static_cast<MsgType>(hdr[1]) == MsgType::kError) {
    Reader r(body);
    return InvalidUsage("the rendezvous store at " + desc + " refused rank " +
                        std::to_string(me.rank) + ": " + r.Str());
  }
  if (static_cast<MsgType>(hdr[1]) != MsgType::kHelloOk) {
    return InternalError("unexpected reply from the rendezvous store at " + desc);
  }
  Reader features(body);
  const uint32_t can = features.U32();
  c->keys_ = !features.failed() && (can & kStoreKeys) != 0;
  c->reader_ = std::thread([raw = c.get()] { raw->ReaderLoop(); });
  return c;
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
  if (fd_ >= 0) ::close(fd_);
}

void StoreClient::SetFailureCallback(FailureCallback cb) {
  std::lock_guard<std::mutex> lock(mu_);
  on_failure_ = std::move(cb);
}

void StoreClient::SetNoticeCallback(NoticeCallback cb) {
  std::lock_guard<std::mutex> lock(mu_);
  on_notice_ = std::move(cb);
}

Status StoreClient::SendFrame(const std::string& frame) {
  size_t off = 0;
  while (off < frame.size()) {
    ssize_t n = ::send(fd_, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SystemError("sending to the rendezvous store at " + store_desc_, errno);
    }
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

void StoreClient::ReaderLoop() {
  for (;;) {
    uint32_t hdr[2];
    std::string body;
    bool ok = ReadAll(fd_, hdr, 8) && hdr[0] >= 4 && hdr[0] <= kMaxFrameBytes;
    if (ok) {
      body.resize(hdr[0] - 4);
      ok = ReadAll(fd_, body.data(), body.size());
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (!ok) {
      lost_ = true;
      if (!said_bye_ && broken_.ok()) {
        broken_ = RemoteError("lost the connection to the rendezvous store at " + store_desc_ +
                              " (hosted by the process that created the UniqueId, rank 0 under a "
                              "launcher): that process exited or crashed");
        auto cb = on_failure_;
        lock.unlock();
        if (cb) cb(-1, broken_.message());
        lock.lock();
      }
      cv_.notify_all();
      return;
    }
    Reader r(body);
    switch (static_cast<MsgType>(hdr[1])) {
      case MsgType::kGathered: {
        std::string tag = r.Str();
        uint32_t n = r.U32();
        std::vector<std::string> values;
        for (uint32_t i = 0; i < n && !r.failed(); ++i) values.push_back(r.Str());
        gathered_[tag] = std::move(values);
        cv_.notify_all();
        break;
      }
      case MsgType::kQueryReply: {
        std::string tag = r.Str();
        QueryReply q;
        for (uint32_t i = 0, n = r.U32(); i < n && !r.failed(); ++i) q.joined.push_back(r.I32());
        for (uint32_t i = 0, n = r.U32(); i < n && !r.failed(); ++i) q.reached.push_back(r.I32());
        replies_[tag] = std::move(q);
        cv_.notify_all();
        break;
      }
      case MsgType::kPeerFailed: {
        int rank = r.I32();
        std::string message = r.Str();
        if (broken_.ok()) broken_ = RemoteError(message);
        auto cb = on_failure_;
        cv_.notify_all();
        lock.unlock();
        if (cb) cb(rank, message);
        break;
      }
      case MsgType::kGot: {
        const uint32_t id = r.U32();
        auto it = got_.find(id);
        if (it == got_.end()) break;  // its GetAll gave up
        std::vector<std::string> values(static_cast<size_t>(std::max(me_.size, 0)));
        for (uint32_t i = 0, n = r.U32(); i < n && !r.failed(); ++i) {
          const int rank = r.I32();
          std::string value = r.Str();
          if (rank >= 0 && rank < me_.size) values[static_cast<size_t>(rank)] = std::move(value);
        }
        if (r.failed()) break;
        it->second = std::move(values);
        cv_.notify_all();
        break;
      }
      case MsgType::kNotified: {
        const int from = r.I32();
        const bool gone = r.U32() != 0;
        std::string payload = r.Str();
        auto cb = on_notice_;
        lock.unlock();
        if (cb && !r.failed()) cb(from, gone, payload);
        break;
      }
      default:
        break;
    }
  }
}

Status StoreClient::Notify(int target, std::string_view payload) {
  Writer w;
  w.I32(target);
  w.Str(payload);
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  return SendFrame(w.Frame(MsgType::kNotify));
}

Result<std::vector<std::string>> StoreClient::AllGather(std::string_view tag, std::string mine,
                                                        Deadline deadline) {
  Writer w;
  w.Str(tag);
  w.Str(mine);
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  LOOM_TRY(SendFrame(w.Frame(MsgType::kAllGather)));
  std::string key(tag);
  auto ready = [&] { return gathered_.count(key) != 0 || !broken_.ok(); };
  // While ranks are missing, say which and for how long: at INFO after a
  // second, then a WARN every 10 s until the deadline.
  const auto start = std::chrono::steady_clock::now();
  auto next = start + std::chrono::seconds(1);
  bool first = true;
  while (!cv_.wait_until(lock, std::min(next, deadline.at()), ready) && !deadline.expired()) {
    std::string missing = DescribeMissing(key, lock);
    if (ready()) break;
    const auto now = std::chrono::steady_clock::now();
    const long long waited =
        std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
    const std::string left = deadline.at() == Deadline::Never().at()
                                 ? "no deadline"
                                 : "deadline in " + std::to_string(deadline.RemainingMs(INT64_MAX) /
                                                                   1000) + " s";
    const std::string line = "rank " + std::to_string(me_.rank) + ": waited " +
                             std::to_string(waited) + " s for every rank to reach '" + key +
                             "' (" + left + ")" + (missing.empty() ? "" : ": " + missing);
    if (first) {
      LOOM_INFO(log::kInit | log::kBootstrap, "%s", line.c_str());
    } else {
      LOOM_WARN(log::kInit | log::kBootstrap, "%s", line.c_str());
    }
    first = false;
    next = now + std::chrono::seconds(10);
  }
  if (gathered_.count(key) != 0) {
    auto values = std::move(gathered_[key]);
    gathered_.erase(key);
    return values;
  }
  if (!broken_.ok()) return broken_;
  std::string missing = DescribeMissing(key, lock);
  return TimeoutError("rank " + std::to_string(me_.rank) + ": not every rank reached '" + key +
                      "' before the deadline" +
                      (missing.empty() ? " (a rank is missing, stuck, or was started with a "
                                         "different world size)"
                                       : ": " + missing));
}

namespace {
std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) s += ",... (" + std::to_string(ranks.size()) + " ranks)";
  return s;
}
}  // namespace

std::string StoreClient::DescribeMissing(const std::string& tag,
                                         std::unique_lock<std::mutex>& lock) {
  bootstrap::Writer w;
  w.Str(tag);
  if (!SendFrame(w.Frame(MsgType::kQuery)).ok()) return "";
  if (!cv_.wait_for(lock, std::chrono::seconds(2), [&] { return replies_.count(tag) != 0; })) {
    return "";
  }
  QueryReply q = std::move(replies_[tag]);
  replies_.erase(tag);
  std::vector<int> never, stuck;
  for (int r = 0; r < me_.size; ++r) {
    bool joined = std::find(q.joined.begin(), q.joined.end(), r) != q.joined.end();
    bool reached = std::find(q.reached.begin(), q.reached.end(), r) != q.reached.end();
    if (!joined) {
      never.push_back(r);
    } else if (!reached) {
      stuck.push_back(r);
    }
  }
  std::string out;
  if (!never.empty()) {
    out += "rank(s) " + RankList(never) + " never connected to the store (not started, crashed "
           "early, or given another UniqueId / LOOM_ROOT / world size)";
  }
  if (!stuck.empty()) {
    if (!out.empty()) out += "; ";
    out += "rank(s) " + RankList(stuck) + " joined but did not reach this step (stuck or slow)";
  }
  return out;
}

Status StoreClient::LostStatus() const {
  return !broken_.ok() ? broken_
                       : RemoteError("the rendezvous store at " + store_desc_ + " is gone");
}

Status StoreClient::Set(std::string_view key, std::string_view value) {
  Writer w;
  w.Str(key);
  w.Str(value);
  std::lock_guard<std::mutex> lock(mu_);
  if (!keys_) return Status::Ok();
  if (lost_) return LostStatus();
  return SendFrame(w.Frame(MsgType::kSet));
}

Result<std::vector<std::string>> StoreClient::GetAll(std::string_view key, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!keys_) {
    return InternalError("the rendezvous store at " + store_desc_ +
                         " keeps no values (an older loom)");
  }
  // A peer's failure (broken_) leaves the store answering: only a lost
  // connection ends the lookup at once.
  if (lost_) return LostStatus();
  const uint32_t id = ++last_get_;
  Writer w;
  w.U32(id);
  w.Str(key);
  LOOM_TRY(SendFrame(w.Frame(MsgType::kGet)));
  auto it = got_.emplace(id, std::nullopt).first;
  cv_.wait_until(lock, deadline.at(), [&] { return it->second.has_value() || lost_; });
  std::optional<std::vector<std::string>> values = std::move(it->second);
  got_.erase(it);
  if (values) return std::move(*values);
  if (lost_) return LostStatus();
  return TimeoutError("the rendezvous store at " + store_desc_ + " did not answer in time");
}

void StoreClient::ReportFailure(const std::string& message) {
  Writer w;
  w.Str(message);
  std::lock_guard<std::mutex> lock(mu_);
  (void)SendFrame(w.Frame(MsgType::kAbort));
}

void StoreClient::Bye() {
  std::lock_guard<std::mutex> lock(mu_);
  if (said_bye_) return;
  said_bye_ = true;
  (void)SendFrame(Writer().Frame(MsgType::kBye));
}

}  // namespace loom::bootstrap
