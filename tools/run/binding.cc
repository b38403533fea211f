// `loom run --bind-to`: which CPUs this process may use, how they group into
// cores and NUMA nodes, and where each rank runs.
#include "tools/run/binding.h"

#include <sched.h>

#include <cstdio>
#include <filesystem>
#include <system_error>

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

std::string NumaNodeOf(int cpu) {
  const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 4 && name.starts_with("node") &&
        name.find_first_not_of("0123456789", 4) == std::string::npos) {
      return name;
    }
  }
  return "node0";
}

std::vector<std::vector<int>> GroupCpus(const std::vector<int>& allowed,
                                        const std::function<std::string(int)>& key_of) {
  std::vector<std::vector<int>> groups;
  std::vector<std::string> keys;
  for (int cpu : allowed) {
    const std::string key = key_of(cpu);
    size_t i = 0;
    while (i < keys.size() && keys[i] != key) ++i;
    if (i == keys.size()) {
      keys.push_back(key);
      groups.emplace_back();
    }
    groups[i].push_back(cpu);
  }
  return groups;
}

Result<Placement> Bindings(BindTo bind_to, int num_ranks, const std::vector<std::vector<int>>& cores,
                           const std::vector<std::vector<int>>& numa_nodes) {
  const auto ranks = static_cast<size_t>(num_ranks);
  Placement out;
  out.cpus.resize(ranks);
  if (bind_to == BindTo::kNone) return out;
  if (cores.size() >= ranks) {
    for (size_t r = 0; r < ranks; ++r) out.cpus[r] = cores[r];
    return out;
  }
  const std::string counts =
      std::to_string(num_ranks) + " ranks but only " + std::to_string(cores.size()) + " cores";
  if (bind_to == BindTo::kCore) {
    return InvalidArgument("--bind-to core: " + counts +
                           " allowed here (use --bind-to none to oversubscribe)");
  }
  // Oversubscribed: the runtime sees more ranks than cores and yields while it waits.
  if (numa_nodes.size() > 1) {
    for (size_t r = 0; r < ranks; ++r) out.cpus[r] = numa_nodes[r * numa_nodes.size() / ranks];
    out.note = counts + ": each rank runs on one of the " + std::to_string(numa_nodes.size()) +
               " NUMA nodes' CPUs, and waits yield the core";
  } else {
    out.note = counts + ": ranks are not bound, and waits yield the core";
  }
  return out;
}

std::string CpuListString(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace loom::tools
