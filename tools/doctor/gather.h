// Gathering this host's facts for the doctor: hostfile parsing, name
// resolution, interfaces, limits, environment, fingerprint and topology.
// Everything here reads the live system (except ParseHostfile and
// RelevantEnv); the checks that judge the result are in checks.h.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tools/doctor/facts.h"

namespace loom::doctor {

// The host names of a hostfile in the formats launchers use: Open MPI and
// DeepSpeed ("node1 slots=8"), MPICH/Hydra ("node1:8"), Slurm-style plain
// lists. '#' starts a comment; blank lines are skipped; a bracketed IPv6
// address "[fd00::1]:8" keeps the address. Duplicates are dropped, order
// kept. InvalidArgument naming the line for an entry that is not a host
// ("slots=8" alone). Pure.
Result<std::vector<std::string>> ParseHostfile(std::string_view text);

// Resolves `name` with getaddrinfo (TCP, any family): every distinct
// numeric address, in the resolver's order, or the resolver's error text.
// Blocks on the resolver.
Resolution ResolveName(const std::string& name);

// The NCCL_*, LOOM_* and UCX_* variables of `vars` (like environ: a null-terminated
// array of "K=V"), with empty values dropped (params.h treats empty as unset).
std::map<std::string, std::string> RelevantEnv(char** vars);

// /dev/shm size (statvfs of `shm_path`), RLIMIT_MEMLOCK and RLIMIT_NOFILE of
// this process. Unknown fields stay -1. Does not block.
Limits ReadLimits(const char* shm_path = "/dev/shm");

// Whether a PCI bridge's configuration space (`config`, as read from sysfs)
// has PCIe Access Control Services redirecting peer-to-peer traffic: ACS P2P
// Request Redirect, Completion Redirect or Egress Control enabled, which
// sends GPU<->GPU and GPU<->NIC traffic up to the root complex (FAILURE_MODES
// row 10). false when the bridge has no ACS capability; nullopt when `config`
// stops before the extended space (an unprivileged read gets 64 bytes) or a
// capability pointer runs off its end. Pure.
std::optional<bool> AcsRedirects(std::string_view config);

// Where the PCI function `bus_id` ("0000:3b:00.0") sits under `sysfs_root`
// (/sys/bus/pci/devices): its upstream bridges from its sysfs path, those
// whose ACS redirects (bridges whose config cannot be read are left out of
// acs_redirect), and its IOMMU group's domain type. Unknown parts stay
// empty. Reads files; does not block beyond that.
PciFacts ReadPciFacts(const std::string& bus_id, const std::string& sysfs_root = "/sys/bus/pci/devices");

struct GatherOptions {
  int rank = 0;
  std::string root;                // rendezvous "host:port"; "" when there is none
  std::vector<std::string> names;  // hostfile entries to resolve (the root host is added)
  int probe_port = 0;
};

// This host's facts (probes and streams empty). Never fails: a source that
// cannot be read leaves its part empty or unknown, so the checks can say so.
// Blocks for the resolver and topology discovery (tens of milliseconds,
// longer if DNS is slow).
HostFacts GatherLocalFacts(const GatherOptions& opt);

}  // namespace loom::doctor
