// The doctor side of the status protocol and the judgement over the answers.
#include "tools/doctor/attach.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "tools/doctor/gather.h"
#include "tools/doctor/net.h"

namespace loom::doctor {

namespace {

using json::Value;

Result<const Value*> Get(const Value& v, const char* key, Value::Type type) {
  const Value* m = v.Find(key);
  if (m == nullptr || m->type() != type) {
    return InvalidArgument(std::string("loom-status: member '") + key + "' missing or of the wrong type");
  }
  return m;
}

// A whole number within +-2^53, where every double is exact: anything else
// a rank could not have sent, and converting it would be undefined.
Result<int64_t> GetInt(const Value& v, const char* key) {
  LOOM_ASSIGN_OR_RETURN(const Value* m, Get(v, key, Value::Type::kNumber));
  const double d = m->number();
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (!(d >= -kExact && d <= kExact) || d != std::floor(d)) {
    return InvalidArgument(std::string("loom-status: member '") + key + "' is not an integer");
  }
  return static_cast<int64_t>(d);
}

Result<std::string> GetStr(const Value& v, const char* key) {
  LOOM_ASSIGN_OR_RETURN(const Value* m, Get(v, key, Value::Type::kString));
  return m->string();
}

Result<OpRecord> ParseOp(const Value& v) {
  OpRecord r;
  LOOM_ASSIGN_OR_RETURN(r.seq, GetInt(v, "seq"));
  LOOM_ASSIGN_OR_RETURN(r.op, GetStr(v, "op"));
  LOOM_ASSIGN_OR_RETURN(r.count, GetInt(v, "count"));
  LOOM_ASSIGN_OR_RETURN(r.dtype, GetStr(v, "dtype"));
  LOOM_ASSIGN_OR_RETURN(r.redop, GetStr(v, "redop"));
  LOOM_ASSIGN_OR_RETURN(int64_t root, GetInt(v, "root"));
  LOOM_ASSIGN_OR_RETURN(int64_t peer, GetInt(v, "peer"));
  r.root = static_cast<int>(root);
  r.peer = static_cast<int>(peer);
  LOOM_ASSIGN_OR_RETURN(r.age_ms, GetInt(v, "age_ms"));
  return r;
}

std::string Describe(const OpRecord& r) {
  if (r.seq == 0) return "nothing yet";
  std::string s = "#" + std::to_string(r.seq) + " " + r.op + " count " + std::to_string(r.count) + " " + r.dtype;
  if (!r.redop.empty()) s += " " + r.redop;
  if (r.root >= 0) s += " root " + std::to_string(r.root);
  return s;
}

std::string Ranks(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 16; ++i) s += (i ? "," : "") + std::to_string(v[i]);
  if (v.size() > 16) s += ",... (" + std::to_string(v.size()) + ")";
  return s;
}

}  // namespace

Status ParseStatusReply(const Value& v, RankStatus* out) {
  LOOM_ASSIGN_OR_RETURN(std::string format, GetStr(v, "format"));
  LOOM_ASSIGN_OR_RETURN(int64_t version, GetInt(v, "version"));
  if (format != "loom-status" || version != 1) {
    return InvalidArgument("not a loom-status/1 reply (" + format + "/" + std::to_string(version) + ")");
  }
  LOOM_ASSIGN_OR_RETURN(int64_t rank, GetInt(v, "rank"));
  LOOM_ASSIGN_OR_RETURN(int64_t size, GetInt(v, "size"));
  LOOM_ASSIGN_OR_RETURN(out->host, GetStr(v, "host"));
  LOOM_ASSIGN_OR_RETURN(int64_t pid, GetInt(v, "pid"));
  out->rank = static_cast<int>(rank);
  out->size = static_cast<int>(size);
  out->pid = static_cast<int>(pid);
  LOOM_ASSIGN_OR_RETURN(const Value* comms, Get(v, "comms", Value::Type::kArray));
  out->comms.clear();
  for (const Value& c : comms->array()) {
    CommStatus cs;
    LOOM_ASSIGN_OR_RETURN(cs.id, GetStr(c, "id"));
    LOOM_ASSIGN_OR_RETURN(int64_t crank, GetInt(c, "rank"));
    LOOM_ASSIGN_OR_RETURN(int64_t csize, GetInt(c, "size"));
    cs.rank = static_cast<int>(crank);
    cs.size = static_cast<int>(csize);
    LOOM_ASSIGN_OR_RETURN(const Value* started, Get(c, "started", Value::Type::kObject));
    LOOM_ASSIGN_OR_RETURN(const Value* completed, Get(c, "completed", Value::Type::kObject));
    LOOM_ASSIGN_OR_RETURN(cs.started, ParseOp(*started));
    LOOM_ASSIGN_OR_RETURN(cs.completed, ParseOp(*completed));
    LOOM_ASSIGN_OR_RETURN(cs.async_error, GetStr(c, "async_error"));
    if (cs.rank < 0 || cs.rank >= cs.size) return InvalidArgument("loom-status: comm rank out of range");
    out->comms.push_back(std::move(cs));
  }
  out->answer = RankStatus::Answer::kAnswered;
  return Status::Ok();
}

RankStatus QueryStatus(const std::string& endpoint, int timeout_ms) {
  RankStatus rs;
  rs.endpoint = endpoint;
  const size_t colon = endpoint.rfind(':');
  std::string host = endpoint.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const Resolution res = ResolveName(host);
  if (colon == std::string::npos || res.addresses.empty()) {
    rs.detail = "cannot resolve '" + host + "'" + (res.error.empty() ? "" : ": " + res.error);
    return rs;
  }
  Fd conn;
  const Probe p = ConnectProbe(res.addresses.front(), std::atoi(endpoint.c_str() + colon + 1), timeout_ms, &conn);
  if (p.outcome != ProbeOutcome::kOk) {
    rs.detail = std::string("connect ") + Name(p.outcome) + " (" + p.detail + ")";
    return rs;
  }
  const auto deadline = Deadline::After(std::chrono::milliseconds(timeout_ms));
  if (Status s = SendMessage(conn.get(), Value::Object{{"type", "status"}, {"version", 1}}, deadline, endpoint);
      !s.ok()) {
    rs.answer = RankStatus::Answer::kNoAnswer;
    rs.detail = s.message();
    return rs;
  }
  auto reply = RecvMessage(conn.get(), deadline, endpoint);
  if (!reply.ok()) {
    rs.answer = reply.status().code() == Code::kTimeout ? RankStatus::Answer::kNoAnswer
                                                          : RankStatus::Answer::kBadAnswer;
    rs.detail = reply.status().code() == Code::kTimeout
                    ? "connected, but no answer within " + std::to_string(timeout_ms) + " ms"
                    : reply.status().message();
    return rs;
  }
  if (Status s = ParseStatusReply(reply.value(), &rs); !s.ok()) {
    rs.answer = RankStatus::Answer::kBadAnswer;
    rs.detail = s.message();
  }
  return rs;
}

Result<std::vector<std::string>> ParseEndpoints(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) continue;
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0) return InvalidArgument("--attach: '" + item + "' is not host:port");
    const std::string host = item.substr(0, colon);
    const std::string ports = item.substr(colon + 1);
    char* end = nullptr;
    const long port = std::strtol(ports.c_str(), &end, 10);
    long n = 1;
    if (*end == '+') n = std::strtol(end + 1, &end, 10);
    // Compared without a sum: port and N are anything strtol returns.
    if (end == ports.c_str() || *end != '\0' || port < 1 || port > 65535 || n < 1 ||
        n > 65536 - port) {
      return InvalidArgument("--attach: bad port in '" + item + "' (host:port or host:port+N)");
    }
    for (long i = 0; i < n; ++i) out.push_back(host + ":" + std::to_string(port + i));
  }
  if (out.empty()) return InvalidArgument("--attach: no endpoints given");
  return out;
}

std::vector<Finding> AnalyzeAttach(const std::vector<RankStatus>& ranks, int64_t stall_ms) {
  std::vector<Finding> out;
  std::vector<const RankStatus*> silent;
  for (const RankStatus& r : ranks) {
    switch (r.answer) {
      case RankStatus::Answer::kAnswered: break;
      case RankStatus::Answer::kNoConnection: silent.push_back(&r); break;
      case RankStatus::Answer::kNoAnswer: silent.push_back(&r); break;
      case RankStatus::Answer::kBadAnswer:
        out.push_back(Warn(Check::kAttach, r.endpoint, "answered, but not with loom-status/1: " + r.detail,
                           "point --attach at the ranks' status ports (LOOM_STATUS_PORT)"));
    }
  }
  // Per communicator: who is there, who is behind, who disagrees.
  std::map<std::string, std::vector<std::pair<const RankStatus*, const CommStatus*>>> comms;
  for (const RankStatus& r : ranks) {
    for (const CommStatus& c : r.comms) comms[c.id].push_back({&r, &c});
  }
  std::vector<int> missing_all;
  for (const auto& [id, members] : comms) {
    const int size = members.front().second->size;
    std::set<int> present;
    int64_t max_started = 0;
    for (const auto& [r, c] : members) {
      present.insert(c->rank);
      max_started = std::max(max_started, c->started.seq);
    }
    std::vector<int> missing;
    for (int i = 0; i < size; ++i) {
      if (!present.count(i)) missing.push_back(i);
    }
    missing_all.insert(missing_all.end(), missing.begin(), missing.end());
    const std::string comm = "comm " + id.substr(0, 8);
    // Different calls at one sequence number: the minority is the culprit.
    std::map<int64_t, std::vector<std::pair<const OpRecord*, int>>> by_seq;
    for (const auto& [r, c] : members) {
      by_seq[c->started.seq].push_back({&c->started, c->rank});
      if (c->completed.seq != c->started.seq) by_seq[c->completed.seq].push_back({&c->completed, c->rank});
    }
    bool mismatch = false;
    for (const auto& [seq, recs] : by_seq) {
      if (seq == 0) continue;
      std::vector<std::pair<const OpRecord*, std::vector<int>>> kinds;
      for (const auto& entry : recs) {
        const OpRecord* rec = entry.first;  // a plain variable: clang 14 cannot capture bindings
        auto it = std::find_if(kinds.begin(), kinds.end(), [rec](const auto& k) { return k.first->SameCall(*rec); });
        if (it == kinds.end()) kinds.push_back({rec, {entry.second}});
        else it->second.push_back(entry.second);
      }
      if (kinds.size() < 2) continue;
      mismatch = true;
      std::sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
      std::string detail;
      for (const auto& [rec, rs] : kinds) detail += (detail.empty() ? "" : "; ") + std::string("rank ") + Ranks(rs) + ": " + Describe(*rec);
      out.push_back(Fail(Check::kAttach, "rank " + Ranks(kinds.back().second),
                         comm + ": ranks called different operations at #" + std::to_string(seq) + ": " + detail,
                         "make every rank issue the same collectives in the same order with the same count, "
                         "type and root (look for a rank-dependent branch before call #" + std::to_string(seq) + ")"));
    }
    // Behind: issued fewer operations than the others while they wait for
    // it (a rank merely a moment behind is normal progress).
    bool ahead_waiting = false;
    for (const auto& [r, c] : members) {
      ahead_waiting |= c->started.seq == max_started && c->completed.seq < max_started && c->started.age_ms >= stall_ms;
    }
    std::vector<int> behind;
    std::string behind_detail;
    for (const auto& [r, c] : members) {
      if (c->started.seq >= max_started || !ahead_waiting) continue;
      behind.push_back(c->rank);
      behind_detail += (behind_detail.empty() ? "" : "; ") + std::string("rank ") + std::to_string(c->rank) + " (" +
                       r->host + " pid " + std::to_string(r->pid) + ") last issued " + Describe(c->started) +
                       (c->completed.seq == c->started.seq ? ", completed, " + std::to_string(c->completed.age_ms / 1000) +
                                                                 " s ago"
                                                           : ", not completed");
    }
    if (!behind.empty()) {
      out.push_back(Fail(Check::kAttach, "rank " + Ranks(behind),
                         comm + ": behind the others, who are in #" + std::to_string(max_started) + ": " + behind_detail,
                         "look at what rank " + Ranks(behind) +
                             " does instead (py-spy dump / gdb -p on that pid): a data loader, a rank-dependent branch, "
                             "or a failed step it swallowed"));
    }
    if (!missing.empty()) {
      std::string guess;
      if (missing.size() == 1 && silent.size() == 1) guess = " (probably the silent " + silent.front()->endpoint + ")";
      out.push_back(Fail(Check::kAttach, "rank " + Ranks(missing),
                         comm + ": rank " + Ranks(missing) + " of " + std::to_string(size) + " did not answer" + guess,
                         "see the line for its endpoint: a stopped or dead process holds everyone else"));
    }
    // Stalled: started long ago and not completed.
    std::vector<int> waiting;
    int64_t oldest = 0;
    const OpRecord* in = nullptr;
    for (const auto& [r, c] : members) {
      if (c->started.seq > c->completed.seq && c->started.age_ms >= stall_ms) {
        waiting.push_back(c->rank);
        if (c->started.age_ms >= oldest) oldest = c->started.age_ms, in = &c->started;
      }
      if (!c->async_error.empty()) {
        out.push_back(Fail(Check::kAttach, "rank " + std::to_string(c->rank),
                           comm + ": asynchronous error: " + c->async_error, "the error names the peer and the cause"));
      }
    }
    if (!waiting.empty()) {
      const std::string what = comm + ": rank " + Ranks(waiting) + " wait in " + Describe(*in) + " for " +
                               std::to_string(oldest / 1000) + " s";
      if (!behind.empty() || !missing.empty() || mismatch) {
        out.push_back(Warn(Check::kAttach, "", what + " (explained by the rank(s) named above)",
                           "fix those ranks; the waiting ones are victims"));
      } else {
        out.push_back(Fail(Check::kAttach, "", what + "; no rank is behind or missing: the transfer itself is stuck",
                           "run 'loom doctor' before the next launch (reachability, MTU, firewall), and set "
                           "LOOM_TIMEOUT_MS so a stuck transfer fails with the peer named"));
      }
    }
    if (behind.empty() && missing.empty() && !mismatch && waiting.empty()) {
      out.push_back(Pass(Check::kAttach, comm + ": " + std::to_string(size) + " ranks, all at " +
                                             Describe(members.front().second->completed) + " or later, none stalled"));
    }
  }
  for (const RankStatus* r : silent) {
    const bool stopped = r->answer == RankStatus::Answer::kNoAnswer;
    out.push_back(Fail(Check::kAttach, r->endpoint,
                       stopped ? "accepted the connection but did not answer (" + r->detail +
                                     "): the process is stopped (SIGSTOP, a debugger) or stuck in the kernel"
                               : "no status port answers (" + r->detail + "): the rank died or never started",
                       stopped ? "on that host: ps -o stat,pid,cmd (state T = stopped: kill -CONT <pid>; D = stuck in I/O)"
                               : "check the rank's log and exit status; restart the job"));
  }
  if (comms.empty() && out.empty()) {
    out.push_back(Pass(Check::kAttach, "no communicators reported"));
  }
  return out;
}

}  // namespace loom::doctor
