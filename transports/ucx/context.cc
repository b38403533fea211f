// UcxContext: UCX configuration (UCX_* variables first, then loom's pins),
// the worker, address exchange and one endpoint per peer.
#include "transports/ucx/context.h"

#include <poll.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string_view>

#include "base/log.h"
#include "transports/ucx/connection.h"
#include "transports/ucx/ucx_api.h"

namespace loom {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

Status UcxError(const UcxApi& api, const std::string& what, ucs_status_t s) {
  std::string tls = Env("UCX_TLS"), dev = Env("UCX_NET_DEVICES");
  return SystemError("UCX " + what + " failed: " + api.status_string(s) +
                     " (UCX_TLS=" + (tls.empty() ? "(unset)" : tls) +
                     ", UCX_NET_DEVICES=" + (dev.empty() ? "(unset)" : dev) + ")");
}

// Worker addresses are binary; hex keeps them safe in any exchange.
std::string ToHex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

Result<std::string> FromHex(const std::string& hex, int rank) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) break;
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  if (hex.size() % 2 != 0 || out.size() * 2 != hex.size()) {
    return InternalError("malformed UCX worker address from rank " + std::to_string(rank));
  }
  return out;
}

}  // namespace

bool SharedMemoryOnly(std::string_view tls) {
  if (tls.empty() || tls.front() == '^') return false;
  static constexpr std::string_view kShared[] = {"sm",    "shm",  "mm",  "posix", "sysv",
                                                 "xpmem", "knem", "cma", "self"};
  while (!tls.empty()) {
    const size_t comma = tls.find(',');
    const std::string_view item = tls.substr(0, comma);
    if (std::find(std::begin(kShared), std::end(kShared), item) == std::end(kShared)) return false;
    tls = comma == std::string_view::npos ? std::string_view() : tls.substr(comma + 1);
  }
  return true;
}

Result<std::unique_ptr<UcxContext>> UcxContext::Create(const UcxOptions& options) {
  const UcxApi& api = LoadUcxApi(options.library.c_str());
  if (!api.error.empty()) return SystemError(api.error);
  std::unique_ptr<UcxContext> ctx(new UcxContext());
  ucp_config_t* config = nullptr;
  ucs_status_t s = api.config_read(nullptr, nullptr, &config);  // reads UCX_* variables
  if (s != UCS_OK) return UcxError(api, "reading the configuration (UCX_* variables)", s);
  if (!options.net_device.empty() && Env("UCX_NET_DEVICES").empty()) {
    s = api.config_modify(config, "NET_DEVICES", options.net_device.c_str());
    if (s != UCS_OK) {
      api.config_release(config);
      return UcxError(api, "setting UCX_NET_DEVICES=" + options.net_device, s);
    }
    ctx->pinned_device_ = options.net_device;
  }
  if (options.ib_disable && Env("UCX_TLS").empty()) {
    s = api.config_modify(config, "TLS", "^ib");
    if (s != UCS_OK) {
      api.config_release(config);
      return UcxError(api, "excluding IB transports for NCCL_IB_DISABLE (UCX_TLS=^ib)", s);
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  ucp_context_h context = nullptr;
  s = api.Init(&params, config, &context);
  api.config_release(config);
  if (s != UCS_OK) return UcxError(api, "ucp_init", s);

  // SERIALIZED: created here, then driven by the communicator's worker thread.
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h worker = nullptr;
  s = api.worker_create(context, &wp, &worker);
  if (s != UCS_OK) {
    api.cleanup(context);
    return UcxError(api, "ucp_worker_create", s);
  }
  int efd = -1;
  s = api.worker_get_efd(worker, &efd);
  if (s != UCS_OK) {
    api.worker_destroy(worker);
    api.cleanup(context);
    return UcxError(api, "ucp_worker_get_efd", s);
  }
  ctx->worker_ = std::make_shared<UcxWorker>(api, context, worker, efd);

  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  s = api.worker_get_address(worker, &addr, &addr_len);
  if (s != UCS_OK) return UcxError(api, "ucp_worker_get_address", s);
  ctx->address_.assign(reinterpret_cast<const char*>(addr), addr_len);
  api.worker_release_address(worker, addr);

  std::string dev = Env("UCX_NET_DEVICES");
  if (dev.empty()) dev = ctx->pinned_device_;
  ctx->via_ = "NET/UCX/" + (dev.empty() ? std::string("any") : dev);
  const std::string tls = Env("UCX_TLS");
  LOOM_INFO(log::kInit | log::kNet, "UCX %s: UCX_TLS=%s UCX_NET_DEVICES=%s%s, address %zu bytes",
            api.get_version_string(), tls.empty() ? "(unset)" : tls.c_str(),
            dev.empty() ? "(unset)" : dev.c_str(),
            ctx->pinned_device_.empty() ? "" : " (pinned by loom)", addr_len);
  return ctx;
}

UcxContext::~UcxContext() = default;

Result<std::vector<std::unique_ptr<Connection>>> UcxContext::Connect(
    Exchange& exchange, int rank, const std::vector<int>& peers,
    const std::vector<UcxRankInfo>& ranks, Deadline deadline) {
  LOOM_ASSIGN_OR_RETURN(auto hex,
                        exchange.AllGather("ucx-worker-address", ToHex(address_), deadline));
  std::vector<std::string> addresses;
  for (size_t r = 0; r < hex.size(); ++r) {
    LOOM_ASSIGN_OR_RETURN(std::string a, FromHex(hex[r], static_cast<int>(r)));
    addresses.push_back(std::move(a));
  }
  return Connect(rank, peers, addresses, ranks, deadline);
}

// Per endpoint: PEER error handling when UCX_TLS leaves a transport that
// supports it (tcp, verbs); NONE plus pid checks when it cannot (UCX 1.13's
// sm/posix/sysv/cma refuse PEER). Both ends apply the same rule to the
// same configuration, so their endpoints agree.
Result<std::vector<std::unique_ptr<Connection>>> UcxContext::Connect(
    int rank, const std::vector<int>& peers, const std::vector<std::string>& addresses,
    const std::vector<UcxRankInfo>& ranks, Deadline deadline) {
  const int size = static_cast<int>(ranks.size());
  if (rank < 0 || rank >= size || addresses.size() != ranks.size()) {
    return InvalidArgument("UCX connect: rank " + std::to_string(rank) + " with " +
                           std::to_string(addresses.size()) + " addresses for " +
                           std::to_string(size) + " ranks");
  }
  std::vector<std::unique_ptr<Connection>> conns;
  for (int p : peers) {
    if (p < 0 || p >= size || p == rank) {
      return InvalidArgument("UCX connect: invalid peer " + std::to_string(p));
    }
    if (addresses[p].empty()) {
      return InternalError("rank " + std::to_string(p) + " (" + ranks[p].hostname +
                           ") published no UCX worker address");
    }
    UcxConnection::Peer peer;
    peer.rank = p;
    peer.my_rank = rank;
    peer.host = ranks[p].hostname;
    peer.via = via_;
    const bool same_host = ranks[p].host_id == ranks[rank].host_id;
    peer.pid = same_host ? ranks[p].pid : 0;
    LOOM_ASSIGN_OR_RETURN(auto c, UcxConnection::Create(worker_, addresses[p], std::move(peer),
                                                        !SharedMemoryOnly(Env("UCX_TLS"))));
    LOOM_INFO(log::kInit | log::kNet, "UCX: rank %d -> %s, peer failure seen by %s", rank,
              c->Describe().c_str(),
              c->failure_detection() == UcxConnection::FailureDetection::kPeer
                  ? "UCX (error handling mode PEER)"
                  : "pid checks (error handling mode NONE)");
    conns.push_back(std::move(c));
  }
  LOOM_TRY(Handshake(conns, deadline));
  return conns;
}

// Hello each way on every endpoint; meanwhile the worker is progressed and,
// when idle, slept on like the engine does (short naps keep the deadline).
Status UcxContext::Handshake(const std::vector<std::unique_ptr<Connection>>& conns,
                             Deadline deadline) {
  std::vector<UcxConnection*> waiting;
  for (const auto& c : conns) {
    auto* u = static_cast<UcxConnection*>(c.get());
    LOOM_TRY(u->PostHello());
    waiting.push_back(u);
  }
  std::vector<pollfd> fds;
  while (!waiting.empty()) {
    worker_->Progress();
    for (size_t i = 0; i < waiting.size();) {
      LOOM_ASSIGN_OR_RETURN(bool done, waiting[i]->HelloDone());
      if (done) {
        waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    if (waiting.empty()) break;
    if (deadline.expired()) {
      std::string who;
      for (UcxConnection* u : waiting) who += (who.empty() ? "" : ", ") + u->Describe();
      return TimeoutError("UCX connection setup: no hello from " + who +
                          " before the deadline (did that rank reach communicator setup?)");
    }
    fds.clear();
    worker_->AppendPollFd(&fds, false);
    (void)::poll(fds.data(), fds.size(), static_cast<int>(deadline.RemainingMs(10)));
  }
  return Status::Ok();
}

}  // namespace loom
