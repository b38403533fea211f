// `loom run --bind-to`: grouping the CPUs this process may use into cores and
// giving each rank one. Pure functions apart from AllowedCpus/CoreCpusList,
// which read this process's affinity and sysfs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom::tools {

// --bind-to, as mpirun spells it: a core per rank, or no binding (the default:
// bound, a rank's communicator thread shares its core, which made the
// non-blocking 2-rank 32 KiB all-gather 3-5x slower; docs/TOOLS.md).
enum class BindTo { kNone, kCore };

// The CPUs this process may run on (sched_getaffinity), ascending; empty
// when the call fails.
std::vector<int> AllowedCpus();

// A CPU's core as sysfs names it ("0-1" for two hardware threads); "cpuN"
// where sysfs says nothing (then every CPU counts as a core).
std::string CoreCpusList(int cpu);

// The CPUs of each core in `allowed` (this process's affinity), in the order
// of their first CPU; `core_of(cpu)` names a CPU's core (sysfs
// core_cpus_list in Launch; any key that is equal for CPUs of one core).
std::vector<std::vector<int>> CoresOf(const std::vector<int>& allowed,
                                      const std::function<std::string(int)>& core_of);

// The CPUs each rank is bound to (empty: not bound): with kCore rank r gets
// core r, and fewer cores than ranks is an error naming both counts.
Result<std::vector<std::vector<int>>> Bindings(BindTo bind_to, int num_ranks,
                                               const std::vector<std::vector<int>>& cores);

}  // namespace loom::tools
