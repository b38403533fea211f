// Thread-local group state behind GroupStart/GroupEnd (NCCL semantics).
#pragma once

#include "collectives/algos/algorithms.h"
#include "comm/device_path.h"
#include "loom/loom.hpp"

namespace loom {

int GroupDepth();
// Records an operation for `comm` in the innermost open group of this thread;
// `where` says whether it is a stream-ordered device operation.
void GroupAdd(Communicator::Impl* comm, const CollArgs& args, Placement where = {});

}  // namespace loom
