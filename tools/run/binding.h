// `loom run --bind-to`: grouping the CPUs this process may use into cores and
// NUMA nodes and placing each rank on them. Pure functions apart from AllowedCpus/CoreCpusList,
// which read this process's affinity and sysfs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom::tools {

// --bind-to. kAuto (the default) binds as mpirun does by default: a core per
// rank when the ranks fit the cores, else the CPUs of a NUMA node per rank
// (ranks in blocks, so neighbours share a node) where there are several,
// else none. kCore insists on a core per rank; kNone leaves ranks unbound.
enum class BindTo { kAuto, kCore, kNone };

// The CPUs this process may run on (sched_getaffinity), ascending; empty
// when the call fails.
std::vector<int> AllowedCpus();

// A CPU's core as sysfs names it ("0-1" for two hardware threads); "cpuN"
// where sysfs says nothing (then every CPU counts as a core).
std::string CoreCpusList(int cpu);

// A CPU's NUMA node as sysfs names it ("node1"); "node0" where sysfs says nothing.
std::string NumaNodeOf(int cpu);

// The CPUs of `allowed` (this process's affinity) grouped by `key_of(cpu)`,
// in the order of each group's first CPU: cores with CoreCpusList, NUMA
// nodes with NumaNodeOf.
std::vector<std::vector<int>> GroupCpus(const std::vector<int>& allowed,
                                        const std::function<std::string(int)>& key_of);

// Where each rank runs: its CPUs (empty: not bound), and one line for the
// user when the choice is not the plain core per rank (empty otherwise).
struct Placement {
  std::vector<std::vector<int>> cpus;
  std::string note;
};

// The placement of `num_ranks` ranks on `cores` and `numa_nodes` (each a
// list of CPUs, from GroupCpus). kCore with fewer cores than ranks is an
// error naming both counts.
Result<Placement> Bindings(BindTo bind_to, int num_ranks, const std::vector<std::vector<int>>& cores,
                           const std::vector<std::vector<int>>& numa_nodes);

// "0-3,8" for {0,1,2,3,8}: the cpulist form of a sorted list of CPUs.
std::string CpuListString(const std::vector<int>& cpus);

}  // namespace loom::tools
