// OpTracker and the status thread: a poll()ed listener answering one framed
// JSON request per connection, with no lock shared with any collective.
#include "comm/status_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "base/coarse_clock.h"
#include "base/log.h"
#include "base/params.h"
#include "topology/host.h"

namespace loom {

void OpTracker::Publish(Packed& to, uint64_t seq, const CollArgs& a,
                        std::chrono::steady_clock::time_point at) {
  const bool rooted = a.kind == OpKind::kBroadcast || a.kind == OpKind::kReduce;
  const int root = rooted ? a.root : -1;
  const int peer = a.kind == OpKind::kSendRecv ? a.root : -1;
  // Odd first. The words are release stores: a reader that sees one of them
  // then sees the odd (or a later) version and retries.
  const uint64_t v = version_.load(std::memory_order_relaxed);  // one writer at a time
  version_.store(v + 1, std::memory_order_relaxed);
  constexpr auto kRel = std::memory_order_release;
  to.seq.store(seq, kRel);
  to.count.store(a.count, kRel);
  to.kind_type_op.store(static_cast<uint64_t>(a.kind) | static_cast<uint64_t>(a.type) << 8 |
                            static_cast<uint64_t>(a.op) << 16,
                        kRel);
  to.root_peer.store(static_cast<uint32_t>(root) |
                         static_cast<uint64_t>(static_cast<uint32_t>(peer)) << 32,
                     kRel);
  to.at_ns.store(static_cast<uint64_t>(at.time_since_epoch().count()), kRel);
  version_.store(v + 2, std::memory_order_release);
}

OpTracker::Record OpTracker::Unpack(const Packed& from) {
  // Acquire loads: the version check after them cannot move above them.
  Record r;
  r.seq = from.seq.load(std::memory_order_acquire);
  r.count = from.count.load(std::memory_order_acquire);
  const uint64_t kto = from.kind_type_op.load(std::memory_order_acquire);
  r.kind = static_cast<OpKind>(kto & 0xff);
  r.type = static_cast<DataType>((kto >> 8) & 0xff);
  r.op = static_cast<RedOp>((kto >> 16) & 0xff);
  const uint64_t rp = from.root_peer.load(std::memory_order_acquire);
  r.root = static_cast<int32_t>(static_cast<uint32_t>(rp));
  r.peer = static_cast<int32_t>(static_cast<uint32_t>(rp >> 32));
  r.at = std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(
      static_cast<std::chrono::steady_clock::rep>(from.at_ns.load(std::memory_order_acquire))));
  return r;
}

uint64_t OpTracker::Started(const CollArgs& args, std::chrono::steady_clock::time_point now) {
  const uint64_t seq = next_seq_++;
  Publish(started_, seq, args, now);
  return seq;
}

uint64_t OpTracker::Started(const CollArgs& args) {
  return Started(args, CoarseNow());  // ages are shown in ms: a tick is precise enough
}

void OpTracker::Completed(uint64_t seq, const CollArgs& args) {
  Publish(completed_, seq, args, CoarseNow());
}

void OpTracker::Snapshot(Record* started, Record* completed) const {
  for (;;) {
    const uint64_t v = version_.load(std::memory_order_acquire);
    if ((v & 1) == 0) {
      *started = Unpack(started_);
      *completed = Unpack(completed_);
      if (version_.load(std::memory_order_relaxed) == v) return;
    }
    std::this_thread::yield();  // a write is under way: it takes nanoseconds
  }
}

namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

const char* OpName(OpKind k) {
  switch (k) {
    case OpKind::kSendRecv: return "SendRecv";
    default: return OpKindName(k);
  }
}

std::string RecordJson(const OpTracker::Record& r) {
  if (r.seq == 0) {
    return R"({"seq":0,"op":"","count":0,"dtype":"","redop":"","root":-1,"peer":-1,"age_ms":0})";
  }
  const bool reduces = r.kind == OpKind::kAllReduce || r.kind == OpKind::kReduce ||
                       r.kind == OpKind::kReduceScatter;
  auto age = std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - r.at)
                 .count();
  return "{\"seq\":" + std::to_string(r.seq) + ",\"op\":\"" + OpName(r.kind) +
         "\",\"count\":" + std::to_string(r.count) + ",\"dtype\":\"" + std::string(Name(r.type)) +
         "\",\"redop\":\"" + (reduces ? std::string(Name(r.op)) : "") +
         "\",\"root\":" + std::to_string(r.root) + ",\"peer\":" + std::to_string(r.peer) +
         ",\"age_ms\":" + std::to_string(age) + "}";
}

// The process-wide registry and the listening thread.
class StatusServer {
 public:
  static StatusServer& Get() {
    static StatusServer server;
    return server;
  }

  uint64_t Add(const StatusSource& s) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t h = next_++;
    sources_[h] = s;
    if (!started_) Start();
    return h;
  }

  void Remove(uint64_t h) {
    std::lock_guard<std::mutex> lock(mu_);
    sources_.erase(h);
  }

  std::string Json() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string comms;
    int rank = -1, size = 0;
    for (auto& [h, s] : sources_) {
      if (rank < 0) rank = s.rank, size = s.size;  // the first (world) communicator
      OpTracker::Record st, co;
      s.tracker->Snapshot(&st, &co);
      std::string err = s.async_error ? s.async_error(s.ctx) : "";
      if (!comms.empty()) comms += ",";
      comms += "{\"id\":\"" + Escape(s.id) + "\",\"rank\":" + std::to_string(s.rank) +
               ",\"size\":" + std::to_string(s.size) + ",\"started\":" + RecordJson(st) +
               ",\"completed\":" + RecordJson(co) + ",\"async_error\":\"" + Escape(err) + "\"}";
    }
    return "{\"format\":\"loom-status\",\"version\":1,\"rank\":" + std::to_string(rank) +
           ",\"size\":" + std::to_string(size) + ",\"host\":\"" + Escape(Hostname()) +
           "\",\"pid\":" + std::to_string(getpid()) + ",\"comms\":[" + comms + "]}";
  }

  ~StatusServer() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
  }

 private:
  // With mu_ held.
  void Start() {
    started_ = true;
    const int64_t base = params::kStatusPort.Get();
    if (base <= 0) return;
    int local = 0;
    for (const char* v : {"LOOM_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
      if (const char* s = std::getenv(v)) {
        local = std::atoi(s);
        break;
      }
    }
    const int port = static_cast<int>(base) + local;
    fd_ = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    a.sin6_addr = in6addr_any;  // dual stack: IPv4 too
    if (fd_ >= 0) {
      int one = 1, zero = 0;
      setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        listen(fd_, 16) != 0) {
      LOOM_WARN(log::kInit, "status port %d unavailable (%s): loom doctor --attach cannot "
                "reach this rank", port, std::strerror(errno));
      if (fd_ >= 0) close(fd_);
      fd_ = -1;
      return;
    }
    LOOM_INFO(log::kInit, "status port %s:%d", Hostname().c_str(), port);
    thread_ = std::thread([this] { Serve(); });
  }

  void Serve() {
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      // One framed request (4-byte big-endian length + JSON), one answer.
      pollfd q{c, POLLIN, 0};
      uint32_t len_be = 0;
      if (poll(&q, 1, 100) > 0 && recv(c, &len_be, 4, MSG_WAITALL) == 4) {
        uint32_t len = ntohl(len_be);
        std::string req(len < 4096 ? len : 0, '\0');
        if (!req.empty() && recv(c, req.data(), req.size(), MSG_WAITALL) ==
                                static_cast<ssize_t>(req.size()) &&
            req.find("\"status\"") != std::string::npos) {
          std::string body = Json();
          uint32_t out = htonl(static_cast<uint32_t>(body.size()));
          (void)!send(c, &out, 4, MSG_NOSIGNAL);
          (void)!send(c, body.data(), body.size(), MSG_NOSIGNAL);
        }
      }
      close(c);
    }
  }

  std::mutex mu_;
  std::map<uint64_t, StatusSource> sources_;
  uint64_t next_ = 1;
  bool started_ = false;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

uint64_t RegisterStatusSource(const StatusSource& source) { return StatusServer::Get().Add(source); }
void UnregisterStatusSource(uint64_t handle) { StatusServer::Get().Remove(handle); }
std::string StatusJson() { return StatusServer::Get().Json(); }

}  // namespace loom
