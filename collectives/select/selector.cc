// Selection: the NCCL_ALGO filter, the LOOM_TUNE table, and the alpha-beta
// cost model (per-step links derived from the job topology, one formula per
// collective and algorithm).
#include "collectives/select/selector.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "collectives/patterns/recursive_doubling.h"
#include "collectives/patterns/tree.h"
#include "topology/cost_model.h"

namespace loom {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint64_t kNoEnd = std::numeric_limits<uint64_t>::max();

std::string Lower(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  return out;
}

Result<Algo> ParseAlgo(const std::string& name, const char* knob) {
  if (name == "ring") return Algo::kRing;
  if (name == "tree") return Algo::kTree;
  if (name == "recursivedoubling" || name == "rd") return Algo::kRecursiveDoubling;
  if (name == "pairwise") return Algo::kPairwise;
  if (name == "dissemination") return Algo::kDissemination;
  if (name == "direct") return Algo::kDirect;
  if (name == "hierarchical" || name == "hier") return Algo::kHierarchical;
  if (name == "slots") return Algo::kSlots;
  return InvalidArgument(std::string(knob) + ": unknown algorithm '" + name +
                         "' (known: Ring, Tree, RecursiveDoubling/RD, Direct, Hierarchical/Hier, "
                         "Slots, Pairwise, Dissemination)");
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

constexpr OpKind kNamedKinds[] = {OpKind::kAllReduce, OpKind::kReduceScatter, OpKind::kAllGather,
                                  OpKind::kBroadcast, OpKind::kReduce,        OpKind::kAllToAll,
                                  OpKind::kBarrier,   OpKind::kSendRecv};

// "64k" -> 65536. Digits and an optional k, m or g (powers of 1024).
bool ParseSize(const std::string& text, uint64_t* out) {
  size_t i = 0;
  uint64_t v = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    if (v > (kNoEnd - 9) / 10) return false;
    v = v * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (i == 0) return false;
  int shift = 0;
  if (i + 1 == text.size()) {
    switch (text[i]) {
      case 'k':
        shift = 10;
        break;
      case 'm':
        shift = 20;
        break;
      case 'g':
        shift = 30;
        break;
      default:
        return false;
    }
  } else if (i != text.size()) {
    return false;
  }
  if (shift > 0 && v > (kNoEnd >> shift)) return false;
  *out = v << shift;
  return true;
}

// 65536 -> "64K"; kNoEnd -> "inf".
std::string SizeText(uint64_t v) {
  if (v == kNoEnd) return "inf";
  const char* units[] = {"", "K", "M", "G"};
  int u = 0;
  while (u < 3 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return std::to_string(v) + units[u];
}

double StepUs(const LinkModel& link, double bytes) {
  return link.latency_us + bytes / (link.bandwidth_gbs * 1e3);
}

// The link one round of simultaneous sends runs at: intra-host when no send
// leaves its host; otherwise the inter-host latency, and the host with most
// leaving sends shares its network among them.
LinkModel RoundLink(const topology::JobTopology& job,
                    const std::vector<std::pair<int, int>>& sends) {
  std::vector<int> leaving(job.hosts(), 0);
  int most = 0;
  for (auto [from, to] : sends) {
    const int h = job.host_of_rank[from];
    if (h != job.host_of_rank[to]) most = std::max(most, ++leaving[h]);
  }
  if (most == 0) return job.intra;
  return LinkModel{std::max(job.inter.latency_us, job.intra.latency_us),
                   std::min(job.intra.bandwidth_gbs, job.inter.bandwidth_gbs / most), 0.0};
}

}  // namespace

std::string CollectiveKey(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "allreduce";
    case OpKind::kReduceScatter:
      return "reducescatter";
    case OpKind::kAllGather:
      return "allgather";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kReduce:
      return "reduce";
    case OpKind::kAllToAll:
      return "alltoall";
    case OpKind::kSendRecv:
      return "sendrecv";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kInternal:
      return "internal";
  }
  return "";
}

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
      LOOM_ASSIGN_OR_RETURN(Algo a, ParseAlgo(name, "NCCL_ALGO"));
      rule.algos.push_back(a);
    }
    f.rules_.push_back(std::move(rule));
  }
  return f;
}

bool AlgoFilter::Allows(OpKind kind, Algo algo) const {
  if (rules_.empty()) return true;  // NCCL_ALGO unset: the hot path, no string
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

Result<TuneTable> TuneTable::Parse(std::string_view spec) {
  TuneTable t;
  const std::string s = Lower(spec);
  auto bad = [](const std::string& token, const std::string& why) {
    return InvalidArgument("LOOM_TUNE: '" + token + "': " + why +
                           " (grammar: coll:lo-hi=algo,...;coll:*=algo, e.g. "
                           "allreduce:0-64K=rd,64K-inf=ring;allgather:*=ring)");
  };
  for (const std::string& section : Split(s, ';')) {
    if (section.empty()) continue;
    const size_t colon = section.find(':');
    if (colon == std::string::npos) return bad(section, "expected collective:ranges");
    const std::string coll = section.substr(0, colon);
    const OpKind* kind = std::find_if(std::begin(kNamedKinds), std::end(kNamedKinds),
                                      [&](OpKind k) { return CollectiveKey(k) == coll; });
    if (kind == std::end(kNamedKinds)) {
      return bad(coll,
                 "unknown collective (allreduce, reducescatter, allgather, broadcast, "
                 "reduce, alltoall, barrier, sendrecv)");
    }
    const std::string body = section.substr(colon + 1);
    if (body.empty()) return bad(section, "no ranges");
    for (const std::string& entry : Split(body, ',')) {
      const size_t eq = entry.find('=');
      if (eq == std::string::npos) return bad(entry, "expected range=algorithm");
      const std::string range = entry.substr(0, eq);
      Rule rule{*kind, 0, kNoEnd, Algo::kAuto};
      if (range != "*") {
        const size_t dash = range.find('-');
        if (dash == std::string::npos) return bad(range, "expected lo-hi or *");
        const std::string lo = range.substr(0, dash), hi = range.substr(dash + 1);
        if (!ParseSize(lo, &rule.lo)) return bad(lo, "not a size (digits with K, M or G)");
        if (hi != "inf" && !ParseSize(hi, &rule.hi)) {
          return bad(hi, "not a size (digits with K, M or G, or inf)");
        }
        if (rule.lo >= rule.hi) return bad(range, "empty range (lo must be below hi)");
      }
      LOOM_ASSIGN_OR_RETURN(rule.algo, ParseAlgo(entry.substr(eq + 1), "LOOM_TUNE"));
      const auto cands = CandidateAlgos(*kind);
      if (std::find(cands.begin(), cands.end(), rule.algo) == cands.end()) {
        return bad(entry, std::string(AlgoName(rule.algo)) + " is not an algorithm of " + coll);
      }
      for (const Rule& other : t.rules_) {
        if (other.kind == rule.kind && rule.lo < other.hi && other.lo < rule.hi) {
          return bad(entry,
                     "overlaps " + SizeText(other.lo) + "-" + SizeText(other.hi) + " of " + coll);
        }
      }
      t.rules_.push_back(rule);
    }
  }
  return t;
}

Algo TuneTable::Lookup(OpKind kind, size_t bytes) const {
  for (const Rule& r : rules_) {
    if (r.kind == kind && bytes >= r.lo && bytes < r.hi) return r.algo;
  }
  return Algo::kAuto;
}

std::span<const Algo> CandidateAlgos(OpKind kind) {
  static constexpr Algo kAllReduce[] = {Algo::kRing,   Algo::kRecursiveDoubling, Algo::kTree,
                                        Algo::kDirect, Algo::kHierarchical,      Algo::kSlots};
  static constexpr Algo kBroadcast[] = {Algo::kRing, Algo::kTree, Algo::kDirect, Algo::kSlots};
  static constexpr Algo kReduce[] = {Algo::kTree, Algo::kSlots};
  static constexpr Algo kBlocks[] = {Algo::kRing, Algo::kDirect, Algo::kSlots};
  static constexpr Algo kAllToAll[] = {Algo::kPairwise};
  static constexpr Algo kBarrier[] = {Algo::kDissemination, Algo::kSlots};
  static constexpr Algo kPointToPoint[] = {Algo::kDirect};
  switch (kind) {
    case OpKind::kAllReduce:
      return kAllReduce;
    case OpKind::kBroadcast:
      return kBroadcast;
    case OpKind::kReduce:
      return kReduce;
    case OpKind::kReduceScatter:
    case OpKind::kAllGather:
      return kBlocks;
    case OpKind::kAllToAll:
      return kAllToAll;
    case OpKind::kBarrier:
      return kBarrier;
    case OpKind::kSendRecv:
    case OpKind::kInternal:
      return kPointToPoint;
  }
  return kPointToPoint;
}

CostModel::CostModel() : hier_unavailable_("one rank") {}

CostModel::CostModel(const topology::JobTopology& job, double reduce_gbs, bool small_slots)
    : n_(job.nranks),
      hosts_(job.hosts()),
      per_host_(job.ranks_per_host()),
      intra_(job.intra),
      inter_(job.inter),
      reduce_gbs_(reduce_gbs),
      small_slots_(small_slots && job.hosts() == 1) {
  const int n = n_;
  // Ring in rank order: every rank sends to the next at every step.
  std::vector<std::pair<int, int>> sends;
  for (int r = 0; r < n; ++r) sends.emplace_back(r, (r + 1) % n);
  ring_ = RoundLink(job, sends);

  // Recursive doubling as patterns/recursive_doubling.h schedules it:
  // fold-in, log2 exchanges among the core ranks, fold-out.
  std::vector<patterns::RecursiveDoublingPlan> plans;
  for (int r = 0; r < n; ++r) plans.push_back(patterns::MakeRecursiveDoublingPlan(r, n));
  std::vector<std::pair<int, int>> fold;
  size_t rounds = 0;
  for (int r = 0; r < n; ++r) {
    if (plans[r].role == patterns::RecursiveDoublingPlan::kFoldedOut) {
      fold.emplace_back(r, plans[r].fold_peer);
    }
    rounds = std::max(rounds, plans[r].partners.size());
  }
  if (!fold.empty()) rd_rounds_.push_back(RoundLink(job, fold));
  rd_reducing_rounds_ = rounds + (fold.empty() ? 0 : 1);
  for (size_t k = 0; k < rounds; ++k) {
    sends.clear();
    for (int r = 0; r < n; ++r) {
      if (k < plans[r].partners.size()) sends.emplace_back(r, plans[r].partners[k]);
    }
    rd_rounds_.push_back(RoundLink(job, sends));
  }
  if (!fold.empty()) rd_rounds_.push_back(RoundLink(job, fold));

  // Binomial tree rooted at 0: the children at distance 2^k send at level k.
  std::map<int, std::vector<std::pair<int, int>>> levels;
  for (int r = 1; r < n; ++r) {
    const int parent = patterns::BinomialParent(r, n, 0);
    levels[std::abs(r - parent)].emplace_back(r, parent);
  }
  for (const auto& [distance, edges] : levels) tree_levels_.push_back(RoundLink(job, edges));

  if (hosts_ < 2) {
    hier_unavailable_ = "one host";
  } else if (per_host_ == 0) {
    hier_unavailable_ = "hosts have different numbers of ranks";
  } else if (per_host_ < 2) {
    hier_unavailable_ = "one rank per host";
  }
}

double CostModel::PredictUs(OpKind kind, Algo algo, size_t bytes) const {
  const int n = n_;
  if (n <= 1) return 0;
  const double s = static_cast<double>(bytes);
  // Single-copy reads need every peer in this host's memory.
  const double read_gbs = hosts_ == 1 ? intra_.peer_read_gbs : 0.0;
  const double r_us = read_gbs > 0 ? s / (read_gbs * 1e3) : kInf;
  const double a = ring_.latency_us;
  // Each single-copy read is a system call that pins the peer's pages: a
  // fixed cost per call that only large messages amortise. Reads of a peer
  // to reduce are made in pieces of kPeerReduceChunkBytes, one call each.
  const double read_setup_us = intra_.peer_read_setup_us;
  auto reduce_reads = [](double bytes) {
    return std::max(1.0, std::ceil(bytes / static_cast<double>(kPeerReduceChunkBytes)));
  };
  // Reading what a peer wrote during the call hands its dirty cache lines
  // from its core to ours, as the FIFOs do with every byte: no faster than
  // the FIFOs. Measured reads are of a buffer nobody writes.
  const double fresh_us =
      read_gbs > 0 ? s / (std::min(read_gbs, intra_.bandwidth_gbs) * 1e3) : kInf;
  auto sum_rounds = [&](const std::vector<LinkModel>& rounds) {
    double t = 0;
    for (const LinkModel& l : rounds) t += StepUs(l, s);
    return t;
  };
  // Reducing what arrives is work on this rank that the links do not show.
  // That is what tells recursive doubling (every round reduces the whole
  // buffer) from the ring (each step a block) once latency stops mattering.
  auto reduce_us = [&](double bytes) { return reduce_gbs_ > 0 ? bytes / (reduce_gbs_ * 1e3) : 0.0; };
  if (algo == Algo::kSlots) {
    if (!small_slots_ || !FitsSmallSlots(kind, bytes, n)) return kInf;
    // One cache line pair handed over per peer where a FIFO message hands
    // over a header and its payload: half a message's latency. The slots
    // are read in place, at memcpy's rate rather than the FIFO's.
    const double read_gbs_slots = intra_.bandwidth_gbs / topology::kFifoShareOfMemcpy;
    double read = 0, reduced = 0;  // bytes this rank reads from peers' slots, and reduces
    switch (kind) {
      case OpKind::kBroadcast: read = s; break;
      case OpKind::kAllGather: read = (n - 1) * s; break;
      case OpKind::kAllReduce:
      case OpKind::kReduce:
      case OpKind::kReduceScatter: read = reduced = (n - 1) * s; break;
      default: break;
    }
    return 0.5 * intra_.latency_us + read / (read_gbs_slots * 1e3) + reduce_us(reduced);
  }
  switch (kind) {
    case OpKind::kAllReduce:
      switch (algo) {
        case Algo::kRing:
          return 2.0 * (n - 1) * StepUs(ring_, s / n) + reduce_us((n - 1) * s / n);
        case Algo::kRecursiveDoubling:
          return sum_rounds(rd_rounds_) + reduce_us(static_cast<double>(rd_reducing_rounds_) * s);
        case Algo::kTree:
          return 2.0 * sum_rounds(tree_levels_) +
                 reduce_us(static_cast<double>(tree_levels_.size()) * s);
        // Three synchronisations, then reads of (n-1)/n of the buffer twice
        // (the peers' parts of my block, which I reduce, in pieces, then
        // their final blocks, just written, a read each). Whether it beats
        // the ring depends on the host's read price, which setup measures.
        case Algo::kDirect:
          return 3.0 * a + (n - 1) * (reduce_reads(s / n) + 1) * read_setup_us +
                 (n - 1.0) / n * (r_us + fresh_us) + reduce_us((n - 1.0) / n * s);
        case Algo::kHierarchical: {
          if (!hier_unavailable_.empty()) return kInf;
          // Ring reduce-scatter and all-gather of S/p blocks inside each
          // host; in between a ring all-reduce of S/p among the h ranks of
          // one local index, the p of them sharing their host's network.
          const int p = per_host_, h = hosts_;
          const LinkModel shared{std::max(inter_.latency_us, intra_.latency_us),
                                 std::min(intra_.bandwidth_gbs, inter_.bandwidth_gbs / p), 0.0};
          return 2.0 * (p - 1) * StepUs(intra_, s / p) + 2.0 * (h - 1) * StepUs(shared, s / p / h) +
                 reduce_us((p - 1.0) / p * s + (h - 1.0) / h * s / p);
        }
        default:
          return kInf;
      }
    case OpKind::kReduceScatter:
    case OpKind::kAllGather:
      if (algo == Algo::kRing) return (n - 1) * StepUs(ring_, s);
      if (algo == Algo::kDirect) {
        const double reads = kind == OpKind::kReduceScatter ? reduce_reads(s) : 1.0;
        return 2.0 * a + (n - 1) * reads * read_setup_us + (n - 1) * r_us;
      }
      return kInf;
    case OpKind::kBroadcast:
      if (algo == Algo::kRing) return (n - 1) * a + s / (ring_.bandwidth_gbs * 1e3);  // a chain
      if (algo == Algo::kTree) return sum_rounds(tree_levels_);
      // Every rank reads the root's buffer at once: they share its bandwidth.
      if (algo == Algo::kDirect) {
        return 2.0 * a + read_setup_us + std::max(1.0, (n - 1) / 2.0) * r_us;
      }
      return kInf;
    case OpKind::kReduce:
      return algo == Algo::kTree ? sum_rounds(tree_levels_) : kInf;
    default: {
      const auto cands = CandidateAlgos(kind);
      if (std::find(cands.begin(), cands.end(), algo) == cands.end()) return kInf;
      return (n - 1) * a + s / (ring_.bandwidth_gbs * 1e3);
    }
  }
}

Choice SelectAlgo(OpKind kind, size_t bytes, const CostModel& model, const AlgoFilter& filter,
                  const TuneTable& tune) {
  Choice best;
  best.tuned = tune.Lookup(kind, bytes);
  if (best.tuned != Algo::kAuto) {
    if (!filter.Allows(kind, best.tuned)) {
      best.tune_ignored = Choice::TuneIgnored::kExcludedByAlgo;
    } else {
      const double t = model.PredictUs(kind, best.tuned, bytes);
      if (!std::isinf(t)) {
        best.algo = best.tuned;
        best.predicted_us = t;
        best.source = Choice::Source::kTune;
        return best;
      }
      best.tune_ignored = Choice::TuneIgnored::kUnusable;
    }
  }
  best.predicted_us = kInf;
  const auto candidates = CandidateAlgos(kind);
  for (Algo algo : candidates) {
    if (!filter.Allows(kind, algo)) continue;
    const double t = model.PredictUs(kind, algo, bytes);
    if (t < best.predicted_us) {
      best.algo = algo;
      best.predicted_us = t;
    }
  }
  if (std::isinf(best.predicted_us)) {
    // Nothing allowed runs here: the model's choice among all candidates.
    best.source = Choice::Source::kFallback;
    for (Algo algo : candidates) {
      const double t = model.PredictUs(kind, algo, bytes);
      if (t < best.predicted_us) {
        best.algo = algo;
        best.predicted_us = t;
      }
    }
  }
  // Shareable buffers on every rank make Direct win whatever the model
  // says; asked only where the exchange that finds out pays (algorithms.h).
  best.direct_if_shared = best.source == Choice::Source::kModel && best.algo != Algo::kDirect &&
                          SharedDirectWorthAsking(kind, bytes, model.nranks()) &&
                          filter.Allows(kind, Algo::kDirect) &&
                          std::isfinite(model.PredictUs(kind, Algo::kDirect, bytes));
  return best;
}

std::string DescribeEstimates(OpKind kind, size_t bytes, const CostModel& model) {
  std::string out;
  for (Algo algo : CandidateAlgos(kind)) {
    const double t = model.PredictUs(kind, algo, bytes);
    char buf[64];
    if (std::isinf(t)) {
      std::snprintf(buf, sizeof(buf), "%s%s n/a", out.empty() ? "" : ", ", AlgoName(algo));
    } else {
      std::snprintf(buf, sizeof(buf), "%s%s %.1f us", out.empty() ? "" : ", ", AlgoName(algo), t);
    }
    out += buf;
  }
  return out;
}

std::string SelectionSummary(OpKind kind, const CostModel& model, const AlgoFilter& filter,
                             const TuneTable& tune) {
  struct Run {
    uint64_t lo;
    Algo algo;
    bool tuned;
  };
  std::vector<Run> runs;
  // Sizes 0, 1, 2, 4, ... 4 GiB; each choice holds until the next size.
  for (uint64_t b = 0; b <= (uint64_t{1} << 32); b = b == 0 ? 1 : b * 2) {
    const Choice c = SelectAlgo(kind, b, model, filter, tune);
    const bool tuned = c.source == Choice::Source::kTune;
    if (runs.empty() || runs.back().algo != c.algo || runs.back().tuned != tuned) {
      runs.push_back(Run{b, c.algo, tuned});
    }
  }
  std::string out;
  for (size_t i = 0; i < runs.size(); ++i) {
    const uint64_t hi = i + 1 < runs.size() ? runs[i + 1].lo : kNoEnd;
    if (!out.empty()) out += ", ";
    out += SizeText(runs[i].lo) + "-" + SizeText(hi) + " " + AlgoName(runs[i].algo);
    if (runs[i].tuned) out += " (LOOM_TUNE)";
  }
  return out;
}

}  // namespace loom
