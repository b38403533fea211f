// What one `loom doctor` agent learns about its host (HostFacts), and the
// JSON form agents send to the coordinator. Every check is a pure function
// over a vector of these, so tests build them by hand instead of needing
// hosts, firewalls or InfiniBand.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "comm/fingerprint.h"
#include "topology/json.h"
#include "topology/model.h"
#include "topology/netif.h"
#include "transports/ib/select.h"

namespace loom::doctor {

// One name as this host's resolver answers it: every address getaddrinfo
// gave (numeric, deduplicated, in its order), or the resolver's error.
struct Resolution {
  std::string name;
  std::vector<std::string> addresses;  // empty exactly when error is set
  std::string error;                   // "Name or service not known", ...
};

// How a TCP connect ended. kTimeout is the signature of a firewall that
// DROPs; kRefused of a REJECT with RST or of nothing listening; kUnreachable
// of a missing route or an ICMP unreachable (FAILURE_MODES rows 3 and 4).
enum class ProbeOutcome { kOk, kRefused, kTimeout, kUnreachable, kError };
const char* Name(ProbeOutcome outcome);  // "ok", "refused", "timeout", "unreachable", "error"
Result<ProbeOutcome> ParseProbeOutcome(std::string_view s);

// One connect attempt from the agent that holds it to `address`:`port`.
struct Probe {
  int to_rank = -1;         // -1: the rendezvous address, not a peer agent
  std::string ifname;       // the target's interface that owns `address` ("" for the rendezvous)
  std::string address;      // numeric
  int port = 0;
  ProbeOutcome outcome = ProbeOutcome::kError;
  std::string detail;       // strerror text of the failure
  double ms = 0;            // time to the outcome
};

// A timed stream from the holding agent to `to_rank` (check 6).
struct Stream {
  int to_rank = -1;
  std::string ifname;       // the sender's interface the traffic leaves on
  std::string to_ifname;    // the receiver's interface it arrives on ("" when unknown)
  int64_t bytes = 0;        // counted by the receiver
  double seconds = 0;       // first byte sent to the receiver's acknowledgement
  std::string error;        // set when the stream failed; bytes/seconds then mean nothing
  double Gbps() const { return seconds > 0 ? static_cast<double>(bytes) * 8 / seconds / 1e9 : 0; }
};

// Process limits as the launched process sees them (check 8).
inline constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();
struct Limits {
  int64_t shm_bytes = -1;      // size of the /dev/shm file system; -1 unknown
  int64_t memlock_bytes = -1;  // RLIMIT_MEMLOCK soft limit; kUnlimited; -1 unknown
  int64_t nofile = -1;         // RLIMIT_NOFILE soft limit; kUnlimited; -1 unknown
};

// Where one GPU or RDMA NIC sits on the PCI bus, as sysfs shows it (check 9).
struct PciFacts {
  std::vector<std::string> bridges;       // upstream bridges, root port first
  std::vector<std::string> acs_redirect;  // those of `bridges` whose ACS redirects peer traffic upstream
  std::string iommu;                      // its IOMMU group's domain type ("identity", "DMA", "DMA-FQ"); "" none
};

// Everything one agent reports. A plain value. Fields marked "after the
// exchange" are empty until the agent has heard of its peers.
struct HostFacts {
  int rank = 0;
  std::string label;       // how reports name this host: LOOM_HOSTID / NCCL_HOSTID, else hostname
  std::string hostname;    // gethostname
  std::string host_id;     // HostIdentity(): equal <=> same host, shared /dev/shm
  std::string root;        // the rendezvous "host:port" this agent was given; "" when none
  int probe_port = 0;      // where this agent accepts probes and streams
  std::vector<NetInterface> interfaces;
  std::map<std::string, std::string> env;  // NCCL_*, LOOM_*, UCX_* as this process sees them
  Fingerprint fingerprint;                 // LocalFingerprint(): must match everywhere
  std::vector<Resolution> resolutions;     // hostfile entries, own hostname, rendezvous host
  Limits limits;
  bool gdr_module = false;       // nvidia_peermem / nv_peer_mem loaded
  std::string no_rdma_reason;    // why verbs found nothing ("" when it found devices)
  std::optional<topology::Topology> topology;  // NICs (verbs merged) and GPUs of this host
  std::vector<ib::PortInfo> rdma_ports;        // verbs discovery with GID tables (empty without verbs)
  std::map<std::string, PciFacts> pci;         // by bus id: GPUs and RDMA NICs of `topology`
  std::vector<Probe> probes;     // after the exchange: to every peer candidate and the rendezvous
  std::vector<Stream> streams;   // after the exchange: timed streams sent by this agent

  // The value this process saw for `name` ("" when unset).
  std::string Env(const std::string& name) const;
  // A parameter as params.h reads it: LOOM_<name> first, then NCCL_<name>.
  std::string Param(const std::string& name) const;
};

json::Value ToJson(const HostFacts& f);
// InvalidArgument naming the member when `v` is not what ToJson writes.
Result<HostFacts> FactsFromJson(const json::Value& v);

// A NetInterface from the fields reports carry (name, "addr/len", flags):
// a link-local scope is dropped, since the scope's index means nothing on
// another host.
json::Value ToJson(const NetInterface& i);
Result<NetInterface> InterfaceFromJson(const json::Value& v);

}  // namespace loom::doctor
