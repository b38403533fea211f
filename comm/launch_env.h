// Where rank, size and the rendezvous address come from when the caller
// does not pass them: the environment of the launcher that started us.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "base/status.h"

namespace loom {

struct LaunchEnv {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  std::string root_host;  // rendezvous store address
  uint16_t root_port = 0;
  uint64_t secret = 0;    // derived from the job id and the root address
  std::string source;     // which launcher's variables were used, for messages
};

// Reads, in order: LOOM_RANK/LOOM_WORLD_SIZE/LOOM_ROOT; torchrun's
// RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (loom's store listens on
// MASTER_PORT+1, leaving MASTER_PORT to torch's own store); Open MPI's
// OMPI_COMM_WORLD_RANK/SIZE; Slurm's SLURM_PROCID/SLURM_NTASKS; PMI_RANK/
// PMI_SIZE. Rank/size from MPI, Slurm or PMI still need LOOM_ROOT (or
// MASTER_ADDR/MASTER_PORT) for the address. `getenv` is injectable for tests.
// nullopt when no launcher variables are present at all.
Result<std::optional<LaunchEnv>> ReadLaunchEnv(
    const std::function<const char*(const char*)>& getenv_fn);

}  // namespace loom
