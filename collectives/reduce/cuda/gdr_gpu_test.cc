// GPU test (label gpu, skips without a device): the CUDA half of GPUDirect
// RDMA, which needs no HCA: the allocation around a device pointer, widened
// to host pages; a dma-buf descriptor of it where the driver offers one;
// and the flush of the NIC's writes. The verbs half (ibv_reg_dmabuf_mr)
// needs an RDMA device and is not covered here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "transports/cuda/cuda_runtime.h"
#include "collectives/reduce/cuda/cuda_device_ops.h"

namespace loom::cuda {
namespace {

TEST(GdrGpu, AllocationOfCoversTheBufferAndExportsADmaBuf) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  DeviceOps& ops = CudaDeviceOps();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, (3 << 20) + 100), cudaSuccess);
  char* inner = static_cast<char*>(p) + 12345;
  auto range = ops.AllocationOf(inner, /*dmabuf=*/false);
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(range->base % page, 0u);
  EXPECT_EQ(range->bytes % page, 0u);
  EXPECT_LE(range->base, reinterpret_cast<uintptr_t>(p));
  EXPECT_GE(range->base + range->bytes, reinterpret_cast<uintptr_t>(p) + (3 << 20) + 100);
  EXPECT_EQ(range->dmabuf_fd, -1);
  auto supported = ops.DmaBufSupported();
  ASSERT_TRUE(supported.ok()) << supported.status().ToString();
  std::printf("dma-buf export supported: %s\n", supported.value() ? "yes" : "no");
  if (supported.value()) {
    auto buf = ops.AllocationOf(inner, /*dmabuf=*/true);
    ASSERT_TRUE(buf.ok()) << buf.status().ToString();
    EXPECT_GE(buf->dmabuf_fd, 0);
    EXPECT_EQ(buf->base, range->base);
    close(buf->dmabuf_fd);
  }
  EXPECT_TRUE(ops.FlushRdmaWrites().ok());
  int host = 0;
  EXPECT_FALSE(ops.AllocationOf(&host, false).ok());
  ASSERT_EQ(cudaFree(p), cudaSuccess);
}

}  // namespace
}  // namespace loom::cuda
