// GroupStart/GroupEnd: collect per communicator, issue each batch as one
// operation at the outermost GroupEnd, wait for all (but batches of device
// operations only, which are stream-ordered). A single communicator's host
// batch runs on the caller's thread, as a blocking call does.
#include "comm/group.h"

#include <algorithm>
#include <map>
#include <vector>

#include "comm/communicator_impl.h"

namespace loom {

namespace {
struct GroupState {
  int depth = 0;
  struct Batch {
    Communicator::Impl* comm;
    std::vector<CollArgs> items;
    std::vector<Placement> where;  // per item
  };
  // Insertion order matters (issue order per communicator), hence a vector.
  std::vector<Batch> batches;
};
thread_local GroupState g_group;
}  // namespace

int GroupDepth() { return g_group.depth; }

void GroupAdd(Communicator::Impl* comm, const CollArgs& args, Placement where) {
  for (auto& b : g_group.batches) {
    if (b.comm == comm) {
      b.items.push_back(args);
      b.where.push_back(where);
      return;
    }
  }
  g_group.batches.push_back({comm, {args}, {where}});
}

Status GroupStart() {
  ++g_group.depth;
  return Status::Ok();
}

Status GroupEnd() {
  if (g_group.depth == 0) return InvalidUsage("GroupEnd without a matching GroupStart");
  if (--g_group.depth > 0) return Status::Ok();
  auto batches = std::move(g_group.batches);
  g_group.batches.clear();
  const auto on_host = [](const GroupState::Batch& b) {
    return std::none_of(b.where.begin(), b.where.end(),
                        [](const Placement& p) { return p.device; });
  };
  // One communicator's host batch runs on this thread, as a blocking call
  // does: no hand-off to its worker and back (a 2-rank Send/Recv exchange
  // of 8 B took two). Batches of several communicators still go to their
  // workers, which run them side by side: run here one after another, a
  // rank that listed them in another order than its peers would deadlock.
  if (batches.size() == 1 && on_host(batches.front())) {
    return batches.front().comm->RunBlocking(batches.front().items);
  }
  std::vector<Work> works;
  for (auto& b : batches) {
    // A batch of device operations only is stream-ordered (NCCL): GroupEnd
    // returns once it is enqueued, reporting only a failure to enqueue.
    const bool on_streams =
        std::all_of(b.where.begin(), b.where.end(), [](const Placement& p) { return p.device; });
    Work w = b.comm->SubmitGroup(std::move(b.items), b.where);
    if (!on_streams || w.Test()) works.push_back(w);
  }
  Status first;
  for (const Work& w : works) {
    Status s = w.Wait();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

}  // namespace loom
