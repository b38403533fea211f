// Cost model: alpha-beta per step, one formula per (collective, algorithm).
#include "collectives/select/selector.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

namespace loom {

namespace {

std::string Lower(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  return out;
}

Result<Algo> ParseAlgo(const std::string& name) {
  if (name == "ring") return Algo::kRing;
  if (name == "tree") return Algo::kTree;
  if (name == "recursivedoubling" || name == "rd") return Algo::kRecursiveDoubling;
  if (name == "pairwise") return Algo::kPairwise;
  if (name == "dissemination") return Algo::kDissemination;
  if (name == "direct") return Algo::kDirect;
  return InvalidArgument("NCCL_ALGO: unknown algorithm '" + name +
                         "' (known: Ring, Tree, RecursiveDoubling/RD, Direct, Pairwise, Dissemination)");
}

std::string CollectiveKey(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce: return "allreduce";
    case OpKind::kReduceScatter: return "reducescatter";
    case OpKind::kAllGather: return "allgather";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kReduce: return "reduce";
    case OpKind::kAllToAll: return "alltoall";
    case OpKind::kSendRecv: return "sendrecv";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kInternal: return "internal";
  }
  return "";
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

int CeilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

}  // namespace

Result<AlgoFilter> AlgoFilter::Parse(std::string_view spec) {
  AlgoFilter f;
  std::string s = Lower(spec);
  if (s.empty()) return f;
  for (const std::string& part : Split(s, ';')) {
    if (part.empty()) continue;
    Rule rule;
    std::string list = part;
    if (auto colon = part.find(':'); colon != std::string::npos) {
      rule.collective = part.substr(0, colon);
      list = part.substr(colon + 1);
    }
    if (!list.empty() && list[0] == '^') {
      rule.exclude = true;
      list = list.substr(1);
    }
    for (const std::string& name : Split(list, ',')) {
      if (name.empty()) continue;
      LOOM_ASSIGN_OR_RETURN(Algo a, ParseAlgo(name));
      rule.algos.push_back(a);
    }
    f.rules_.push_back(std::move(rule));
  }
  return f;
}

bool AlgoFilter::Allows(OpKind kind, Algo algo) const {
  const std::string key = CollectiveKey(kind);
  // A rule naming this collective wins over a global one.
  const Rule* rule = nullptr;
  for (const Rule& r : rules_) {
    if (r.collective == key) rule = &r;
  }
  if (rule == nullptr) {
    for (const Rule& r : rules_) {
      if (r.collective.empty()) rule = &r;
    }
  }
  if (rule == nullptr) return true;
  bool listed = std::find(rule->algos.begin(), rule->algos.end(), algo) != rule->algos.end();
  return rule->exclude ? !listed : listed;
}

std::span<const Algo> CandidateAlgos(OpKind kind) {
  static constexpr Algo kAllReduce[] = {Algo::kRing, Algo::kRecursiveDoubling, Algo::kTree,
                                        Algo::kDirect};
  static constexpr Algo kBroadcast[] = {Algo::kRing, Algo::kTree, Algo::kDirect};
  static constexpr Algo kReduce[] = {Algo::kTree};
  static constexpr Algo kBlocks[] = {Algo::kRing, Algo::kDirect};
  static constexpr Algo kAllToAll[] = {Algo::kPairwise};
  static constexpr Algo kBarrier[] = {Algo::kDissemination};
  static constexpr Algo kPointToPoint[] = {Algo::kDirect};
  switch (kind) {
    case OpKind::kAllReduce: return kAllReduce;
    case OpKind::kBroadcast: return kBroadcast;
    case OpKind::kReduce: return kReduce;
    case OpKind::kReduceScatter:
    case OpKind::kAllGather: return kBlocks;
    case OpKind::kAllToAll: return kAllToAll;
    case OpKind::kBarrier: return kBarrier;
    case OpKind::kSendRecv:
    case OpKind::kInternal: return kPointToPoint;
  }
  return kPointToPoint;
}

double PredictUs(OpKind kind, Algo algo, size_t bytes, int n, const LinkModel& link) {
  // bytes: the whole buffer for AllReduce/Broadcast/Reduce, one block for
  // ReduceScatter/AllGather (what RunOne passes).
  const double a = link.latency_us;
  const double b_us = static_cast<double>(bytes) / (link.bandwidth_gbs * 1e3);  // S/B in us
  const double inf = std::numeric_limits<double>::infinity();
  const bool direct = link.peer_read_gbs > 0;
  const double r_us = direct ? static_cast<double>(bytes) / (link.peer_read_gbs * 1e3) : inf;
  const double steps_log = CeilLog2(n);
  const bool pow2 = (n & (n - 1)) == 0;
  // Each single-copy read is a system call that pins the peer's pages: a
  // fixed cost per operation that only large messages amortise.
  constexpr double kPeerReadSetupUs = 20.0;
  switch (kind) {
    case OpKind::kAllReduce:
      if (algo == Algo::kRing) return 2.0 * (n - 1) * a + 2.0 * (n - 1) / n * b_us;
      if (algo == Algo::kRecursiveDoubling) {
        double folds = pow2 ? 0 : 2;
        return (steps_log + folds) * (a + b_us);
      }
      if (algo == Algo::kTree) return 2.0 * steps_log * (a + b_us);
      // Three synchronisations, then reads of (n-1)/n of the buffer twice.
      if (algo == Algo::kDirect) return 3.0 * a + kPeerReadSetupUs + 2.0 * (n - 1) / n * r_us;
      break;
    case OpKind::kReduceScatter:
    case OpKind::kAllGather:
      if (algo == Algo::kRing) return (n - 1) * (a + b_us);
      if (algo == Algo::kDirect) return 2.0 * a + kPeerReadSetupUs + (n - 1) * r_us;
      break;
    case OpKind::kBroadcast:
      if (algo == Algo::kRing) return (n - 1) * a + b_us;  // pipelined chain
      if (algo == Algo::kTree) return steps_log * (a + b_us);
      // Every rank reads the root's buffer at once: they share its bandwidth.
      if (algo == Algo::kDirect) {
        return 2.0 * a + kPeerReadSetupUs + std::max(1.0, (n - 1) / 2.0) * r_us;
      }
      break;
    default:
      return (n - 1) * a + b_us;
  }
  return inf;
}

Choice SelectAlgo(OpKind kind, size_t bytes, int nranks, const LinkModel& link,
                  const AlgoFilter& filter) {
  Choice best;
  best.predicted_us = std::numeric_limits<double>::infinity();
  const auto candidates = CandidateAlgos(kind);
  for (Algo algo : candidates) {
    if (!filter.Allows(kind, algo)) continue;
    double t = PredictUs(kind, algo, bytes, nranks, link);
    if (t < best.predicted_us) best = Choice{algo, t, false};
  }
  if (std::isinf(best.predicted_us)) {
    // Nothing allowed is implemented for this collective: use the default.
    for (Algo algo : candidates) {
      double t = PredictUs(kind, algo, bytes, nranks, link);
      if (t < best.predicted_us) best = Choice{algo, t, true};
    }
  }
  return best;
}

}  // namespace loom
