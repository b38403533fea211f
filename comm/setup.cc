// Communicator setup (Create as a list of named steps): store registration,
// fingerprint check, transport choice per peer, connections, worker start; and Split.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "base/log.h"
#include "base/params.h"
#include "comm/bootstrap/wire.h"
#include "comm/communicator_impl.h"
#include "comm/fingerprint.h"
#include "comm/shm_calibration.h"
#include "comm/transport_plan.h"
#include "comm/unique_id.h"
#include "comm/wait_diagnosis.h"
#include "topology/cost_model.h"
#include "topology/discover.h"
#include "topology/host.h"
#include "topology/inet_address.h"
#include "topology/job.h"
#include "topology/netif.h"
#include "topology/socket_ifname.h"
#include "transports/ib/context.h"
#include "transports/ib/verbs.h"
#if defined(LOOM_HAVE_UCX)
#include "transports/ucx/context.h"
#endif

namespace loom {

namespace {

// What each rank tells the others before connecting.
struct PeerInfo {
  std::string fingerprint;
  std::string host_id;  // equal <=> same host and /dev/shm
  std::string hostname;
  int pid = 0;
  std::string tcp_address;  // "" when this rank has no usable interface
  uint64_t read_probe = 0;  // address of ReadProbeRegion() here, for the single-copy probe
  std::string transports;   // EncodeTransportRecord: what this rank can use, its knobs
  std::string ucx_address;  // UCP worker address (binary); "" without a UCX context
  int64_t nic_mbps = -1;    // speed of the socket interface; -1 unknown (topology/job.h)
  std::string gpu;          // DeviceIpc::LocalRecord: "" without a device
};

std::string Encode(const PeerInfo& p) {
  bootstrap::Writer w;
  w.Str(p.fingerprint);
  w.Str(p.host_id);
  w.Str(p.hostname);
  w.I32(p.pid);
  w.Str(p.tcp_address);
  w.U64(p.read_probe);
  w.Str(p.transports);
  w.Str(p.ucx_address);
  w.U64(static_cast<uint64_t>(p.nic_mbps));
  w.Str(p.gpu);
  std::string frame = w.Frame(bootstrap::MsgType::kAllGather);
  return frame.substr(8);  // payload only
}

Result<PeerInfo> Decode(const std::string& s, int rank) {
  bootstrap::Reader r(s);
  PeerInfo p;
  p.fingerprint = r.Str();
  p.host_id = r.Str();
  p.hostname = r.Str();
  p.pid = r.I32();
  p.tcp_address = r.Str();
  p.read_probe = r.U64();
  p.transports = r.Str();
  p.ucx_address = r.Str();
  p.nic_mbps = static_cast<int64_t>(r.U64());
  p.gpu = r.Str();
  if (r.failed()) return InternalError("malformed setup record from rank " + std::to_string(rank));
  return p;
}

// IB as this host offers it: what discovery finds and NCCL_IB_HCA keeps,
// used only when asked for by name while the IB path is unproven
// (GateUnprovenIb); `port` receives the first selected active port (the one
// IbContext uses).
Availability IbAvailability(ib::PortInfo* port, const TransportKnobs& knobs) {
  if (knobs.ib_disable) return Availability::Absent(kIbDisabledReason);
  return GateUnprovenIb(IbAvailabilityOf(ib::DiscoverPorts(), params::kIbHca.Get(), port), knobs);
}

// IbContext options from NCCL_IB_GID_INDEX/TIMEOUT/RETRY_CNT; RoCE prefers
// the GID on the socket interface's IPv4 subnet (`socket_if`, may be null).
ib::IbOptions IbOptionsFromParams(const ib::PortInfo& port, const NetInterface* socket_if) {
  ib::IbOptions o;
  o.port = port;
  o.gid_index = static_cast<int>(params::kIbGidIndex.Get());
  o.knobs.timeout = static_cast<int>(params::kIbTimeout.Get());
  o.knobs.retry_cnt = static_cast<int>(params::kIbRetryCnt.Get());
  if (socket_if != nullptr && socket_if->family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(socket_if->sockaddr_ptr());
    o.subnet = ib::Ipv4Subnet{ntohl(in->sin_addr.s_addr), socket_if->prefix_len};
  }
  return o;
}

// GPUDirect RDMA on this rank's IB port (transports/ib/gdr.h): what this
// process can tell about its GPU, the NIC and the machine, decided by
// NCCL's rules and logged. Without device ops nothing is decided or
// logged; a bad NCCL_NET_GDR_LEVEL stages device buffers, with a WARN.
// Sets o->gdr, and o->device_allocation when GPUDirect RDMA is on.
void DecideGdr(cuda::DeviceOps* ops, ib::IbOptions* o) {
  if (ops == nullptr) return;
  const ib::PortInfo& port = o->port;
  Result<int> device = ops->CurrentDevice();
  Result<std::string> bus = ops->CurrentBusId();
  if (!device.ok() || !bus.ok()) return;
  ib::GdrFacts f;
  f.gpu = true;
  f.gpu_index = device.value();
  f.nic = port.device;
  if (Result<topology::Topology> topo = topology::LocalTopology(); topo.ok()) {
    const int gpu = topo->FindBusId(bus.value());
    int nic = topo->Find(port.device + ":" + std::to_string(port.port));
    if (nic < 0) nic = topo->Find(port.device);
    if (gpu >= 0 && nic >= 0) {
      f.path_known = true;
      f.path = topology::ClassifyPath(*topo, gpu, nic).type;
    }
  }
  f.level = params::kNetGdrLevel.Get();
  f.read = params::kNetGdrRead.Get();
  f.dmabuf_enable = params::kDmabufEnable.Get();
  f.verbs_dmabuf = ib::VerbsHasDmaBuf();
  Result<bool> dmabuf = ops->DmaBufSupported();
  f.cuda_dmabuf = dmabuf.ok() && dmabuf.value();
  f.peermem = ib::PeerMemLoaded();
  Result<bool> visible = ops->RdmaWritesVisible();
  f.writes_visible = visible.ok() && visible.value();
  Result<ib::GdrChoice> c = ib::DecideGdr(f);
  if (!c.ok()) {
    LOOM_WARN(log::kInit | log::kNet, "%s: device buffers are staged through host memory",
              c.status().message().c_str());
    return;
  }
  LOOM_INFO(log::kInit | log::kNet, "NET/IB : %s", c->line.c_str());
  o->gdr = c.value();
  if (o->gdr.way == ib::GdrWay::kNone) return;
  o->device_allocation = [ops](const void* ptr, bool dmabuf) -> Result<ib::DeviceAllocation> {
    LOOM_ASSIGN_OR_RETURN(const cuda::DeviceOps::Allocation a, ops->AllocationOf(ptr, dmabuf));
    return ib::DeviceAllocation{a.base, a.bytes, a.dmabuf_fd};
  };
}

// Whether NCCL_NET or LOOM_REQUIRE_TRANSPORT asks for UCX: only then is a
// UCP worker created (rule 4 never picks UCX, so nobody else pays for it).
bool UcxRequested() {
  auto names_ucx = [](const std::string& v, bool allow_shm) {
    auto k = ParseTransportName(v, "", allow_shm);
    return k.ok() && *k == TransportKind::kUcx;
  };
  return names_ucx(params::kNet.Get(), false) || names_ucx(params::kRequireTransport.Get(), true);
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The cost model's price of a link of `kind` (topology/cost_model.h).
topology::LinkCost LinkCostOf(TransportKind kind, const topology::PeerReadPrice& reads,
                              bool same_host = false) {
  using topology::RankLink;
  switch (kind) {
    case TransportKind::kShm: return RuntimeLinkCost(RankLink::kSharedMemory, reads);
    case TransportKind::kIb: return RuntimeLinkCost(RankLink::kInfiniBand, reads);
    case TransportKind::kSocket:
      return RuntimeLinkCost(same_host ? RankLink::kSocketSameHost : RankLink::kSocket, reads);
    case TransportKind::kUcx: return RuntimeLinkCost(RankLink::kUcx, reads);
  }
  return RuntimeLinkCost(RankLink::kSocket, reads);
}

// The job-wide topology, computed alike on every rank from the all-gathered
// records: each rank's intra link is its plan to the next rank of its host,
// its inter link its plan to the first rank of the next host.
Result<topology::JobTopology> FuseJob(const std::vector<PeerInfo>& peers,
                                      const std::vector<TransportRecord>& transports,
                                      const topology::PeerReadPrice& single_copy) {
  const int n = static_cast<int>(peers.size());
  auto cost = [&](int a, int b) {
    auto link = PlanLink(transports, a, b);  // each end already checked its own links
    return LinkCostOf(link.ok() ? link->kind : TransportKind::kSocket, single_copy,
                      peers[a].host_id == peers[b].host_id);
  };
  std::vector<topology::RankRecord> records(n);
  for (int r = 0; r < n; ++r) {
    records[r].host_id = peers[r].host_id;
    records[r].hostname = peers[r].hostname;
    records[r].intra = LinkCostOf(TransportKind::kShm, single_copy);
    records[r].inter = LinkCostOf(TransportKind::kSocket, single_copy);
    TransportKind inter_kind = TransportKind::kSocket;
    bool have_intra = false, have_inter = false;
    for (int i = 1; i < n && !(have_intra && have_inter); ++i) {
      const int q = (r + i) % n;
      const bool same = peers[q].host_id == peers[r].host_id;
      if (same && !have_intra) records[r].intra = cost(r, q);
      if (!same && !have_inter) {
        auto link = PlanLink(transports, r, q);
        inter_kind = link.ok() ? link->kind : TransportKind::kSocket;
        records[r].inter = LinkCostOf(inter_kind, single_copy);
      }
      have_intra = have_intra || same;
      have_inter = have_inter || !same;
    }
    // The socket NICs' speed bounds the network only when sockets carry it.
    const bool sockets = inter_kind == TransportKind::kSocket || inter_kind == TransportKind::kUcx;
    records[r].nic_gbs =
        sockets && peers[r].nic_mbps > 0 ? static_cast<double>(peers[r].nic_mbps) / 8e3 : 0;
  }
  return topology::FuseJobTopology(records);
}

}  // namespace

// Create's steps, in order, and what they hand on to each other. A step
// that can fail returns its Status, and the Impl reaches the
// caller only once every step succeeded.
struct Communicator::Impl::Setup {
  Setup(const std::string& store_host, uint16_t store_port, uint64_t secret, int rank, int size,
        const CommConfig& config);

  Status JoinStore();              // settings checked, connected to rank 0's store
  void DescribeThisRank();         // listeners (TCP, UCX) and what this rank can use
  void ListenOnSockets();
  void StartUcx();
  Status ExchangeDescriptions();   // every rank's description; fingerprints compared
  Status PlanLinks();              // a transport per peer, the same on both ends
  Status ConnectSharedMemory();    // FIFOs, single-copy reads, the streaming choice
  Status ConnectSockets();
  Status ConnectUcx();
  Status ConnectIb();              // and GPUDirect RDMA between GPUs where every link has it
  Status BuildCostModel();         // the job's topology, priced the same on every rank
  void StartEngine();
  Status Start();                  // device IPC, the last barrier, the worker, the status port

  // Whether every pair of ranks (or, with `any`, some pair) is linked by `kind`.
  bool Links(TransportKind kind, bool any) const;
  // Small collectives through shared-memory slots need every pair on shared
  // memory; every rank computes the same answer from the same plan.
  bool SmallSlots() const;

  std::unique_ptr<Impl> impl = std::make_unique<Impl>();
  Impl* raw = impl.get();
  std::string store_host;
  uint16_t store_port;
  Deadline deadline = Deadline::Never();
  std::string who;

  PeerInfo mine;
  Status no_interface;
  std::string ifname;
  std::optional<NetInterface> socket_if;
#if defined(LOOM_HAVE_UCX)
  std::unique_ptr<UcxContext> ucx;
#endif
  Availability ucx_availability;
  ib::PortInfo ib_port;

  std::vector<PeerInfo> peers;
  std::vector<std::string> hosts, host_ids;
  std::vector<int> pids;
  std::vector<uint64_t> read_probes;
  std::vector<TransportRecord> transports;
  std::vector<int> shm_peers, tcp_peers, ucx_peers, ib_peers;

  std::vector<std::unique_ptr<Connection>> conns;
  Doorbell* doorbell = nullptr;
  // Every rank's shm peers are readable at this price (gbs > 0), the same everywhere.
  topology::PeerReadPrice job_single_copy;
  size_t ranks_here = 1;
};

Result<std::unique_ptr<Communicator::Impl>> Communicator::Impl::Create(
    const std::string& store_host, uint16_t store_port, uint64_t secret, int rank, int size,
    const CommConfig& config) {
  Setup s(store_host, store_port, secret, rank, size, config);
  LOOM_TRY(s.JoinStore());
  s.DescribeThisRank();
  LOOM_TRY(s.ExchangeDescriptions());
  LOOM_TRY(s.PlanLinks());
  LOOM_TRY(s.ConnectSharedMemory());
  LOOM_TRY(s.ConnectSockets());
  LOOM_TRY(s.ConnectUcx());
  LOOM_TRY(s.ConnectIb());
  LOOM_TRY(s.BuildCostModel());
  s.StartEngine();
  LOOM_TRY(s.Start());
  return std::move(s.impl);
}

Communicator::Impl::Setup::Setup(const std::string& host, uint16_t port, uint64_t secret, int rank,
                                 int size, const CommConfig& config)
    : store_host(host), store_port(port), conns(size) {
  impl->rank = rank;
  impl->size = size;
  impl->config = config;
  impl->secret_ = secret;
  impl->host = Hostname();
  int64_t timeout_ms = config.timeout.count() > 0 ? config.timeout.count() : params::kTimeoutMs.Get();
  impl->timeout = std::chrono::milliseconds(timeout_ms);
  deadline = Deadline::After(impl->timeout);
  who = "rank " + std::to_string(rank) + " (" + impl->host + ")";
}

bool Communicator::Impl::Setup::SmallSlots() const {
  return impl->size > 1 && Links(TransportKind::kShm, /*any=*/false) && params::kShmSmall.Get();
}

bool Communicator::Impl::Setup::Links(TransportKind kind, bool any) const {
  for (int a = 0; a < impl->size; ++a) {
    for (int b = a + 1; b < impl->size; ++b) {
      auto link = PlanLink(transports, a, b);
      const bool is = link.ok() && link->kind == kind;
      if (is == any) return any;
    }
  }
  return !any;
}

Status Communicator::Impl::Setup::JoinStore() {
  // A bad setting fails here, at once and naming the variable, not as a
  // hang or a timeout later.
  LOOM_TRY(params::CheckAll().WithContext(who));
  LOOM_ASSIGN_OR_RETURN(impl->dispatch_.selection.filter, AlgoFilter::Parse(params::kAlgo.Get()));
  LOOM_ASSIGN_OR_RETURN(impl->dispatch_.selection.tune, TuneTable::Parse(params::kTune.Get()));
  bootstrap::StoreClient::Identity me{impl->rank, impl->size, impl->host, getpid()};
  LOOM_ASSIGN_OR_RETURN(impl->store_, bootstrap::StoreClient::Connect(store_host, store_port,
                                                                      impl->secret_, me, deadline));
  Impl* self = raw;
  impl->store_->SetFailureCallback([self](int failed_rank, const std::string& message) {
    (void)failed_rank;
    self->Abort(RemoteError(message));
  });
  return Status::Ok();
}

void Communicator::Impl::Setup::DescribeThisRank() {
  mine.fingerprint = EncodeFingerprint(LocalFingerprint());
  mine.host_id = HostIdentity();
  mine.hostname = impl->host;
  mine.pid = getpid();
  mine.read_probe = reinterpret_cast<uint64_t>(ReadProbeRegion());
  mine.gpu = DeviceIpc::LocalRecord(impl->device_.ops());
  if (cuda::DeviceOps* ops = impl->device_.ops()) {
    Result<int> device = ops->CurrentDevice();
    if (device.ok()) impl->cuda_device = device.value();
  }
  ListenOnSockets();
  StartUcx();
  TransportRecord tr;
  tr.host_id = mine.host_id;
  tr.hostname = impl->host;
  tr.shm = Availability::Usable("/dev/shm");
  tr.socket = impl->tcp_ != nullptr ? Availability::Usable(ifname)
                                    : Availability::Unusable(no_interface.message());
  tr.socket_address = mine.tcp_address;
  tr.ucx = ucx_availability;
  tr.knobs.shm_disable = params::kShmDisable.Get();
  tr.knobs.ib_disable = params::kIbDisable.Get();
  tr.knobs.net = params::kNet.Get();
  tr.knobs.require = params::kRequireTransport.Get();
  tr.ib = IbAvailability(&ib_port, tr.knobs);
  mine.transports = EncodeTransportRecord(tr);
}

// A listener on the interfaces NCCL's rules pick (the store's subnet first);
// without one, no_interface says why and the plan uses no sockets here.
void Communicator::Impl::Setup::ListenOnSockets() {
  auto store_addr = ResolveHost(store_host, store_port);
  auto all = ListInterfaces();
  Result<std::vector<NetInterface>> chosen =
      all.ok() ? SelectSocketInterfaces(all.value(), params::kSocketIfname.Get(),
                                        params::kSocketFamily.Get(),
                                        params::kSocketIfname.Get().empty() ? 1 : 8,
                                        store_addr.ok() ? reinterpret_cast<const sockaddr*>(
                                                              &store_addr.value())
                                                        : nullptr)
               : Result<std::vector<NetInterface>>(all.status());
  if (chosen.ok()) {
    // Several NICs (NCCL_SOCKET_IFNAME=data0,data1 or a prefix) carry
    // striped sockets; loopback or mixed families never join a stripe.
    std::vector<TcpListen> nics;
    mine.nic_mbps = 0;  // the striped NICs' speeds add up; unknown (-1) if any is
    for (const NetInterface& nic : *chosen) {
      const NetInterface& first = chosen->front();
      if (!nics.empty() && (first.loopback || nic.loopback || nic.family != first.family)) continue;
      mine.nic_mbps = mine.nic_mbps < 0 || nic.speed_mbps <= 0 ? -1 : mine.nic_mbps + nic.speed_mbps;
      std::string a = nic.address;
      if (auto pct = a.find('%'); pct != std::string::npos) a = a.substr(0, pct);
      nics.push_back(TcpListen{a, nic.name, nic.prefix_len});
      ifname += (ifname.empty() ? "" : ",") + nic.name;
    }
    const std::string addr = nics.front().address;
    socket_if = chosen->front();
    auto tcp = TcpContext::Create(nics, impl->secret_);
    if (tcp.ok()) {
      impl->tcp_ = std::move(tcp).value();
      mine.tcp_address = impl->tcp_->address();
      impl->bind_address_ = addr;
    } else {
      no_interface = tcp.status();
    }
  } else {
    no_interface = chosen.status();
  }
}

// UCX, when asked for: a worker pinned to the socket interface chosen
// (UCX_NET_DEVICES unless set). The connections share its worker and keep
// it alive.
void Communicator::Impl::Setup::StartUcx() {
#if defined(LOOM_HAVE_UCX)
  ucx_availability = Availability::Absent(
      "not initialised: only NCCL_NET=UCX or LOOM_REQUIRE_TRANSPORT=ucx selects UCX");
  if (UcxRequested()) {
    UcxOptions uo;
    uo.net_device = ifname;
    uo.ib_disable = params::kIbDisable.Get();
    auto created = UcxContext::Create(uo);
    if (created.ok()) {
      ucx = std::move(created).value();
      mine.ucx_address = ucx->address();
      ucx_availability = Availability::Usable(ucx->via());
    } else {
      ucx_availability = Availability::Unusable(created.status().message());
    }
  }
#else
  ucx_availability = Availability::Absent("loom was built without UCX");
#endif
}

Status Communicator::Impl::Setup::ExchangeDescriptions() {
  if (params::kShmSingleCopy.Get()) {
    // Under Yama ptrace_scope=1 (Ubuntu's default) only a declared tracer may
    // read our memory: let any process of this user do so, as the peers'
    // process_vm_readv needs (Open MPI's CMA path does the same). Done before
    // the all-gather, so it precedes every peer's probe.
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  }
  LOOM_ASSIGN_OR_RETURN(auto records, impl->store_->AllGather("setup", Encode(mine), deadline));
  std::vector<Fingerprint> fps;
  for (int r = 0; r < impl->size; ++r) {
    LOOM_ASSIGN_OR_RETURN(PeerInfo p, Decode(records[r], r));
    fps.push_back(DecodeFingerprint(p.fingerprint));
    hosts.push_back(p.hostname);
    host_ids.push_back(p.host_id);
    pids.push_back(p.pid);
    read_probes.push_back(p.read_probe);
    peers.push_back(std::move(p));
  }
  return CompareFingerprints(fps, hosts).WithContext(who);
}

Status Communicator::Impl::Setup::PlanLinks() {
  // Transport per link (comm/transport_plan.h): both ends evaluate the same
  // rules over the same records, so they agree or both fail naming both.
  for (int r = 0; r < impl->size; ++r) {
    LOOM_ASSIGN_OR_RETURN(TransportRecord tr, DecodeTransportRecord(peers[r].transports, r));
    transports.push_back(std::move(tr));
  }
  auto plans = PlanPeers(transports, impl->rank);
  if (!plans.ok()) return plans.status();  // already names both ends
  for (int p = 0; p < impl->size; ++p) {
    if (p == impl->rank) continue;
    const LinkPlan& plan = (*plans)[p];
    for (const std::string& w : plan.warnings) LOOM_WARN(log::kInit | log::kNet, "%s", w.c_str());
    LOOM_INFO(log::kInit | log::kNet, "%s -> rank %d: %s (%s)", who.c_str(), p,
              TransportName(plan.kind), plan.reason.c_str());
    switch (plan.kind) {
      case TransportKind::kShm: shm_peers.push_back(p); break;
      case TransportKind::kSocket: tcp_peers.push_back(p); break;
      case TransportKind::kUcx: ucx_peers.push_back(p); break;
      case TransportKind::kIb: ib_peers.push_back(p); break;
    }
  }
  return Status::Ok();
}

// Shared-memory setup is collective over every rank that has a shm link;
// same-host pairs are the only candidates, and every rank computes this alike.
Status Communicator::Impl::Setup::ConnectSharedMemory() {
  if (!Links(TransportKind::kShm, /*any=*/true)) return Status::Ok();
  bool stream_clear = false;  // setup found one way of sending into the FIFOs clearly faster
  const std::string tag = Hex(impl->secret_) + "-" + std::to_string(store_port);
  LOOM_ASSIGN_OR_RETURN(impl->shm_,
                        ShmContext::Create(tag, impl->rank, static_cast<size_t>(params::kBuffsize.Get())));
  doorbell = impl->shm_->doorbell();
  LOOM_ASSIGN_OR_RETURN(auto shm_conns,
                        impl->shm_->Connect(*impl->store_, shm_peers, hosts, pids, deadline));
  for (size_t i = 0; i < shm_peers.size(); ++i) conns[shm_peers[i]] = std::move(shm_conns[i]);
  LOOM_ASSIGN_OR_RETURN(job_single_copy,
                        EnableSingleCopy(*impl->store_, impl->rank, shm_peers, read_probes, pids,
                                         SameHostShmRing(impl->rank, host_ids, transports), conns,
                                         deadline, &stream_clear));
  for (int p : shm_peers) impl->dispatch_.fifo.conns.push_back(conns[p]->peer_memory());
  if (!impl->dispatch_.fifo.conns.empty()) {
    // Setup's way (timed, or this process's earlier finding) to start
    // from; LOOM_SHM_STREAM, checked by EnableSingleCopy, forces one.
    impl->dispatch_.fifo.streaming = impl->dispatch_.fifo.conns.front()->streaming_sends();
    if (params::kShmStream.Get().empty()) {
      impl->dispatch_.fifo.chooser =
          std::make_unique<StreamChooser>(impl->dispatch_.fifo.streaming, stream_clear);
    }
  }
  return Status::Ok();
}

Status Communicator::Impl::Setup::ConnectSockets() {
  if (tcp_peers.empty()) return Status::Ok();
  std::vector<std::string> addrs;
  for (auto& p : peers) addrs.push_back(p.tcp_address);
  // NCCL's knobs: sockets per peer = threads x sockets per thread, at most 64.
  const int64_t nsocks = std::clamp<int64_t>(
      params::kSocketNthreads.Get() * params::kNsocksPerthread.Get(), 1, 64);
  LOOM_ASSIGN_OR_RETURN(auto tcp_conns, impl->tcp_->Connect(impl->rank, tcp_peers, addrs, hosts,
                                                            static_cast<int>(nsocks), deadline));
  for (size_t i = 0; i < tcp_peers.size(); ++i) conns[tcp_peers[i]] = std::move(tcp_conns[i]);
  return Status::Ok();
}

Status Communicator::Impl::Setup::ConnectUcx() {
  if (ucx_peers.empty()) return Status::Ok();
#if defined(LOOM_HAVE_UCX)
  // The plan chose UCX only where both ends have it usable, so `ucx` exists
  // here and on each of these peers; the endpoints say hello pairwise.
  std::vector<UcxRankInfo> infos;
  std::vector<std::string> ucx_addrs;
  for (const PeerInfo& p : peers) {
    infos.push_back(UcxRankInfo{p.hostname, p.host_id, p.pid});
    ucx_addrs.push_back(p.ucx_address);
  }
  LOOM_ASSIGN_OR_RETURN(auto ucx_conns,
                        ucx->Connect(impl->rank, ucx_peers, ucx_addrs, infos, deadline));
  for (size_t i = 0; i < ucx_peers.size(); ++i) conns[ucx_peers[i]] = std::move(ucx_conns[i]);
  return Status::Ok();
#else
  return InternalError(who + ": UCX chosen in a build without UCX");
#endif
}

// IB setup all-gathers endpoints, so every rank joins when any pair uses
// IB (every rank computes the same answer from the same records).
Status Communicator::Impl::Setup::ConnectIb() {
  if (!Links(TransportKind::kIb, /*any=*/true)) return Status::Ok();
  std::unique_ptr<ib::IbContext> ib_ctx;
  bool gdr_both = false;  // GPUDirect RDMA for sends and receives
  if (!ib_peers.empty()) {
    ib::IbOptions io = IbOptionsFromParams(ib_port, socket_if ? &*socket_if : nullptr);
    DecideGdr(impl->device_.ops(), &io);
    gdr_both = io.gdr.send && io.gdr.recv;
    LOOM_ASSIGN_OR_RETURN(ib_ctx, ib::IbContext::Create(io));
  }
  std::vector<std::unique_ptr<Connection>> ib_conns;
  if (ib_ctx != nullptr) {
    LOOM_ASSIGN_OR_RETURN(ib_conns,
                          ib_ctx->Connect(*impl->store_, impl->rank, ib_peers, hosts, deadline));
  } else {
    LOOM_TRY(impl->store_->AllGather("ib-endpoints", "", deadline).status());
  }
  for (size_t i = 0; i < ib_peers.size(); ++i) conns[ib_peers[i]] = std::move(ib_conns[i]);
  // The data-moving collectives go straight between GPUs
  // (comm/device_net.h) only when every pair of ranks is linked by IB and
  // every rank has GPUDirect RDMA both ways: all ranks learn it alike.
  if (Links(TransportKind::kIb, /*any=*/false)) {
    LOOM_ASSIGN_OR_RETURN(auto flags,
                          impl->store_->AllGather("gdr", gdr_both ? "1" : "0", deadline));
    if (std::all_of(flags.begin(), flags.end(), [](const std::string& f) { return f == "1"; })) {
      const size_t min_recv = conns[ib_peers.front()]->receives_device_memory_from();
      impl->net_.Enable(impl->device_.ops(), min_recv, impl->cuda_device);
      LOOM_INFO(log::kInit | log::kNet,
                "%s: all-gather, broadcast and all-to-all of device buffers from %zu bytes per "
                "block go straight between GPUs (GPUDirect RDMA on every rank)",
                who.c_str(), min_recv);
    }
  }
  return Status::Ok();
}

Status Communicator::Impl::Setup::BuildCostModel() {
  // Every rank fuses the same records, so every rank picks the same
  // algorithm for the same call (a mismatch would deadlock).
  LOOM_ASSIGN_OR_RETURN(const topology::JobTopology job,
                        FuseJob(peers, transports, job_single_copy));
  ranks_here = job.host_ranks[job.host_of_rank[impl->rank]].size();
  Dispatcher::Selection& sel = impl->dispatch_.selection;
  sel.cost = CostModel(job, topology::kHostReduceGbs, SmallSlots());
  if (job.ranks_per_host() > 0) sel.hier = MakeHierGroups(job, impl->rank);
  LOOM_INFO(log::kInit | log::kTuning, "%s: job %s", who.c_str(), job.Describe().c_str());
  if (job.hosts() > 1 && !sel.cost.hierarchical_unavailable().empty()) {
    LOOM_INFO(log::kTuning, "%s: Hierarchical all-reduce unavailable (%s): flat algorithms only",
              who.c_str(), sel.cost.hierarchical_unavailable().c_str());
  }
  LOOM_INFO(log::kTuning, "%s: AllReduce %s", who.c_str(),
            SelectionSummary(OpKind::kAllReduce, sel.cost, sel.filter, sel.tune)
                .c_str());
  return Status::Ok();
}

void Communicator::Impl::Setup::StartEngine() {
  Engine::Options eo;
  eo.rank = impl->rank;
  eo.spin_us = static_cast<int>(params::kSpinUs.Get());
  // More ranks here than cores: a spinning rank holds a core its peer needs
  // to make the progress it waits for, so spin by yielding (as Open MPI does
  // when oversubscribed).
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  eo.yield_in_spin = cores > 0 && ranks_here > static_cast<size_t>(cores);
  if (eo.yield_in_spin) {
    LOOM_INFO(log::kInit, "%s: %zu ranks on this host share %ld cores: waits yield while spinning",
              who.c_str(), ranks_here, cores);
  }
  eo.doorbell = doorbell;
  eo.all_shm = impl->size > 1 && Links(TransportKind::kShm, /*any=*/false);
  if (SmallSlots()) {
    eo.small_slots = impl->shm_->small_slots();
    eo.small_tsan_key = impl->shm_->small_tsan_key();
  }
  eo.abort = &impl->abort_;
  if (impl->timeout.count() > 0 && impl->size > 1) {
    eo.wait_reporter = std::make_shared<StoreWaitReporter>(
        &impl->store_, impl->rank, HostLabels(hosts, host_ids), impl->timeout);
  }
  Impl* self = raw;
  eo.abort_status = [self] {
    Status s = self->AsyncError();
    return s.ok() ? RemoteError("communicator aborted") : s;
  };
  impl->engine_ = std::make_unique<Engine>(std::move(eo), std::move(conns));
  Dispatcher::Parts parts;
  parts.engine = impl->engine_.get();
  parts.device = &impl->device_;
  parts.ipc = &impl->ipc_;
  parts.net = &impl->net_;
  parts.abort = &impl->abort_;
  parts.rank = impl->rank;
  parts.size = impl->size;
  parts.host = impl->host;
  parts.cuda_device = impl->cuda_device;
  parts.timeout = impl->timeout;
  impl->dispatch_.Attach(std::move(parts));
}

Status Communicator::Impl::Setup::Start() {
  if (const size_t forced = DeviceNetForTesting(); forced > 0 && impl->device_.ops() != nullptr) {
    impl->net_.Enable(impl->device_.ops(), forced, impl->cuda_device);
  }
  std::vector<std::string> gpus;
  for (const PeerInfo& p : peers) gpus.push_back(p.gpu);
  LOOM_TRY(impl->ipc_.Setup(impl->device_.ops(), *impl->store_, impl->rank, gpus, host_ids, deadline)
               .WithContext(who));
  // Peers' requests to close CUDA IPC mappings of buffers they deregister,
  // answered even while this communicator is idle (device_ipc.h). The
  // store's destructor stops its reader before the Impl goes.
  bootstrap::StoreClient* store = impl->store_.get();
  Impl* self = raw;
  store->SetNoticeCallback([self, store](int from, bool gone, const std::string& payload) {
    self->ipc_.OnNotice(*store, from, gone, payload);
  });
  // Everyone connected before anyone sends.
  LOOM_TRY(impl->store_->Barrier("connected", deadline));
  impl->queue_ = std::make_unique<OpQueue>([self](Work::State& op) { self->RunQueued(op); },
                                            impl->timeout);
  impl->queue_->Start();
  StatusSource source;
  source.id = Hex(impl->secret_);
  source.rank = impl->rank;
  source.size = impl->size;
  source.tracker = &impl->dispatch_.tracker;
  source.ctx = raw;
  source.async_error = [](const void* ctx) {
    Status s = static_cast<const Impl*>(ctx)->AsyncError();
    return s.ok() ? std::string() : s.ToString();
  };
  impl->status_handle_ = RegisterStatusSource(source);
  LOOM_INFO(log::kInit,
            "%s: comm %s rank %d nRanks %d (%zu shm, %zu socket, %zu UCX, %zu IB peers) - Init "
            "COMPLETE",
            who.c_str(), impl->config.name.empty() ? "-" : impl->config.name.c_str(), impl->rank,
            impl->size,
            shm_peers.size(), tcp_peers.size(), ucx_peers.size(), ib_peers.size());
  return Status::Ok();
}

Result<std::unique_ptr<Communicator>> Communicator::Impl::Split(int color, int key,
                                                                const CommConfig& cfg) {
  if (color < kSplitNoColor) {
    return InvalidArgument("Split: color " + std::to_string(color) +
                           " is negative (only kSplitNoColor = -1 is allowed)");
  }
  LOOM_TRY(Drain(OpDeadline()));
  const Deadline deadline = OpDeadline();
  const std::string tag = "split-" + std::to_string(split_count_++);
  bootstrap::Writer w;
  w.I32(color);
  w.I32(key);
  LOOM_ASSIGN_OR_RETURN(auto all, store_->AllGather(tag, w.Frame(bootstrap::MsgType::kAllGather).substr(8), deadline));
  struct Member {
    int key, rank;
  };
  std::vector<Member> members;
  for (int r = 0; r < size; ++r) {
    bootstrap::Reader rd(all[r]);
    int c = rd.I32(), k = rd.I32();
    if (c == color && color != kSplitNoColor) members.push_back({k, r});
  }
  std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
    return a.key != b.key ? a.key < b.key : a.rank < b.rank;
  });
  int new_rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].rank == rank) new_rank = static_cast<int>(i);
  }
  // The first member of each color hosts the new store and publishes its id.
  std::string id_text;
  if (new_rank == 0) {
    LOOM_ASSIGN_OR_RETURN(UniqueId id, internal::CreateUniqueIdOn(
                                           bind_address_.empty() ? "127.0.0.1" : bind_address_));
    id_text.assign(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
  }
  LOOM_ASSIGN_OR_RETURN(auto ids, store_->AllGather(tag + "-id", id_text, deadline));
  if (color == kSplitNoColor) return std::unique_ptr<Communicator>();
  const std::string& leader_id = ids[members.front().rank];
  UniqueId id;
  std::copy(leader_id.begin(), leader_id.end(), reinterpret_cast<char*>(id.bytes.data()));
  CommConfig c = cfg;
  if (c.timeout.count() == 0) c.timeout = timeout;
  return Communicator::Create(id, new_rank, static_cast<int>(members.size()), c);
}

}  // namespace loom
