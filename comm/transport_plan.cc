// Transport choice per link: each end's view from its own knobs over both
// ends' availability, then the check that the two views agree.
#include "comm/transport_plan.h"

#include <charconv>
#include <optional>
#include <strings.h>

#include "transports/ib/select.h"

namespace loom {

namespace {

using State = Availability::State;

std::string Who(const std::vector<TransportRecord>& ranks, int r) {
  return "rank " + std::to_string(r) + " (" + ranks[r].hostname + ")";
}

const Availability& Get(const TransportRecord& rec, TransportKind kind) {
  switch (kind) {
    case TransportKind::kShm: return rec.shm;
    case TransportKind::kSocket: return rec.socket;
    case TransportKind::kUcx: return rec.ucx;
    case TransportKind::kIb: return rec.ib;
  }
  return rec.socket;
}

// The end of the link (me first) that cannot use `kind`, preferring one
// where it is present but unusable: that is the one worth fixing.
int Blocker(const std::vector<TransportRecord>& ranks, int me, int peer, TransportKind kind) {
  for (int end : {me, peer}) {
    if (Get(ranks[end], kind).state == State::kUnusable) return end;
  }
  return Get(ranks[me], kind).usable() ? peer : me;
}

std::string NotUsable(const std::vector<TransportRecord>& ranks, int end, TransportKind kind) {
  const Availability& a = Get(ranks[end], kind);
  return std::string(TransportName(kind)) +
         (a.state == State::kAbsent ? " is absent on " : " is not usable on ") + Who(ranks, end) +
         (a.detail.empty() ? "" : ": " + a.detail);
}

// "127.x.y.z:port", "[::1]:port", "[::ffff:127.x.y.z]:port".
bool IsLoopback(std::string_view address) {
  if (address.starts_with("[")) {
    address.remove_prefix(1);
    if (address.starts_with("::ffff:")) address.remove_prefix(7);
  }
  return address.starts_with("127.") || address.starts_with("::1]");
}

// One end's decision for the link (me, peer), from me's knobs.
Result<LinkPlan> View(const std::vector<TransportRecord>& ranks, int me, int peer) {
  const TransportRecord& mine = ranks[me];
  const TransportKnobs& k = mine.knobs;
  const std::string link = Who(ranks, me) + " -> " + Who(ranks, peer) + ": ";
  std::optional<TransportKind> net, require;
  if (!k.net.empty()) {
    LOOM_ASSIGN_OR_RETURN(net, ParseTransportName(k.net, "NCCL_NET", false));
  }
  if (!k.require.empty()) {
    LOOM_ASSIGN_OR_RETURN(require,
                          ParseTransportName(k.require, "LOOM_REQUIRE_TRANSPORT", true));
  }
  const std::string net_knob = "NCCL_NET=" + k.net;
  const std::string require_knob = "LOOM_REQUIRE_TRANSPORT=" + k.require;
  if (net && require && *require != TransportKind::kShm && *net != *require) {
    return InvalidUsage(Who(ranks, me) + ": " + net_knob + " contradicts " + require_knob);
  }
  const bool ib_forced = net == TransportKind::kIb || require == TransportKind::kIb;
  if (ib_forced && k.ib_disable) {
    return InvalidUsage(Who(ranks, me) + ": " + (net ? net_knob : require_knob) +
                        " contradicts NCCL_IB_DISABLE=1");
  }

  LinkPlan plan;
  if (mine.host_id == ranks[peer].host_id) {
    if (k.shm_disable) {
      if (require == TransportKind::kShm) {
        return InvalidUsage(Who(ranks, me) + ": " + require_knob +
                            " contradicts NCCL_SHM_DISABLE=1");
      }
      plan.reason = "same host, NCCL_SHM_DISABLE=1; ";
    } else if (mine.shm.usable() && ranks[peer].shm.usable()) {
      plan.kind = TransportKind::kShm;
      plan.reason = "same host";
      return plan;
    } else {
      const std::string why = NotUsable(ranks, Blocker(ranks, me, peer, TransportKind::kShm),
                                        TransportKind::kShm);
      if (require) {
        return SystemError(link + why + "; " + require_knob +
                           " makes falling back to the network an error");
      }
      plan.warnings.push_back(link + why +
                              "; falling back to the network [rule: same host -> SHM, else "
                              "network]; NCCL_SHM_DISABLE=1 chooses the network knowingly");
      plan.reason = "same host, SHM unusable; ";
    }
  }

  // A named network transport: exactly it, never a fallback.
  std::optional<TransportKind> forced = net;
  std::string forced_knob = net_knob;
  if (!forced && require && *require != TransportKind::kShm) {
    forced = require;
    forced_knob = require_knob;
  }
  if (forced) {
    for (int end : {me, peer}) {
      if (Get(ranks[end], *forced).usable()) continue;
      return SystemError(link + forced_knob + " selects " + TransportName(*forced) + ", but " +
                         NotUsable(ranks, end, *forced) +
                         "; no fallback is made when it is set (unset it to let loom choose)");
    }
    plan.kind = *forced;
    plan.reason += forced_knob;
    return plan;
  }

  // Auto: IB when both ends have it, else sockets.
  if (k.ib_disable) {
    plan.reason += "NCCL_IB_DISABLE=1; ";
  } else if (mine.ib.usable() && ranks[peer].ib.usable()) {
    plan.kind = TransportKind::kIb;
    plan.reason += "auto: IB on both ends";
    return plan;
  } else {
    const int end = Blocker(ranks, me, peer, TransportKind::kIb);
    const std::string why = NotUsable(ranks, end, TransportKind::kIb);
    const bool fallback = mine.ib.state == State::kUnusable ||
                          ranks[peer].ib.state == State::kUnusable ||
                          mine.ib.usable() != ranks[peer].ib.usable();
    if (fallback && require) {
      return SystemError(link + why + "; " + require_knob +
                         " makes falling back to Socket an error");
    }
    if (fallback) {
      plan.warnings.push_back(link + why +
                              "; falling back to Socket [rule: auto IB > Socket]; "
                              "NCCL_IB_DISABLE=1 or NCCL_NET=Socket chooses sockets knowingly, "
                              "LOOM_REQUIRE_TRANSPORT=ib makes this an error");
    }
    plan.reason += "auto: " + why + "; ";
  }
  for (int end : {me, peer}) {
    if (Get(ranks[end], TransportKind::kSocket).usable()) continue;
    return SystemError(link + "no network transport: " +
                       NotUsable(ranks, end, TransportKind::kSocket) +
                       " (check NCCL_SOCKET_IFNAME on that host)");
  }
  if (mine.host_id != ranks[peer].host_id) {
    for (int end : {me, peer}) {
      if (!IsLoopback(ranks[end].socket_address)) continue;
      return SystemError(link + Who(ranks, end) + " listens for sockets on the loopback address " +
                         ranks[end].socket_address + " (" + ranks[end].socket.detail +
                         "), which another host cannot reach; NCCL_SOCKET_IFNAME" +
                         " picked it: name the data interface (e.g. NCCL_SOCKET_IFNAME==eth0) " +
                         "rather than only excluding others");
    }
  }
  plan.kind = TransportKind::kSocket;
  plan.reason += "Socket";
  return plan;
}

// Length-prefixed fields: "<decimal length>:<bytes>" one after another.
void Put(std::string* out, std::string_view s) {
  *out += std::to_string(s.size());
  *out += ':';
  *out += s;
}

bool Take(std::string_view* in, std::string* s) {
  const size_t colon = in->find(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  size_t len = 0;
  auto [end, ec] = std::from_chars(in->data(), in->data() + colon, len);
  if (ec != std::errc() || end != in->data() + colon || len > in->size() - colon - 1) return false;
  s->assign(in->substr(colon + 1, len));
  in->remove_prefix(colon + 1 + len);
  return true;
}

constexpr std::string_view kRecordTag = "tp1";

}  // namespace

const char* TransportName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kShm: return "SHM";
    case TransportKind::kSocket: return "Socket";
    case TransportKind::kUcx: return "UCX";
    case TransportKind::kIb: return "IB";
  }
  return "?";
}

Result<TransportKind> ParseTransportName(std::string_view text, std::string_view what,
                                         bool allow_shm) {
  const std::string s(text);
  for (TransportKind kind : {TransportKind::kIb, TransportKind::kSocket, TransportKind::kUcx,
                             TransportKind::kShm}) {
    if (kind == TransportKind::kShm && !allow_shm) continue;
    if (strcasecmp(s.c_str(), TransportName(kind)) == 0) return kind;
  }
  return InvalidUsage(std::string(what) + "='" + s + "' is not a transport loom has; use " +
                      (allow_shm ? "ib, ucx, socket or shm" : "IB, Socket or UCX") +
                      " (any case)");
}

std::string EncodeTransportRecord(const TransportRecord& r) {
  std::string out;
  Put(&out, kRecordTag);
  Put(&out, r.host_id);
  Put(&out, r.hostname);
  for (const Availability* a : {&r.shm, &r.socket, &r.ucx, &r.ib}) {
    Put(&out, std::to_string(static_cast<int>(a->state)));
    Put(&out, a->detail);
  }
  Put(&out, r.socket_address);
  Put(&out, r.knobs.shm_disable ? "1" : "0");
  Put(&out, r.knobs.ib_disable ? "1" : "0");
  Put(&out, r.knobs.net);
  Put(&out, r.knobs.require);
  return out;
}

Result<TransportRecord> DecodeTransportRecord(std::string_view text, int rank) {
  auto bad = [rank](const std::string& what) {
    return InternalError("malformed transport record from rank " + std::to_string(rank) + ": " +
                         what + " (is every rank running the same loom version?)");
  };
  std::string tag;
  if (!Take(&text, &tag) || tag != kRecordTag) return bad("unknown format");
  TransportRecord r;
  if (!Take(&text, &r.host_id) || !Take(&text, &r.hostname)) return bad("host");
  for (Availability* a : {&r.shm, &r.socket, &r.ucx, &r.ib}) {
    std::string state;
    if (!Take(&text, &state) || !Take(&text, &a->detail)) return bad("availability");
    if (state.size() != 1 || state[0] < '0' || state[0] > '2') return bad("state '" + state + "'");
    a->state = static_cast<State>(state[0] - '0');
  }
  std::string shm_disable, ib_disable;
  if (!Take(&text, &r.socket_address) || !Take(&text, &shm_disable) || !Take(&text, &ib_disable) || !Take(&text, &r.knobs.net) ||
      !Take(&text, &r.knobs.require)) {
    return bad("knobs");
  }
  r.knobs.shm_disable = shm_disable == "1";
  r.knobs.ib_disable = ib_disable == "1";
  if (!text.empty()) return bad("trailing bytes");
  return r;
}

Result<LinkPlan> PlanLink(const std::vector<TransportRecord>& ranks, int me, int peer) {
  const int n = static_cast<int>(ranks.size());
  if (me < 0 || me >= n || peer < 0 || peer >= n || me == peer) {
    return InvalidArgument("PlanLink: link (" + std::to_string(me) + ", " +
                           std::to_string(peer) + ") is not a pair of distinct ranks below " +
                           std::to_string(n));
  }
  // Evaluate both ends in rank order so either end reports the same error.
  const int lo = std::min(me, peer), hi = std::max(me, peer);
  Result<LinkPlan> lo_view = View(ranks, lo, hi);
  if (!lo_view.ok()) return lo_view.status();
  Result<LinkPlan> hi_view = View(ranks, hi, lo);
  if (!hi_view.ok()) return hi_view.status();
  if (lo_view->kind != hi_view->kind) {
    return InvalidUsage(Who(ranks, lo) + " would reach " + Who(ranks, hi) + " via " +
                        TransportName(lo_view->kind) + " (" + lo_view->reason + ") but " +
                        Who(ranks, hi) + " would use " + TransportName(hi_view->kind) + " (" +
                        hi_view->reason + "); make NCCL_NET, NCCL_IB_DISABLE, NCCL_SHM_DISABLE "
                        "and LOOM_REQUIRE_TRANSPORT alike on every host");
  }
  return me == lo ? lo_view : hi_view;
}

Result<std::vector<LinkPlan>> PlanPeers(const std::vector<TransportRecord>& ranks, int me) {
  if (me < 0 || me >= static_cast<int>(ranks.size())) {
    return InvalidArgument("PlanPeers: rank " + std::to_string(me) + " is not below " +
                           std::to_string(ranks.size()));
  }
  std::vector<LinkPlan> plans(ranks.size());
  plans[me] = LinkPlan{TransportKind::kShm, "self", {}};
  for (int p = 0; p < static_cast<int>(ranks.size()); ++p) {
    if (p == me) continue;
    LOOM_ASSIGN_OR_RETURN(plans[p], PlanLink(ranks, me, p));
  }
  return plans;
}

Availability IbAvailabilityOf(const ib::Discovery& found, std::string_view hca,
                              ib::PortInfo* port) {
  if (!found.absent_reason.empty()) return Availability::Absent(found.absent_reason);
  if (found.ports.empty()) return Availability::Absent("zero IB devices");
  const ib::PortChoice choice = ib::SelectPorts(found.ports, ib::HcaFilter::Parse(hca));
  if (choice.ports.empty()) {
    return choice.absent ? Availability::Absent(choice.why_none)
                         : Availability::Unusable(choice.why_none);
  }
  if (port != nullptr) *port = choice.ports[0];
  return Availability::Usable(choice.ports[0].device + ":" + std::to_string(choice.ports[0].port));
}

Availability GateUnprovenIb(Availability ib, const TransportKnobs& knobs) {
  if (!ib.usable()) return ib;
  auto names_ib = [](const std::string& v, bool allow_shm) {
    auto k = ParseTransportName(v, "", allow_shm);
    return k.ok() && *k == TransportKind::kIb;
  };
  if (names_ib(knobs.net, false) || names_ib(knobs.require, true)) return ib;
  return Availability::Unusable("found " + ib.detail +
                                ", but loom's IB connection has not run on RDMA hardware yet; "
                                "set NCCL_NET=IB on every rank to use it");
}

}  // namespace loom
