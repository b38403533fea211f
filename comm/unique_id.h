// Internal view of a UniqueId: where the store is and the job secret.
#pragma once

#include <cstdint>
#include <string>

#include "comm/launch_env.h"
#include "loom/loom.hpp"

namespace loom::internal {

struct UniqueIdParts {
  std::string host;  // numeric address of the store
  uint16_t port = 0;
  uint64_t secret = 0;
};

Result<UniqueIdParts> ParseUniqueId(const UniqueId& id);
UniqueId MakeUniqueId(const UniqueIdParts& parts);
// Under a launcher, rank 0's process serves the store at the env's address.
Status HostStoreForEnv(const LaunchEnv& env);
// Starts a store on `bind_host` (numeric), returns the id naming it.
Result<UniqueId> CreateUniqueIdOn(const std::string& bind_host);

}  // namespace loom::internal
