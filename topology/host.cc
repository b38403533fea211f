// Hostname, host identity (hostname + boot id, overridable) and FNV-1a.
#include "topology/host.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <fstream>

namespace loom {

std::string Hostname() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

std::string HostIdentity() {
  for (const char* var : {"LOOM_HOSTID", "NCCL_HOSTID"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return v;
  }
  std::string id = Hostname();
  // The boot id changes on each boot and differs between machines that share
  // a hostname (cloned images, "localhost"); it is the same inside containers
  // on one kernel, which is what shared memory needs.
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (f >> boot_id) {
    id += '/';
    id += boot_id;
  }
  return id;
}

uint64_t HashString(std::string_view s) {
  constexpr uint64_t kOffsetBasis = 14695981039346656037ull;
  constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t h = kOffsetBasis;
  for (unsigned char c : s) {
    h ^= c;
    h *= kPrime;
  }
  return h;
}

}  // namespace loom
