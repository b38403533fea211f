// DecideGdr (gdr.h): NCCL's GPUDirect RDMA rules as one pure function.
#include "transports/ib/gdr.h"

#include <fstream>

namespace loom::ib {

const char* GdrWayName(GdrWay way) {
  switch (way) {
    case GdrWay::kNone:
      return "none";
    case GdrWay::kDmaBuf:
      return "DMA-BUF";
    case GdrWay::kPeerMem:
      return "nvidia-peermem";
  }
  return "?";
}

Result<topology::PathType> ParseGdrLevel(std::string_view text) {
  return topology::ParseLevel(text, "NCCL_NET_GDR_LEVEL");
}

Result<GdrChoice> DecideGdr(const GdrFacts& f) {
  LOOM_ASSIGN_OR_RETURN(const topology::PathType level, ParseGdrLevel(f.level));
  GdrChoice c;
  const std::string who = "GPU " + std::to_string(f.gpu_index) + " / HCA " + f.nic;
  if (!f.gpu) {
    c.line = "GPU Direct RDMA unused: this rank has no GPU";
    return c;
  }
  const topology::PathType path = f.path_known ? f.path : topology::PathType::kSys;
  const std::string distance =
      std::string(f.path_known ? "" : "unknown, taken as ") + std::string(topology::Name(path));
  if (path > level) {
    c.line = "GPU Direct RDMA Disabled for " + who + " (distance " + distance + " > " +
             std::string(topology::Name(level)) + "; NCCL_NET_GDR_LEVEL allows more)";
    return c;
  }
  if (f.dmabuf_enable && f.verbs_dmabuf && f.cuda_dmabuf) {
    c.way = GdrWay::kDmaBuf;
  } else if (f.peermem) {
    c.way = GdrWay::kPeerMem;
  } else {
    std::string why;
    if (!f.dmabuf_enable) {
      why = "NCCL_DMABUF_ENABLE=0";
    } else if (!f.verbs_dmabuf) {
      why = "libibverbs has no ibv_reg_dmabuf_mr";
    } else {
      why = "the GPU driver exports no dma-buf";
    }
    c.line = "GPU Direct RDMA Disabled for " + who + " (" + why +
             ", and nvidia_peermem is not loaded): device buffers are staged through host memory";
    return c;
  }
  c.recv = f.writes_visible;
  c.send = f.read != 0;
  if (!c.recv && !c.send) {
    c.way = GdrWay::kNone;
    c.line = "GPU Direct RDMA Disabled for " + who +
             " (NCCL_NET_GDR_READ=0, and the GPU can neither order nor flush the NIC's writes)";
    return c;
  }
  c.line =
      "GPU Direct RDMA Enabled for " + who + " (distance " + distance +
      " <= " + std::string(topology::Name(level)) + "), read " + (c.send ? "1" : "0") + " mode " +
      GdrWayName(c.way) +
      (c.recv ? "" : "; receives staged: the GPU can neither order nor flush the NIC's writes");
  return c;
}

bool PeerMemLoaded(const char* modules) {
  std::ifstream in(modules);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("nvidia_peermem ", 0) == 0 || line.rfind("nv_peer_mem ", 0) == 0) return true;
  }
  return false;
}

}  // namespace loom::ib
