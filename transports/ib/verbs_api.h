// The libibverbs entry points loom uses, looked up with dlsym (private to
// transports/ib: only .cc files include this, and only where the verbs
// header exists). ibv_poll_cq, ibv_req_notify_cq, ibv_post_send and
// ibv_post_recv are static inline in <infiniband/verbs.h> (they call through
// ctx->ops), so they are not symbols: the inline wrappers below use them.
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace loom::ib {

struct Api {
  // Discovery.
  ibv_device** (*get_device_list)(int*) = nullptr;
  void (*free_device_list)(ibv_device**) = nullptr;
  const char* (*get_device_name)(ibv_device*) = nullptr;
  ibv_context* (*open_device)(ibv_device*) = nullptr;
  int (*close_device)(ibv_context*) = nullptr;
  int (*query_device)(ibv_context*, ibv_device_attr*) = nullptr;
  int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*) = nullptr;
  int (*query_gid)(ibv_context*, uint8_t, int, ibv_gid*) = nullptr;
  // The data path (IbContext / VerbsWire).
  ibv_pd* (*alloc_pd)(ibv_context*) = nullptr;
  int (*dealloc_pd)(ibv_pd*) = nullptr;
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int) = nullptr;
  int (*dereg_mr)(ibv_mr*) = nullptr;
  ibv_comp_channel* (*create_comp_channel)(ibv_context*) = nullptr;
  int (*destroy_comp_channel)(ibv_comp_channel*) = nullptr;
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int) = nullptr;
  int (*destroy_cq)(ibv_cq*) = nullptr;
  int (*get_cq_event)(ibv_comp_channel*, ibv_cq**, void**) = nullptr;
  void (*ack_cq_events)(ibv_cq*, unsigned int) = nullptr;
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*) = nullptr;
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int) = nullptr;
  int (*destroy_qp)(ibv_qp*) = nullptr;
  const char* (*wc_status_str)(ibv_wc_status) = nullptr;
  // Optional (rdma-core 34 and later; null when absent): GPUDirect RDMA by dma-buf.
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd*, uint64_t, size_t, uint64_t, int, int) = nullptr;
  std::string error;  // why loading failed; empty when every symbol resolved

  // The inline verbs, through the provider's ops table as verbs.h does.
  static int PollCq(ibv_cq* cq, int n, ibv_wc* wc) { return cq->context->ops.poll_cq(cq, n, wc); }
  static int ReqNotifyCq(ibv_cq* cq) { return cq->context->ops.req_notify_cq(cq, 0); }
  static int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
    return qp->context->ops.post_send(qp, wr, bad);
  }
  static int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    return qp->context->ops.post_recv(qp, wr, bad);
  }
};

// Loads `library` once per name (kept for the process: verbs holds global
// state). Never null; a failure is in error. Thread-safe.
const Api& LoadApi(const char* library = "libibverbs.so.1");

}  // namespace loom::ib
