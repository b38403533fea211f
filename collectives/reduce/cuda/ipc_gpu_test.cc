// GPU test (label gpu, skips without a device): two processes on one GPU
// share a device buffer through the real IPC backend and the mapping cache,
// and a reduction kernel reads the peer's memory directly.
//
// The process forks before any CUDA call (a CUDA context does not survive
// fork), so this test lives in its own binary and must run first in it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "collectives/reduce/cuda/reduce_cuda.h"
#include "transports/cuda/cuda_runtime.h"
#include "transports/cuda/ipc.h"

namespace loom::cuda {
namespace {

constexpr size_t kCount = (1 << 20) + 5;
constexpr int kSkip = 77;

bool WriteAll(int fd, const void* p, size_t n) {
  return write(fd, p, n) == static_cast<ssize_t>(n);
}
bool ReadAll(int fd, void* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = read(fd, static_cast<char*>(p) + got, n - got);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

// Child: owns a buffer of 2.0f, exports it, waits for the parent's verdict,
// then frees. Exit code: 0, kSkip (no device) or 1.
int Owner(int to_parent, int from_parent) {
  if (DeviceCount() == 0) return kSkip;
  void* raw = nullptr;
  if (cudaMalloc(&raw, kCount * sizeof(float) + 256) != cudaSuccess) return 1;
  float* buf = static_cast<float*>(raw);
  std::vector<float> ones(kCount, 2.0f);
  if (cudaMemcpy(buf + 16, ones.data(), kCount * sizeof(float), cudaMemcpyHostToDevice) !=
      cudaSuccess) {
    return 1;
  }
  Result<IpcExport> e = MakeCudaIpcBackend()->Export(buf + 16);  // interior pointer
  if (!e.ok() || !WriteAll(to_parent, &e.value(), sizeof(IpcExport))) return 1;
  char done = 0;
  if (!ReadAll(from_parent, &done, 1)) return 1;
  return cudaFree(buf) == cudaSuccess ? 0 : 1;
}

TEST(CudaIpcTwoProcesses, PeerBufferIsMappedOnceAndReadByAKernel) {
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    _exit(Owner(up[1], down[0]));
  }
  close(up[1]);
  close(down[0]);
  auto reap = [&] {
    close(down[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  if (DeviceCount() == 0) {
    EXPECT_EQ(reap(), kSkip);
    GTEST_SKIP() << "no CUDA device";
  }
  IpcExport e;
  ASSERT_TRUE(ReadAll(up[0], &e, sizeof(e))) << "owner failed before exporting";
  EXPECT_EQ(e.offset, 16 * sizeof(float));

  auto backend = MakeCudaIpcBackend();
  std::vector<float> out(kCount);
  {
    IpcMappingCache cache(backend.get());
    Result<void*> peer = cache.Map(1, e, true);
    ASSERT_TRUE(peer.ok()) << peer.status().ToString();
    Result<void*> again = cache.Map(1, e, true);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(peer.value(), again.value());
    EXPECT_EQ(cache.stats().opens, 1u);

    Result<Stream> s = Stream::Create();
    ASSERT_TRUE(s.ok());
    void* mine = nullptr;
    ASSERT_EQ(cudaMalloc(&mine, kCount * sizeof(float)), cudaSuccess);
    std::vector<float> threes(kCount, 3.0f);
    ASSERT_EQ(cudaMemcpy(mine, threes.data(), kCount * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    // mine = mine + peer, reading the peer's memory in place.
    ASSERT_TRUE(
        CudaReduceInto(mine, mine, peer.value(), kCount, DataType::kFloat32, RedOp::kSum, s->get())
            .ok());
    ASSERT_TRUE(s->Synchronize().ok());
    ASSERT_EQ(cudaMemcpy(out.data(), mine, kCount * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(cudaFree(mine), cudaSuccess);
  }  // the cache closes the mapping before the owner frees
  const char done = 1;
  ASSERT_TRUE(WriteAll(down[1], &done, 1));
  EXPECT_EQ(reap(), 0);
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(out[i], 5.0f) << i;
}

}  // namespace
}  // namespace loom::cuda
