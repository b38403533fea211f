// The doctor's checks: pure functions from the facts every agent gathered
// (facts.h) to findings (report.h). Nothing here touches the network, the
// file system or the environment, so every verdict is unit-tested with
// hand-built facts. Each check returns at least one finding: a PASS line
// with the evidence when nothing is wrong.
//
// `hosts` holds one HostFacts per agent that reported, in rank order; ranks
// that never reported are simply absent. A single entry is a one-host run,
// where loopback and virtual interfaces are fine (unless
// CheckOptions::multi_host says otherwise).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tools/doctor/facts.h"
#include "tools/doctor/report.h"

namespace loom::doctor {

struct CheckOptions {
  double expect_gbps = 0;  // --expect: the rate a link should reach; 0 = from sysfs when known
  // The job spans several hosts even when fewer agents report (a hostfile
  // checked from one host): loopback answers and picks are then wrong.
  bool multi_host = false;
};

// ---- helpers shared by the checks (and the agent, to decide what to probe) ----

// Whether the agents run on more than one host (distinct host_id).
bool MultiHost(const std::vector<HostFacts>& hosts);

// The interface the socket transport would pick on this host: NCCL's rules
// (topology/socket_ifname.h) over f.interfaces with the NCCL_SOCKET_IFNAME /
// NCCL_SOCKET_FAMILY this agent saw and the rendezvous address as it
// resolved there. The error is the runtime's own message.
Result<NetInterface> SelectedInterface(const HostFacts& f);

// The data NICs of a host, best first: the interfaces NCCL's rules would
// use for sockets (NCCL_SOCKET_IFNAME may name several; the first is
// SelectedInterface's) and the netdevs of its RDMA NICs; up, routable and,
// in a multi-host job, not host-private. Check 6 streams over each when a
// host has more than one.
std::vector<NetInterface> DataNics(const HostFacts& f, bool multi_host);

// The interface of `peer` on the same subnet as `nic` (one of its data NICs
// first), if it has one: where a stream leaving on `nic` arrives.
std::optional<NetInterface> PeerNicOnSubnet(const HostFacts& peer, const NetInterface& nic, bool multi_host);

// Names a multi-host job should not use: loopback, container bridges and
// virtual links (lo*, docker*, virbr*, br-*, veth*, cni*, flannel*, cali*,
// vxlan*, tun*, tap*).
bool IsHostPrivateName(const std::string& ifname);

// The exact NCCL_SOCKET_IFNAME value ("=data0") naming an interface that is
// up on every host with addresses on one shared subnet; the name most hosts
// already pick wins, then the fastest. "" when no name qualifies.
std::string SuggestIfname(const std::vector<HostFacts>& hosts);

// The addresses worth probing on a host: up, not loopback (unless the job
// is on one host), not IPv6 link-local.
std::vector<NetInterface> ProbeCandidates(const HostFacts& f, bool multi_host);

// ---- the checks, numbered as in docs/DOCTOR.md ----

// 1. Every name in f.resolutions on every host: unresolvable, loopback in a
// multi-host job (the "127.0.1.1 hostname" trap), different answers.
std::vector<Finding> CheckNames(const std::vector<HostFacts>& hosts, const CheckOptions& opt);
// 2. Interface selection per host: no match, filter typos, loopback/virtual
// or link-local picks in a multi-host job, a subnet no peer is on, different
// choices on different hosts.
std::vector<Finding> CheckInterfaces(const std::vector<HostFacts>& hosts, const CheckOptions& opt);
// 3. N x N probes and the rendezvous: refused vs dropped vs unreachable,
// with the port, on the interface the runtime would use.
std::vector<Finding> CheckReachability(const std::vector<HostFacts>& hosts);
// 4. Fingerprint and NCCL_/LOOM_/UCX_ environment: the odd host out.
std::vector<Finding> CheckFingerprint(const std::vector<HostFacts>& hosts);
// 5. RDMA fabric from verbs discovery (or the NICs in each topology):
// present, port state, link layer; across hosts the GID each port would use
// (NCCL_IB_GID_INDEX and the runtime's ib::ChooseGid): a subnet no other
// host has, rails in another order, RoCE version and GID index differences.
std::vector<Finding> CheckFabric(const std::vector<HostFacts>& hosts);
// 6. Timed streams (one per data NIC per ordered host pair) against --expect
// or the slower end's sysfs link speed; names the host and NIC whose every
// stream is slow, else the pair.
std::vector<Finding> CheckBandwidth(const std::vector<HostFacts>& hosts, const CheckOptions& opt);
// 7. MTU mismatch within a subnet across hosts; overlapping subnets on one host.
std::vector<Finding> CheckMtuAndRoutes(const std::vector<HostFacts>& hosts);
// 8. /dev/shm size, memlock, open files.
std::vector<Finding> CheckLimits(const std::vector<HostFacts>& hosts);
// 9. GPU pairs across the SMP link, NICs far from GPUs, GPUDirect RDMA
// module, PCIe ACS redirecting peer traffic on bridges between GPUs or a GPU
// and its NIC, an IOMMU translating GPU DMA (HostFacts::pci).
std::vector<Finding> CheckGpu(const std::vector<HostFacts>& hosts);
// 10. The transport loom would use for each pair of agents, decided by the
// runtime's own rule (comm/transport_plan.h PlanLink) over the records the
// runtime would publish; its fallback warnings and errors, and the knob that
// governs each link.
std::vector<Finding> CheckTransportPlan(const std::vector<HostFacts>& hosts);

// All of the above, in check order. Checks whose facts were not gathered
// (no probes or streams in a local run) are left out.
std::vector<Finding> RunAllChecks(const std::vector<HostFacts>& hosts, const CheckOptions& opt);

}  // namespace loom::doctor
