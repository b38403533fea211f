// GPUDirect RDMA: whether the IB transport lets the NIC read and write GPU
// memory directly, decided as NCCL decides it. The GPU and the NIC must be
// within NCCL_NET_GDR_LEVEL of each other (default PXB: at most PCIe
// switches between them), and the machine must offer a way to register
// device memory with verbs: a dma-buf of the allocation (ibv_reg_dmabuf_mr,
// unless NCCL_DMABUF_ENABLE=0) or the nvidia_peermem module (then plain
// ibv_reg_mr takes device pointers). NCCL_NET_GDR_READ=0 keeps sends staged
// (the NIC only writes device memory). Pure; tested in ib_test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "topology/paths.h"

namespace loom::ib {

// How device memory is registered; kNone: device buffers are staged.
enum class GdrWay : uint8_t { kNone, kDmaBuf, kPeerMem };
const char* GdrWayName(GdrWay way);  // "none", "DMA-BUF", "nvidia-peermem"

// NCCL_NET_GDR_LEVEL: a path name (LOC, NVL, PIX, PXB, PHB, SYS; NVB and
// NODE too) or NCCL's legacy integers 0-5 (LOC, PIX, PXB, PHB, SYS, SYS).
// Empty means NCCL's default, PXB. InvalidArgument naming the value.
Result<topology::PathType> ParseGdrLevel(std::string_view text);

// What one rank knows about its GPU, its NIC and the machine.
struct GdrFacts {
  bool gpu = false;   // the rank has a CUDA device
  int gpu_index = 0;  // its CUDA index, for the log line
  std::string nic;    // the verbs device the rank uses ("mlx5_0")
  // GPU -> NIC, when the host topology shows both.
  bool path_known = false;
  topology::PathType path = topology::PathType::kSys;
  std::string level;          // NCCL_NET_GDR_LEVEL as set ("" = unset)
  int64_t read = -1;          // NCCL_NET_GDR_READ: 0, 1, or -1 unset (on)
  bool dmabuf_enable = true;  // NCCL_DMABUF_ENABLE
  bool verbs_dmabuf = false;  // libibverbs exports ibv_reg_dmabuf_mr
  bool cuda_dmabuf = false;  // the GPU and driver export dma-bufs of device memory
  bool peermem = false;      // nvidia_peermem (or nv_peer_mem) is loaded
  bool writes_visible = true;  // the GPU orders the NIC's writes natively or can flush them
};

struct GdrChoice {
  GdrWay way = GdrWay::kNone;
  bool send = false;  // the NIC reads device memory for sends
  bool recv = false;  // the NIC writes device memory for receives (needs writes_visible)
  // One line for the INFO log (NET subsystem), NCCL's wording where it has
  // one: "GPU Direct RDMA Enabled for GPU 0 / HCA mlx5_0 (distance PIX <=
  // PXB), read 1 mode DMA-BUF", or why it is disabled.
  std::string line;
};

// InvalidArgument for a bad NCCL_NET_GDR_LEVEL (naming it); otherwise the
// choice, kNone with the reason in `line` when anything is missing. A path
// the topology does not show counts as SYS (only NCCL_NET_GDR_LEVEL=SYS
// enables GDR then). dma-buf is preferred when both ways are offered.
Result<GdrChoice> DecideGdr(const GdrFacts& facts);

// Whether the nvidia_peermem (or the older nv_peer_mem) module is loaded,
// as `modules` (a /proc/modules listing) says.
bool PeerMemLoaded(const char* modules = "/proc/modules");

// The device allocation holding an address, as the CUDA layer tells it:
// its range and, when asked for, a dma-buf descriptor of it (the caller
// closes it). Set by the communicator; the IB layer never links CUDA.
struct DeviceAllocation {
  uintptr_t base = 0;
  size_t bytes = 0;
  int dmabuf_fd = -1;
};
using DeviceAllocationFn = std::function<Result<DeviceAllocation>(const void* ptr, bool dmabuf)>;

}  // namespace loom::ib
