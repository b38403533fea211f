// Wait reports in the store, and the breadth-first walk over them.
#include "comm/wait_diagnosis.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <set>

#include "comm/bootstrap/store_client.h"
#include "comm/bootstrap/wire.h"

namespace loom {

namespace {

constexpr uint32_t kReportFormat = 1;
// Edges and stalls kept per report: enough for any algorithm's waits, and a
// report stays within the store's value limit (kMaxValueBytes).
constexpr uint32_t kMaxReportItems = 256;
static_assert(16 + kMaxReportItems * (8 + 24) <= bootstrap::kMaxValueBytes);

std::string RankOn(int r, const std::vector<std::string>& hosts) {
  std::string s = "rank " + std::to_string(r);
  if (r >= 0 && static_cast<size_t>(r) < hosts.size() && !hosts[r].empty()) {
    s += " on host " + hosts[r];
  }
  return s;
}

std::string Seconds(uint32_t ms) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f s", ms / 1000.0);
  return b;
}

// `reported`: the figures are from `from`'s report (as they were then),
// not this rank's own, read just now.
std::string DescribeStall(int from, const LinkStall& st, bool reported,
                          const std::vector<std::string>& hosts) {
  const std::string link =
      "the network link between " + RankOn(from, hosts) + " and " + RankOn(st.peer, hosts);
  const std::string sender = "rank " + std::to_string(from);
  const std::string when = reported ? " when " + sender + " reported it" : "";
  if (st.unsent) {
    return link + " is down at " + sender + "'s end: its data for rank " + std::to_string(st.peer) +
           " had not left its host for " + Seconds(st.silent_ms) + when + " (" +
           std::to_string(st.retransmits) + " probes; no route, a down interface or a firewall)";
  }
  return link + " stopped acknowledging: " + sender + "'s data for rank " +
         std::to_string(st.peer) + " went unacknowledged (" + std::to_string(st.retransmits) +
         " retransmits, no acknowledgement for " + Seconds(st.silent_ms) + when +
         "): a cut cable, a down interface or a firewall on the way";
}

// ", which waits on rank 4 on its host": one step of a path of waits.
std::string Hop(const WaitEdge& e) {
  return "waits on rank " + std::to_string(e.peer) +
         (e.over_network ? " over the network" : " on its host");
}

// What the walk found, the strongest kind first.
struct Finding {
  enum Kind { kNone, kMissing, kStopped, kLink } kind = kNone;
  int rank = -1;     // kMissing, kStopped: the culprit; kLink: the sender
  int seen_by = -1;  // kStopped: the host-mate that sees it
  LinkStall stall;   // kLink
};

}  // namespace

std::string EncodeWaitReport(const WaitReport& w) {
  bootstrap::Writer out;
  out.U32(kReportFormat);
  out.U64(w.run);
  out.U32(w.waited_ms);
  const uint32_t nw = std::min<uint32_t>(static_cast<uint32_t>(w.waits.size()), kMaxReportItems);
  out.U32(nw);
  for (uint32_t i = 0; i < nw; ++i) {
    out.I32(w.waits[i].peer);
    out.U32((w.waits[i].over_network ? 1u : 0u) | (w.waits[i].peer_stopped ? 2u : 0u));
  }
  const uint32_t ns = std::min<uint32_t>(static_cast<uint32_t>(w.stalls.size()), kMaxReportItems);
  out.U32(ns);
  for (uint32_t i = 0; i < ns; ++i) {
    const LinkStall& st = w.stalls[i];
    out.I32(st.peer);
    out.U32(st.unsent ? 1 : 0);
    out.U32(st.retransmits);
    out.U32(st.silent_ms);
    out.U64(st.bytes);
  }
  return out.payload();
}

std::optional<WaitReport> DecodeWaitReport(std::string_view bytes) {
  if (bytes.empty()) return std::nullopt;
  bootstrap::Reader in(bytes);
  if (in.U32() != kReportFormat) return std::nullopt;
  WaitReport w;
  w.run = in.U64();
  w.waited_ms = in.U32();
  const uint32_t nw = in.U32();
  if (in.failed() || nw > kMaxReportItems) return std::nullopt;
  for (uint32_t i = 0; i < nw; ++i) {
    WaitEdge e;
    e.peer = in.I32();
    const uint32_t flags = in.U32();
    e.over_network = (flags & 1) != 0;
    e.peer_stopped = (flags & 2) != 0;
    w.waits.push_back(e);
  }
  const uint32_t ns = in.U32();
  if (in.failed() || ns > kMaxReportItems) return std::nullopt;
  for (uint32_t i = 0; i < ns; ++i) {
    LinkStall st;
    st.peer = in.I32();
    st.unsent = in.U32() != 0;
    st.retransmits = in.U32();
    st.silent_ms = in.U32();
    st.bytes = in.U64();
    w.stalls.push_back(st);
  }
  if (in.failed()) return std::nullopt;
  return w;
}

std::chrono::milliseconds WaitReportThreshold(std::chrono::milliseconds timeout) {
  using std::chrono::milliseconds;
  const milliseconds floor = std::min(milliseconds(1000), timeout / 2);
  return std::clamp(timeout / 4, floor, milliseconds(30000));
}

std::vector<std::string> HostLabels(const std::vector<std::string>& hostnames,
                                    const std::vector<std::string>& host_ids) {
  std::vector<std::string> labels = hostnames;
  if (host_ids.size() != hostnames.size()) return labels;
  std::map<std::string, std::string> first_id;  // hostname -> an identity it stands for
  std::set<std::string> shared;                 // hostnames of several identities
  for (size_t r = 0; r < hostnames.size(); ++r) {
    auto [it, added] = first_id.emplace(hostnames[r], host_ids[r]);
    if (!added && it->second != host_ids[r]) shared.insert(hostnames[r]);
  }
  for (size_t r = 0; r < hostnames.size(); ++r) {
    if (shared.count(hostnames[r]) != 0) labels[r] += " [" + host_ids[r] + "]";
  }
  return labels;
}

WaitCause FollowWaits(int me, const WaitReport& mine, const WaitLookup& lookup,
                      const std::vector<std::string>& hosts, int store_owner,
                      std::chrono::milliseconds budget) {
  const int n = static_cast<int>(std::max(hosts.size(), lookup.reports.size()));
  const bool answered = lookup.store == WaitLookup::Store::kAnswered;
  auto report = [&](int r) -> const WaitReport* {
    if (r == me) return &mine;
    if (!answered || r < 0 || static_cast<size_t>(r) >= lookup.reports.size()) return nullptr;
    return lookup.reports[r] ? &*lookup.reports[r] : nullptr;
  };
  auto valid = [&](int r) { return r >= 0 && r < n; };

  // Breadth first from this rank; parent/via give the path to each rank.
  std::vector<int> parent(n, -1);
  std::vector<WaitEdge> via(n);
  std::vector<bool> seen(n, false);
  Finding best;
  auto consider = [&](const Finding& f) {
    if (f.kind > best.kind) best = f;
  };
  std::deque<int> queue;
  if (valid(me)) {
    seen[me] = true;
    queue.push_back(me);
  }
  while (!queue.empty()) {
    const int at = queue.front();
    queue.pop_front();
    const WaitReport* w = report(at);
    if (w == nullptr) {
      // Waited on, and silent: it could not publish (stopped, or busy
      // outside any collective). Only the store's answer tells.
      if (answered) consider({Finding::kMissing, at, -1, {}});
      continue;
    }
    for (const LinkStall& st : w->stalls) {
      if (valid(st.peer)) consider({Finding::kLink, at, -1, st});
    }
    for (const WaitEdge& e : w->waits) {
      if (!valid(e.peer)) continue;
      if (e.peer_stopped) consider({Finding::kStopped, e.peer, at, {}});
      if (seen[e.peer]) continue;
      seen[e.peer] = true;
      parent[e.peer] = at;
      via[e.peer] = e;
      // A stopped peer's own report, if any, is from before it stopped.
      if (!e.peer_stopped) queue.push_back(e.peer);
    }
  }

  // "this rank waits on rank 5 over the network, which waits on rank 4 on
  // its host": the path of waits from this rank to `to`.
  auto path = [&](int to) {
    std::vector<int> hops;
    for (int r = to; valid(r) && r != me && parent[r] >= 0; r = parent[r]) hops.push_back(r);
    std::string s;
    for (size_t i = hops.size(); i-- > 0;) {
      s += (s.empty() ? "this rank " : ", which ") + Hop(via[hops[i]]);
    }
    return s;
  };
  auto with_path = [&](std::string text, int to) {
    const std::string p = path(to);
    if (!p.empty()) text += " (found through the rendezvous store: " + p + ")";
    return text;
  };

  WaitCause cause;
  switch (best.kind) {
    case Finding::kLink:
      cause.text =
          with_path(DescribeStall(best.rank, best.stall, best.rank != me, hosts), best.rank);
      cause.culprit = true;
      return cause;
    case Finding::kStopped:
      // A stopped peer of this rank's own is in the same-host chain already.
      if (best.seen_by != me) {
        cause.text =
            with_path(RankOn(best.rank, hosts) + " is stopped (SIGSTOP or a debugger), as rank " +
                          std::to_string(best.seen_by) + " on its host sees",
                      best.rank);
      }
      cause.culprit = true;
      return cause;
    case Finding::kMissing:
      cause.text = with_path(RankOn(best.rank, hosts) +
                                 " made no progress and did not report its wait (stopped, "
                                 "descheduled, or not in this operation?)",
                             best.rank);
      cause.culprit = true;
      return cause;
    case Finding::kNone:
      break;
  }
  if (lookup.store == WaitLookup::Store::kSilent) {
    cause.text = "the rendezvous store did not answer within " + std::to_string(budget.count()) +
                 " ms: " + RankOn(store_owner, hosts) +
                 ", which serves it under a launcher (else the process that created the "
                 "UniqueId does), may be stopped or its host unreachable";
    cause.culprit = true;
    return cause;
  }
  if (!answered) return cause;
  // A link that stalls off the path of waits: still the likeliest cause.
  for (int r = 0; r < n; ++r) {
    const WaitReport* w = report(r);
    if (w == nullptr) continue;
    for (const LinkStall& st : w->stalls) {
      if (!valid(st.peer)) continue;
      cause.text = DescribeStall(r, st, r != me, hosts);
      cause.culprit = true;
      return cause;
    }
  }
  // Every rank on the way waits on another: a cycle.
  std::vector<int> chain{me};
  for (int at = me;;) {
    const WaitReport* w = report(at);
    if (w == nullptr || w->waits.empty() || !valid(w->waits.front().peer)) break;
    const int next = w->waits.front().peer;
    auto loop = std::find(chain.begin(), chain.end(), next);
    if (loop != chain.end()) {
      std::string ranks;
      for (auto it = loop; it != chain.end(); ++it) {
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(*it);
      }
      cause.text = "ranks " + ranks +
                   " wait on one another in a cycle and none reports a stalled link: every "
                   "rank must issue the same collectives in the same order";
      return cause;
    }
    chain.push_back(next);
    at = next;
  }
  return cause;
}

StoreWaitReporter::StoreWaitReporter(const std::unique_ptr<bootstrap::StoreClient>* store, int rank,
                                     std::vector<std::string> hosts,
                                     std::chrono::milliseconds timeout)
    : store_(store),
      rank_(rank),
      hosts_(std::move(hosts)),
      threshold_(WaitReportThreshold(timeout)) {}

void StoreWaitReporter::Publish(const WaitReport& wait) {
  if (*store_ != nullptr) (void)(*store_)->Set(kWaitKey, EncodeWaitReport(wait));
}

void StoreWaitReporter::Withdraw() {
  if (*store_ != nullptr) (void)(*store_)->Set(kWaitKey, "");
}

std::string StoreWaitReporter::Explain(const WaitReport& mine, bool* culprit) {
  WaitLookup lookup;
  lookup.store = WaitLookup::Store::kGone;
  if (*store_ != nullptr) {
    Result<std::vector<std::string>> got =
        (*store_)->GetAll(kWaitKey, Deadline::After(kLookupBudget));
    if (got.ok()) {
      lookup.store = WaitLookup::Store::kAnswered;
      for (const std::string& v : *got) lookup.reports.push_back(DecodeWaitReport(v));
    } else if (got.status().code() == Code::kTimeout) {
      lookup.store = WaitLookup::Store::kSilent;
    }
  }
  WaitCause cause = FollowWaits(rank_, mine, lookup, hosts_, /*store_owner=*/0, kLookupBudget);
  *culprit = cause.culprit;
  return cause.text;
}

}  // namespace loom
