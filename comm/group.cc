// GroupStart/GroupEnd: collect per communicator, issue each batch as one
// operation at the outermost GroupEnd, wait for all.
#include "comm/group.h"

#include <map>
#include <vector>

#include "comm/communicator_impl.h"

namespace loom {

namespace {
struct GroupState {
  int depth = 0;
  // Insertion order matters (issue order per communicator), hence a vector.
  std::vector<std::pair<Communicator::Impl*, std::vector<CollArgs>>> batches;
};
thread_local GroupState g_group;
}  // namespace

int GroupDepth() { return g_group.depth; }

void GroupAdd(Communicator::Impl* comm, const CollArgs& args) {
  for (auto& [c, items] : g_group.batches) {
    if (c == comm) {
      items.push_back(args);
      return;
    }
  }
  g_group.batches.push_back({comm, {args}});
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
  std::vector<Work> works;
  for (auto& [comm, items] : batches) works.push_back(comm->Submit(std::move(items)));
  Status first;
  for (const Work& w : works) {
    Status s = w.Wait();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

}  // namespace loom
