// `loom run --bind-to`: which CPUs this process may use, how they group into
// cores, and which core each rank gets.
#include "tools/run/binding.h"

#include <sched.h>

#include <cstdio>

namespace loom::tools {

std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

std::string CoreCpusList(int cpu) {
  const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
  for (const char* name : {"core_cpus_list", "thread_siblings_list"}) {
    std::FILE* f = std::fopen((dir + name).c_str(), "r");
    if (f == nullptr) continue;
    char line[256] = {};
    const bool got = std::fgets(line, sizeof line, f) != nullptr;
    std::fclose(f);
    if (got) return line;
  }
  return "cpu" + std::to_string(cpu);
}

std::vector<std::vector<int>> CoresOf(const std::vector<int>& allowed,
                                      const std::function<std::string(int)>& core_of) {
  std::vector<std::vector<int>> cores;
  std::vector<std::string> keys;
  for (int cpu : allowed) {
    const std::string key = core_of(cpu);
    size_t i = 0;
    while (i < keys.size() && keys[i] != key) ++i;
    if (i == keys.size()) {
      keys.push_back(key);
      cores.emplace_back();
    }
    cores[i].push_back(cpu);
  }
  return cores;
}

Result<std::vector<std::vector<int>>> Bindings(BindTo bind_to, int num_ranks,
                                               const std::vector<std::vector<int>>& cores) {
  const auto ranks = static_cast<size_t>(num_ranks);
  std::vector<std::vector<int>> out(ranks);
  if (bind_to == BindTo::kNone) return out;
  if (cores.size() < ranks) {
    return InvalidArgument("--bind-to core: " + std::to_string(num_ranks) + " ranks but only " +
                           std::to_string(cores.size()) +
                           " cores allowed here (use --bind-to none to oversubscribe)");
  }
  for (size_t r = 0; r < ranks; ++r) out[r] = cores[r];
  return out;
}

}  // namespace loom::tools
