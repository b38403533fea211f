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

#include "comm/base/coarse_clock.h"
#include "comm/base/log.h"
#include "comm/base/params.h"
#include "topology/host.h"

namespace loom {

OpTracker::Record OpTracker::Make(uint64_t seq, const CollArgs& a) {
  Record r;
  r.seq = seq;
  r.kind = a.kind;
  r.count = a.count;
  r.type = a.type;
  r.op = a.op;
  const bool rooted = a.kind == OpKind::kBroadcast || a.kind == OpKind::kReduce;
  r.root = rooted ? a.root : -1;
  r.peer = a.kind == OpKind::kSendRecv ? a.root : -1;
  r.at = CoarseNow();  // ages are shown in ms: a tick is precise enough
  return r;
}

uint64_t OpTracker::Started(const CollArgs& args) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t seq = next_seq_++;
  started_ = Make(seq, args);
  return seq;
}

void OpTracker::Completed(uint64_t seq, const CollArgs& args) {
  std::lock_guard<std::mutex> lock(mu_);
  completed_ = Make(seq, args);
}

void OpTracker::Snapshot(Record* started, Record* completed) const {
  std::lock_guard<std::mutex> lock(mu_);
  *started = started_;
  *completed = completed_;
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
