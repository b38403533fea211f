// Hierarchical all-reduce: the schedule as data (HierarchicalSchedule) and
// its execution as gated Transfer lists, one engine run per phase.
#include "collectives/algos/hierarchical.h"

#include <cstring>

#include "collectives/reduce/reduce.h"

namespace loom {

HierGroups MakeHierGroups(const topology::JobTopology& job, int rank) {
  HierGroups g;
  const int host = job.host_of_rank[rank];
  g.local = job.host_ranks[host];
  g.local_pos = job.local_index[rank];
  g.cross_pos = host;
  for (const auto& ranks : job.host_ranks) g.cross.push_back(ranks[g.local_pos]);
  return g;
}

std::vector<std::vector<HierStep>> HierarchicalSchedule(const HierGroups& g, size_t count,
                                                        size_t align) {
  using patterns::Range;
  const int p = static_cast<int>(g.local.size()), h = static_cast<int>(g.cross.size());
  const int i = g.local_pos, j = g.cross_pos;
  auto block = [&](int b) { return patterns::BlockRange(count, p, b, align); };
  const Range mine = block(i);
  auto sub = [&](int b) {
    Range r = patterns::BlockRange(mine.count, h, b, align);
    r.offset += mine.offset;
    return r;
  };
  const int lnext = g.local[patterns::RingNext(i, p)], lprev = g.local[patterns::RingPrev(i, p)];
  const int cnext = g.cross[patterns::RingNext(j, h)], cprev = g.cross[patterns::RingPrev(j, h)];
  std::vector<std::vector<HierStep>> phases;
  using S = HierStep::Source;
  using L = HierStep::Land;
  if (p > 1) {
    // 1. Reduce-scatter inside the host: afterwards this rank holds block i
    //    summed over its host (in the output buffer).
    auto& ph = phases.emplace_back();
    for (int s = 0; s < p - 1; ++s) {
      ph.push_back(HierStep{lnext, block(patterns::RingReduceScatterSendBlock(i, p, s)),
                            s == 0 ? S::kInput : S::kOutput, lprev,
                            block(patterns::RingReduceScatterRecvBlock(i, p, s)),
                            L::kReduceWithInput});
    }
  }
  if (h > 1) {
    // 2. All-reduce of block i among the ranks holding it on every host, a
    //    ring in place in the output buffer: reduce-scatter, all-gather.
    auto& ph = phases.emplace_back();
    for (int s = 0; s < h - 1; ++s) {
      ph.push_back(HierStep{cnext, sub(patterns::RingReduceScatterSendBlock(j, h, s)), S::kOutput,
                            cprev, sub(patterns::RingReduceScatterRecvBlock(j, h, s)),
                            L::kReduceWithOutput});
    }
    for (int s = 0; s < h - 1; ++s) {
      ph.push_back(HierStep{cnext, sub(patterns::RingAllGatherSendBlock(j, h, s)), S::kOutput,
                            cprev, sub(patterns::RingAllGatherRecvBlock(j, h, s)), L::kCopy});
    }
  }
  if (p > 1) {
    // 3. All-gather inside the host: every rank gets every final block.
    auto& ph = phases.emplace_back();
    for (int s = 0; s < p - 1; ++s) {
      ph.push_back(HierStep{lnext, block(patterns::RingAllGatherSendBlock(i, p, s)), S::kOutput,
                            lprev, block(patterns::RingAllGatherRecvBlock(i, p, s)), L::kCopy});
    }
  }
  return phases;
}

Status HierarchicalAllReduce(Engine& engine, const HierGroups& groups, const CollArgs& a,
                             Deadline deadline) {
  const size_t es = SizeOf(a.type);
  const char* in = static_cast<const char*>(a.send);
  char* out = static_cast<char*>(a.recv);
  if (groups.local.size() == 1 && in != out && a.count > 0) std::memmove(out, in, a.count * es);
  std::vector<Transfer> t;
  for (const auto& phase : HierarchicalSchedule(groups, a.count, 64 / es)) {
    t.clear();
    t.reserve(2 * phase.size());  // stable addresses for the gates
    const Transfer* prev_recv = nullptr;
    for (const HierStep& st : phase) {
      Transfer& send = t.emplace_back();
      send.dir = Transfer::Dir::kSend;
      send.peer = st.send_peer;
      send.kind = a.kind;
      send.type = a.type;
      send.bytes = st.send.count * es;
      send.src = (st.source == HierStep::Source::kInput ? in : out) + st.send.offset * es;
      send.gate = prev_recv;
      Transfer& recv = t.emplace_back();
      recv.dir = Transfer::Dir::kRecv;
      recv.peer = st.recv_peer;
      recv.kind = a.kind;
      recv.type = a.type;
      recv.bytes = st.recv.count * es;
      recv.dst = out + st.recv.offset * es;
      if (st.land != HierStep::Land::kCopy) {
        recv.reduce_with =
            (st.land == HierStep::Land::kReduceWithInput ? in : out) + st.recv.offset * es;
        recv.reduce = &ReduceInto;
        recv.op = a.op;
      }
      prev_recv = &recv;
    }
    LOOM_TRY(engine.Run(t, deadline));
  }
  return Status::Ok();
}

}  // namespace loom
