// Exchange: the all-gather/barrier service that connection setup needs from
// the bootstrap, as an interface so transports never depend on the bootstrap.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace loom {

class Exchange {
 public:
  virtual ~Exchange() = default;
  // Collective over the communicator's ranks: every rank contributes `mine`
  // under `tag` (unique per use) and gets every rank's value, indexed by rank.
  // Blocks until all ranks contributed or the deadline passes.
  virtual Result<std::vector<std::string>> AllGather(std::string_view tag, std::string mine,
                                                     Deadline deadline) = 0;
  Status Barrier(std::string_view tag, Deadline deadline) {
    return AllGather(tag, std::string(), deadline).status();
  }
};

}  // namespace loom
