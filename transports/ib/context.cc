// IbContext and VerbsWire: the verbs calls behind IbConnection (device,
// protection domain, completion queue + channel, RC queue pair, the
// registered receive ring), through the dlopen'ed table of verbs_api.h.
#include "transports/ib/context.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "base/log.h"

#if __has_include(<infiniband/verbs.h>)
#include "transports/ib/verbs_api.h"
#define LOOM_HAVE_VERBS_TYPES 1
#endif

namespace loom::ib {

#ifdef LOOM_HAVE_VERBS_TYPES

namespace {

std::string ToHex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) out += {d[c >> 4], d[c & 15]};
  return out;
}

std::string FromHex(std::string_view h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    out += static_cast<char>(std::stoi(std::string(h.substr(i, 2)), nullptr, 16));
  }
  return out;
}

// The endpoint rank `of` published for `me` in its "peer=hex;..." record.
std::string_view EntryFor(std::string_view record, int me) {
  const std::string key = std::to_string(me) + "=";
  for (size_t pos = 0; pos < record.size();) {
    size_t end = record.find(';', pos);
    if (end == std::string_view::npos) end = record.size();
    std::string_view item = record.substr(pos, end - pos);
    if (item.substr(0, key.size()) == key) return item.substr(key.size());
    pos = end + 1;
  }
  return {};
}

}  // namespace

struct IbContext::Impl {
  const Api* api = nullptr;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  IbOptions opt;
  int gid_index = 0;
  uint8_t mtu = 0;
  ~Impl() {
    if (pd != nullptr) api->dealloc_pd(pd);
    if (ctx != nullptr) api->close_device(ctx);
  }
};

namespace {

constexpr uint64_t kRecvBit = uint64_t{1} << 63;  // error completions carry no valid opcode

// One peer's queue pair, completion queue/channel and receive ring. Keeps
// the device (Impl) alive.
class VerbsWire final : public IbWire {
 public:
  using Impl = IbContext::Impl;
  explicit VerbsWire(std::shared_ptr<Impl> dev) : dev_(std::move(dev)), api_(*dev_->api) {}
  ~VerbsWire() override {
    if (qp_ != nullptr) api_.destroy_qp(qp_);
    if (cq_ != nullptr) {
      if (unacked_ > 0) api_.ack_cq_events(cq_, unacked_);
      api_.destroy_cq(cq_);
    }
    if (channel_ != nullptr) api_.destroy_comp_channel(channel_);
    if (ring_mr_ != nullptr) api_.dereg_mr(ring_mr_);
    std::free(ring_);
  }

  Status Init(size_t ring_bytes, uint32_t max_wr, const std::string& peer_desc) {
    auto fail = [&](const char* what) {
      return SystemError(std::string(what) + " on " + dev_->opt.port.device + " for " + peer_desc,
                         errno);
    };
    ring_bytes_ = ring_bytes;
    ring_ = static_cast<char*>(std::aligned_alloc(4096, (ring_bytes + 4095) / 4096 * 4096));
    if (ring_ == nullptr) return fail("allocating the IB ring");
    ring_mr_ = api_.reg_mr(dev_->pd, ring_, ring_bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (ring_mr_ == nullptr) return fail("ibv_reg_mr (ring; is `ulimit -l` too low?)");
    channel_ = api_.create_comp_channel(dev_->ctx);
    if (channel_ == nullptr) return fail("ibv_create_comp_channel");
    fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
    cq_ = api_.create_cq(dev_->ctx, static_cast<int>(2 * max_wr), nullptr, channel_, 0);
    if (cq_ == nullptr) return fail("ibv_create_cq");
    ibv_qp_init_attr qa{};
    qa.send_cq = cq_;
    qa.recv_cq = cq_;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = max_wr;
    qa.cap.max_recv_wr = max_wr;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qp_ = api_.create_qp(dev_->pd, &qa);
    if (qp_ == nullptr) return fail("ibv_create_qp");
    return Status::Ok();
  }

  // Applies one NextTransition result with ibv_modify_qp.
  Status Apply(const QpTransition& t, const std::string& peer_desc) {
    ibv_qp_attr a{};
    switch (t.to) {
      case QpState::kInit:
        a.qp_state = IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = static_cast<uint8_t>(t.port);
        a.qp_access_flags = static_cast<unsigned>(t.access_flags);
        break;
      case QpState::kRtr:
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = static_cast<ibv_mtu>(t.path_mtu);
        a.dest_qp_num = t.dest_qpn;
        a.rq_psn = t.rq_psn;
        a.max_dest_rd_atomic = t.max_dest_rd_atomic;
        a.min_rnr_timer = t.min_rnr_timer;
        a.ah_attr.dlid = t.dlid;
        a.ah_attr.sl = t.sl;
        a.ah_attr.port_num = static_cast<uint8_t>(dev_->opt.port.port);
        a.ah_attr.is_global = t.global ? 1 : 0;
        std::memcpy(a.ah_attr.grh.dgid.raw, t.dgid.data(), 16);
        a.ah_attr.grh.sgid_index = t.sgid_index;
        a.ah_attr.grh.hop_limit = t.hop_limit;
        a.ah_attr.grh.traffic_class = t.traffic_class;
        break;
      case QpState::kRts:
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = t.sq_psn;
        a.timeout = t.timeout;
        a.retry_cnt = t.retry_cnt;
        a.rnr_retry = t.rnr_retry;
        a.max_rd_atomic = t.max_rd_atomic;
        break;
      default:
        return InternalError("no verbs transition to " + std::string(QpStateName(t.to)));
    }
    const int rc = api_.modify_qp(qp_, &a, t.attr_mask);
    if (rc != 0) {
      return SystemError(std::string("ibv_modify_qp to ") + QpStateName(t.to) + " for " + peer_desc +
                             " on " + dev_->opt.port.device,
                         rc);
    }
    return Status::Ok();
  }

  Endpoint Local(uint32_t psn) const {
    Endpoint e;
    e.lid = dev_->opt.port.lid;
    for (const GidEntry& g : dev_->opt.port.gids) {
      if (g.index == dev_->gid_index) e.gid = g.gid;
    }
    e.gid_index = static_cast<uint8_t>(dev_->gid_index);
    e.qpn = qp_->qp_num;
    e.psn = psn;
    e.mtu = dev_->mtu;
    e.ethernet = dev_->opt.port.ethernet;
    e.ring_addr = reinterpret_cast<uint64_t>(ring_);
    e.ring_rkey = ring_mr_->rkey;
    e.ring_bytes = static_cast<uint32_t>(ring_bytes_);
    e.grants = dev_->opt.gdr.recv;
    return e;
  }
  void set_remote(const Endpoint& r) { remote_ = r; }

  Status PostWrite(const WriteRequest& w) override {
    ibv_sge sge{reinterpret_cast<uint64_t>(w.local), static_cast<uint32_t>(w.bytes), w.lkey};
    ibv_send_wr wr{};
    wr.wr_id = w.wr_id;
    wr.sg_list = w.bytes > 0 ? &sge : nullptr;
    wr.num_sge = w.bytes > 0 ? 1 : 0;
    wr.opcode = w.with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(w.imm);
    wr.wr.rdma.remote_addr = w.rkey != 0 ? w.remote_addr : remote_.ring_addr + w.remote_offset;
    wr.wr.rdma.rkey = w.rkey != 0 ? w.rkey : remote_.ring_rkey;
    ibv_send_wr* bad = nullptr;
    const int rc = Api::PostSend(qp_, &wr, &bad);
    return rc == 0 ? Status::Ok() : SystemError("ibv_post_send", rc);
  }
  Status PostRecv(uint64_t wr_id) override {
    ibv_recv_wr wr{};
    wr.wr_id = wr_id | kRecvBit;
    ibv_recv_wr* bad = nullptr;
    const int rc = Api::PostRecv(qp_, &wr, &bad);
    return rc == 0 ? Status::Ok() : SystemError("ibv_post_recv", rc);
  }
  Result<int> Poll(WireCompletion* out, int max) override {
    ibv_wc wc[32];
    const int n = Api::PollCq(cq_, max < 32 ? max : 32, wc);
    if (n < 0) return SystemError("ibv_poll_cq on " + dev_->opt.port.device + " failed");
    for (int i = 0; i < n; ++i) {
      WireCompletion& c = out[i];
      const bool recv = (wc[i].wr_id & kRecvBit) != 0;
      c.wr_id = wc[i].wr_id & ~kRecvBit;
      c.op = recv ? WireCompletion::Op::kRecv : WireCompletion::Op::kWrite;
      c.status = wc[i].status;
      c.vendor_err = wc[i].vendor_err;
      c.imm = recv ? ntohl(wc[i].imm_data) : 0;
      c.bytes = wc[i].byte_len;
    }
    return n;
  }
  char* ring() override { return ring_; }
  size_t ring_bytes() const override { return ring_bytes_; }
  const char* StatusText(int status) const override {
    return api_.wc_status_str(static_cast<ibv_wc_status>(status));
  }
  int event_fd() const override { return channel_->fd; }
  Status Arm() override {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    while (api_.get_cq_event(channel_, &cq, &ctx) == 0) ++unacked_;  // non-blocking fd
    if (unacked_ > 0) {
      api_.ack_cq_events(cq_, unacked_);
      unacked_ = 0;
    }
    const int rc = Api::ReqNotifyCq(cq_);
    return rc == 0 ? Status::Ok() : SystemError("ibv_req_notify_cq", rc);
  }
  Result<MemoryKey> Register(uintptr_t addr, size_t bytes, void** handle) override {
    // Only sources of RDMA writes come here (the staging slots and users'
    // send buffers): local read needs no access flag, and asking for write
    // would pin read-only mappings (mmapped weights) for writing: EFAULT.
    ibv_mr* mr = api_.reg_mr(dev_->pd, reinterpret_cast<void*>(addr), bytes, 0);
    if (mr == nullptr) {
      return SystemError("ibv_reg_mr of " + std::to_string(bytes) + " bytes on " +
                             dev_->opt.port.device + " (is `ulimit -l` too low?)",
                         errno);
    }
    *handle = mr;
    return MemoryKey{mr->lkey, mr->rkey};
  }
  // GPUDirect RDMA: the host pages of the allocation that [addr, addr +
  // bytes) touches, for local and remote writes (a granted receive), as a
  // slice of a dma-buf of the whole allocation (ibv_reg_dmabuf_mr at its
  // offset there, addressed by the device virtual address) or, with
  // nvidia_peermem, by plain ibv_reg_mr.
  Result<MemoryKey> RegisterDevice(uintptr_t addr, size_t bytes, void** handle, uintptr_t* begin,
                                   uintptr_t* end) override {
    const IbOptions& o = dev_->opt;
    if (o.gdr.way == GdrWay::kNone || !o.device_allocation) {
      return Registrar::RegisterDevice(addr, bytes, handle, begin, end);
    }
    const bool dmabuf = o.gdr.way == GdrWay::kDmaBuf;
    LOOM_ASSIGN_OR_RETURN(const DeviceAllocation a,
                          o.device_allocation(reinterpret_cast<const void*>(addr), dmabuf));
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t from = std::max(a.base, addr / page * page);
    const uintptr_t to = std::min(a.base + a.bytes, (addr + bytes + page - 1) / page * page);
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    ibv_mr* mr = nullptr;
    if (dmabuf) {
      mr = api_.reg_dmabuf_mr(dev_->pd, from - a.base, to - from, from, a.dmabuf_fd, access);
      const int err = errno;
      close(a.dmabuf_fd);  // the registration holds its own reference
      errno = err;
    } else {
      mr = api_.reg_mr(dev_->pd, reinterpret_cast<void*>(from), to - from, access);
    }
    if (mr == nullptr) {
      return SystemError(std::string(dmabuf ? "ibv_reg_dmabuf_mr" : "ibv_reg_mr (nvidia-peermem)") +
                             " of " + std::to_string(to - from) + " bytes of GPU memory on " +
                             o.port.device + " (NCCL_NET_GDR_LEVEL=LOC turns GPUDirect RDMA off)",
                         errno);
    }
    *handle = mr;
    *begin = from;
    *end = to;
    return MemoryKey{mr->lkey, mr->rkey};
  }
  void Deregister(void* handle) override { api_.dereg_mr(static_cast<ibv_mr*>(handle)); }

 private:
  std::shared_ptr<Impl> dev_;
  const Api& api_;
  char* ring_ = nullptr;
  size_t ring_bytes_ = 0;
  ibv_mr* ring_mr_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  unsigned unacked_ = 0;
  Endpoint remote_;
};

}  // namespace

IbContext::~IbContext() = default;

Result<std::unique_ptr<IbContext>> IbContext::Create(const IbOptions& options) {
  const Api& api = LoadApi();
  if (!api.error.empty()) return SystemError(api.error);
  auto impl = std::make_shared<Impl>();
  impl->api = &api;
  impl->opt = options;
  impl->opt.knobs.port = options.port.port;
  LOOM_ASSIGN_OR_RETURN(impl->gid_index, ChooseGid(options.port, options.gid_index, options.subnet));
  int n = 0;
  ibv_device** list = api.get_device_list(&n);
  if (list == nullptr) return SystemError("ibv_get_device_list", errno);
  for (int i = 0; i < n && impl->ctx == nullptr; ++i) {
    if (options.port.device == api.get_device_name(list[i])) impl->ctx = api.open_device(list[i]);
  }
  api.free_device_list(list);
  if (impl->ctx == nullptr) return SystemError("cannot open IB device " + options.port.device, errno);
  ibv_port_attr pa{};
  if (api.query_port(impl->ctx, static_cast<uint8_t>(options.port.port), &pa) != 0) {
    return SystemError("ibv_query_port " + options.port.device, errno);
  }
  impl->mtu = static_cast<uint8_t>(pa.active_mtu);
  impl->pd = api.alloc_pd(impl->ctx);
  if (impl->pd == nullptr) return SystemError("ibv_alloc_pd on " + options.port.device, errno);
  LOOM_INFO(log::kInit | log::kNet, "NET/IB : Using [0]%s:%d/%s GID index %d", options.port.device.c_str(),
            options.port.port, options.port.ethernet ? "RoCE" : "IB", impl->gid_index);
  std::unique_ptr<IbContext> c(new IbContext());
  c->impl_ = std::move(impl);
  return c;
}

Result<std::vector<std::unique_ptr<Connection>>> IbContext::Connect(
    Exchange& exchange, int rank, const std::vector<int>& peers,
    const std::vector<std::string>& hosts, Deadline deadline) {
  const IbOptions& opt = impl_->opt;
  // Writes out: data and credits up to `slots` each, answers up to kAnswers;
  // receives: those and the peer's answers and last granted writes.
  const uint32_t max_wr = 2 * (opt.connection.layout.slots + RingLayout::kAnswers) + 4;
  std::mt19937 rng(std::random_device{}());
  std::vector<std::unique_ptr<VerbsWire>> wires;
  std::vector<Endpoint> locals;
  std::string mine;
  for (int p : peers) {
    const std::string desc = "rank " + std::to_string(p) + " (" + hosts[p] + ")";
    auto w = std::make_unique<VerbsWire>(impl_);
    LOOM_TRY(w->Init(opt.connection.layout.total_bytes(), max_wr, desc));
    LOOM_ASSIGN_OR_RETURN(QpTransition init, NextTransition(QpState::kReset, {}, {}, opt.knobs));
    LOOM_TRY(w->Apply(init, desc));
    locals.push_back(w->Local(rng() & 0xffffff));
    mine += std::to_string(p) + "=" + ToHex(EncodeEndpoint(locals.back())) + ";";
    wires.push_back(std::move(w));
  }
  LOOM_ASSIGN_OR_RETURN(auto all, exchange.AllGather("ib-endpoints", mine, deadline));
  std::vector<std::unique_ptr<Connection>> conns;
  for (size_t i = 0; i < peers.size(); ++i) {
    const int p = peers[i];
    const std::string desc = "rank " + std::to_string(p) + " (" + hosts[p] + ")";
    LOOM_ASSIGN_OR_RETURN(Endpoint remote, DecodeEndpoint(FromHex(EntryFor(all[p], rank)), desc));
    if (remote.ring_bytes != opt.connection.layout.total_bytes()) {
      return InvalidUsage(
          desc + " has an IB ring of " + std::to_string(remote.ring_bytes) + " bytes, this rank " +
          std::to_string(opt.connection.layout.total_bytes()) + " (different loom versions?)");
    }
    wires[i]->set_remote(remote);
    for (QpState s : {QpState::kInit, QpState::kRtr}) {
      LOOM_ASSIGN_OR_RETURN(QpTransition t, NextTransition(s, locals[i], remote, opt.knobs));
      LOOM_TRY(wires[i]->Apply(t, desc));
    }
    IbConnectionOptions co = opt.connection;
    co.device_sends = opt.gdr.send;
    co.device_recvs = opt.gdr.recv;
    co.peer_grants = remote.grants;
    LOOM_ASSIGN_OR_RETURN(auto conn,
                          IbConnection::Create(p, hosts[p], via(), std::move(wires[i]), co));
    LOOM_INFO(log::kInit | log::kNet, "rank %d -> rank %d via %s (%s:%d, qpn %u -> %u)", rank, p,
              via().c_str(), opt.port.device.c_str(), opt.port.port, locals[i].qpn, remote.qpn);
    conns.push_back(std::move(conn));
  }
  return conns;
}

#else  // no verbs header at build time

struct IbContext::Impl {};
IbContext::~IbContext() = default;

Result<std::unique_ptr<IbContext>> IbContext::Create(const IbOptions& options) {
  (void)options;
  return SystemError("loom was built without <infiniband/verbs.h>");
}

Result<std::vector<std::unique_ptr<Connection>>> IbContext::Connect(
    Exchange& exchange, int rank, const std::vector<int>& peers,
    const std::vector<std::string>& hosts, Deadline deadline) {
  (void)exchange, (void)rank, (void)peers, (void)hosts, (void)deadline;
  return SystemError("loom was built without <infiniband/verbs.h>");
}

#endif

}  // namespace loom::ib
