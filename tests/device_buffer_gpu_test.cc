// GPU test (label gpu, skips without a device): device-buffer conformance for
// every collective x datatype x op with 2 and 4 processes on one GPU, through
// the real DeviceOps (CUDA runtime, cuStreamWaitValue64): collectives read
// peers' buffers through CUDA IPC (the default) or, with NCCL_P2P_DISABLE=1,
// are staged via pinned host memory over the host transports. Also buffer
// registration through IPC across processes.
//
// Every rank is a forked child; the parent never calls CUDA (a CUDA context
// does not survive fork), it only hosts the rendezvous store and collects
// exit codes. The id travels to the children through pipes after the fork.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "tests/device_conformance.h"
#include "transports/cuda/cuda_runtime.h"

namespace loom::testing {
namespace {

constexpr int kSkip = 77;

class CudaHooks final : public DeviceHooks {
 public:
  explicit CudaHooks(cudaStream_t s) : s_(s) {}
  void* Alloc(size_t bytes) override {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    return p;
  }
  void Free(void* p) override { EXPECT_EQ(cudaFree(p), cudaSuccess); }
  void Upload(void* dev, const void* host, size_t bytes) override {
    EXPECT_EQ(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s_), cudaSuccess);
  }
  void Download(void* host, const void* dev, size_t bytes) override {
    EXPECT_EQ(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s_), cudaSuccess);
  }
  void Sync() override { ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess); }
  GpuStream stream() override { return s_; }

 private:
  cudaStream_t s_;
};

// Every collective x type x op against the CPU reference.
void Conformance(Communicator& comm, CudaHooks& hooks) {
  const std::vector<DataType> types = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                                       DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                                       DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                                       DataType::kBfloat16};
  CheckDeviceCollectives(comm, hooks, types, {0, 1, 7, 1031, (size_t{1} << 18) + 3});
}

// Registered buffers: peers keep their mapping across operations; rank 0
// deregisters and frees while the others wait in a barrier (their store
// readers close the mapping), then the others do; the communicator goes on.
void Registration(Communicator& comm, CudaHooks& hooks) {
  const size_t count = 1 << 16;
  const int n = comm.size();
  auto* buf = static_cast<float*>(hooks.Alloc(count * 4));
  std::vector<float> host(count, static_cast<float>(comm.rank() + 1)), back(count);
  Result<uint64_t> h = comm.RegisterBuffer(buf, count * 4);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  for (int i = 0; i < 5; ++i) {
    hooks.Upload(buf, host.data(), count * 4);
    ASSERT_TRUE(
        comm.AllReduce(buf, buf, count, DataType::kFloat32, RedOp::kSum, hooks.stream()).ok());
    hooks.Download(back.data(), buf, count * 4);
    hooks.Sync();
    ASSERT_EQ(back[count - 1], n * (n + 1) / 2.0f) << "round " << i;
  }
  if (comm.rank() == 0) {
    ASSERT_TRUE(comm.DeregisterBuffer(h.value()).ok());
    hooks.Free(buf);
  }
  ASSERT_TRUE(comm.Barrier().ok());
  if (comm.rank() != 0) {
    ASSERT_TRUE(comm.DeregisterBuffer(h.value()).ok());
    hooks.Free(buf);
  }
  auto* fresh = static_cast<float*>(hooks.Alloc(count * 4));
  hooks.Upload(fresh, host.data(), count * 4);
  ASSERT_TRUE(
      comm.AllReduce(fresh, fresh, count, DataType::kFloat32, RedOp::kSum, hooks.stream()).ok());
  hooks.Download(back.data(), fresh, count * 4);
  hooks.Sync();
  EXPECT_EQ(back[0], n * (n + 1) / 2.0f);
  hooks.Free(fresh);
}

using Body = void (*)(Communicator&, CudaHooks&);

// One rank in a child process. Exit code: 0, kSkip or 1.
int Rank(int from_parent, int rank, int size, Body body) {
  UniqueId id;
  if (read(from_parent, id.bytes.data(), id.bytes.size()) != static_cast<ssize_t>(id.bytes.size())) {
    return 1;
  }
  if (cuda::DeviceCount() == 0) return kSkip;
  if (cudaSetDevice(0) != cudaSuccess) return 1;
  auto comm = Communicator::Create(id, rank, size);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().ToString().c_str());
    return 1;
  }
  auto stream = cuda::Stream::Create();
  if (!stream.ok()) return 1;
  CudaHooks hooks(stream->get());
  body(**comm, hooks);
  const bool failed = ::testing::Test::HasFailure() || !(*comm)->AsyncError().ok();
  return failed ? 1 : 0;
}

// `p2p_disable`: the children run with NCCL_P2P_DISABLE=1 (staged path).
void RunProcesses(int size, bool p2p_disable = false, Body body = Conformance) {
  if (p2p_disable) setenv("NCCL_P2P_DISABLE", "1", 1);
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 0; r < size; ++r) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[1]);
      std::_Exit(Rank(fds[0], r, size, body));
    }
    close(fds[0]);
    pids.push_back(pid);
    if (r == size - 1) unsetenv("NCCL_P2P_DISABLE");
    pipes.push_back(fds[1]);
  }
  auto id = UniqueId::Create();  // after the forks: the store thread lives here only
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  for (int fd : pipes) {
    EXPECT_EQ(write(fd, id->bytes.data(), id->bytes.size()), static_cast<ssize_t>(id->bytes.size()));
    close(fd);
  }
  int skipped = 0;
  for (int r = 0; r < size; ++r) {
    int status = 0;
    ASSERT_EQ(waitpid(pids[r], &status, 0), pids[r]);
    ASSERT_TRUE(WIFEXITED(status)) << "rank " << r << " crashed";
    if (WEXITSTATUS(status) == kSkip) {
      ++skipped;
      continue;
    }
    EXPECT_EQ(WEXITSTATUS(status), 0) << "rank " << r << " failed (its output is above)";
  }
  if (skipped > 0) GTEST_SKIP() << "no CUDA device visible";
}

TEST(DeviceBuffersOnGpu, EveryCollectiveTwoProcessesOneGpu) { RunProcesses(2); }
TEST(DeviceBuffersOnGpu, EveryCollectiveFourProcessesOneGpu) { RunProcesses(4); }
TEST(DeviceBuffersOnGpu, EveryCollectiveTwoProcessesStaged) { RunProcesses(2, true); }
TEST(DeviceBuffersOnGpu, RegisteredBuffersThreeProcesses) {
  RunProcesses(3, false, Registration);
}

}  // namespace
}  // namespace loom::testing
