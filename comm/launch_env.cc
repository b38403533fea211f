// ReadLaunchEnv: launcher environment conventions, one table.
#include "comm/launch_env.h"

#include <cstdlib>

#include "topology/host.h"

namespace loom {

namespace {

Result<int> ParseInt(const char* name, const char* value) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < 0 || v > (1 << 24)) {
    return InvalidArgument(std::string(name) + "='" + value + "' is not a valid number");
  }
  return static_cast<int>(v);
}

Status ParseRoot(const std::string& text, const char* from, LaunchEnv* env) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) {
    return InvalidArgument(std::string(from) + "='" + text + "' must be host:port");
  }
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  LOOM_ASSIGN_OR_RETURN(int port, ParseInt(from, text.c_str() + colon + 1));
  if (port == 0 || port > 65535) {
    return InvalidArgument(std::string(from) + "='" + text + "': port out of range");
  }
  env->root_host = host;
  env->root_port = static_cast<uint16_t>(port);
  return Status::Ok();
}

}  // namespace

Result<std::optional<LaunchEnv>> ReadLaunchEnv(
    const std::function<const char*(const char*)>& get) {
  struct Source {
    const char* name;
    const char* rank;
    const char* size;
    const char* local_rank;
  };
  static const Source kSources[] = {
      {"loom", "LOOM_RANK", "LOOM_WORLD_SIZE", "LOOM_LOCAL_RANK"},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
      {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
  };
  for (const Source& s : kSources) {
    const char* r = get(s.rank);
    const char* n = get(s.size);
    if (r == nullptr || n == nullptr) continue;
    LaunchEnv env;
    env.source = s.name;
    LOOM_ASSIGN_OR_RETURN(env.rank, ParseInt(s.rank, r));
    LOOM_ASSIGN_OR_RETURN(env.size, ParseInt(s.size, n));
    if (env.size < 1 || env.rank >= env.size) {
      return InvalidArgument(std::string(s.rank) + "=" + r + " is not below " + s.size + "=" + n);
    }
    if (const char* lr = get(s.local_rank)) {
      LOOM_ASSIGN_OR_RETURN(env.local_rank, ParseInt(s.local_rank, lr));
    }
    if (const char* root = get("LOOM_ROOT")) {
      LOOM_TRY(ParseRoot(root, "LOOM_ROOT", &env));
    } else if (const char* addr = get("MASTER_ADDR"); addr != nullptr && get("MASTER_PORT")) {
      LOOM_ASSIGN_OR_RETURN(int port, ParseInt("MASTER_PORT", get("MASTER_PORT")));
      if (port < 1 || port >= 65535) return InvalidArgument("MASTER_PORT out of range");
      env.root_host = addr;
      env.root_port = static_cast<uint16_t>(port + 1);
    } else if (env.size > 1) {
      return InvalidArgument(std::string("rank ") + r + " of " + n + " comes from " + s.name +
                             "'s environment, but no rendezvous address is set: export "
                             "LOOM_ROOT=host:port (rank 0's host and a free port) or "
                             "MASTER_ADDR/MASTER_PORT on every rank");
    } else {
      env.root_host = "127.0.0.1";
    }
    std::string job;
    for (const char* v : {"LOOM_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid"}) {
      if (const char* j = get(v)) {
        job = std::string(v) + "=" + j;
        break;
      }
    }
    env.secret = HashString(job + "@" + env.root_host + ":" + std::to_string(env.root_port));
    return std::optional<LaunchEnv>(env);
  }
  return std::optional<LaunchEnv>();
}

}  // namespace loom
