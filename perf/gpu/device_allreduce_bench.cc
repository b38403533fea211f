// All-reduce bus bandwidth on device buffers between processes on one GPU,
// with nccl-tests' columns and formula (busbw = algbw * 2(n-1)/n), through
// the communicator's stream form: CUDA IPC by default, staging through
// pinned host memory with --p2p-disable (NCCL_P2P_DISABLE=1). --register
// registers both buffers with the communicator (nccl-tests' -R 1), so peers
// keep their IPC mappings instead of mapping per operation (or copying in:
// LOOM_CUDA_IPC_COPY_BYTES).
//
//   device_allreduce_bench [-n ranks] [-b min_bytes] [-e max_bytes] [--iters N] [--p2p-disable]
//                          [--register]
//
// Every rank is a forked child (a CUDA context does not survive fork); the
// parent hosts the rendezvous store only. Each size is checked once (fp32
// sum of rank+1 over n ranks) before it is timed. Exit status: 0, 77 without
// a device (a skip for ctest), 1 on a failure or a wrong result.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.hpp"
#include "transports/cuda/cuda_runtime.h"

namespace {

constexpr int kSkip = 77;

struct Options {
  int ranks = 2;
  size_t min_bytes = 8;
  size_t max_bytes = size_t{256} << 20;
  int iters = 20;
  bool p2p_disable = false;
  bool register_buffers = false;
};

#define CHECK_CUDA(call)                                                               \
  do {                                                                                 \
    cudaError_t _e = (call);                                                           \
    if (_e != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(_e));          \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

int Rank(int from_parent, int rank, const Options& o) {
  loom::UniqueId id;
  if (read(from_parent, id.bytes.data(), id.bytes.size()) != static_cast<ssize_t>(id.bytes.size())) {
    return 1;
  }
  if (loom::cuda::DeviceCount() == 0) return kSkip;
  CHECK_CUDA(cudaSetDevice(0));
  auto comm = loom::Communicator::Create(id, rank, o.ranks);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().ToString().c_str());
    return 1;
  }
  loom::Communicator& c = **comm;
  cudaStream_t s = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void *send = nullptr, *recv = nullptr;
  CHECK_CUDA(cudaMalloc(&send, o.max_bytes));
  CHECK_CUDA(cudaMalloc(&recv, o.max_bytes));
  uint64_t registered[2] = {0, 0};
  if (o.register_buffers) {
    auto hs = c.RegisterBuffer(send, o.max_bytes);
    auto hr = c.RegisterBuffer(recv, o.max_bytes);
    if (!hs.ok() || !hr.ok()) {
      std::fprintf(stderr, "rank %d: RegisterBuffer: %s %s\n", rank, hs.status().ToString().c_str(),
                   hr.status().ToString().c_str());
      return 1;
    }
    registered[0] = hs.value();
    registered[1] = hr.value();
  }
  if (rank == 0) {
    const char* copy_bytes = std::getenv("LOOM_CUDA_IPC_COPY_BYTES");
    std::printf("# device all-reduce, %d processes on one GPU, %s%s%s%s\n", o.ranks,
                o.p2p_disable ? "staged through pinned host memory (NCCL_P2P_DISABLE=1)"
                              : "CUDA IPC",
                o.register_buffers ? ", registered buffers" : "",
                copy_bytes != nullptr ? ", LOOM_CUDA_IPC_COPY_BYTES=" : "",
                copy_bytes != nullptr ? copy_bytes : "");
    std::printf("#%11s %12s %8s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop",
                "time(us)", "algbw", "busbw", "#wrong");
  }
  int bad_total = 0;
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    const size_t count = bytes / 4;
    if (count == 0) continue;
    // Check: every element of rank r is r+1; the sum is n(n+1)/2.
    std::vector<float> host(count, static_cast<float>(rank + 1));
    CHECK_CUDA(cudaMemcpyAsync(send, host.data(), count * 4, cudaMemcpyHostToDevice, s));
    if (!c.AllReduce(send, recv, count, loom::DataType::kFloat32, loom::RedOp::kSum, s).ok()) return 1;
    CHECK_CUDA(cudaMemcpyAsync(host.data(), recv, count * 4, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    const float want = static_cast<float>(o.ranks * (o.ranks + 1) / 2);
    size_t wrong = 0;
    for (float v : host) wrong += v != want;
    bad_total += wrong != 0;
    const int iters = bytes >= (size_t{64} << 20) ? std::max(5, o.iters / 4) : o.iters;
    for (int i = 0; i < 3; ++i) {
      if (!c.AllReduce(send, recv, count, loom::DataType::kFloat32, loom::RedOp::kSum, s).ok()) return 1;
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    if (!c.Barrier().ok()) return 1;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      if (!c.AllReduce(send, recv, count, loom::DataType::kFloat32, loom::RedOp::kSum, s).ok()) return 1;
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    if (rank == 0) {
      const double algbw = static_cast<double>(count * 4) / us / 1e3;  // GB/s
      const double busbw = algbw * 2.0 * (o.ranks - 1) / o.ranks;
      std::printf("%12zu %12zu %8s %6s %10.1f %8.2f %8.2f %7zu\n", count * 4, count, "float", "sum",
                  us, algbw, busbw, wrong);
    }
  }
  if (!c.AsyncError().ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, c.AsyncError().ToString().c_str());
    return 1;
  }
  for (uint64_t h : registered) {
    if (h != 0 && !c.DeregisterBuffer(h).ok()) {
      std::fprintf(stderr, "rank %d: DeregisterBuffer failed\n", rank);
      return 1;
    }
  }
  (void)cudaFree(send);
  (void)cudaFree(recv);
  (void)cudaStreamDestroy(s);
  return bad_total == 0 ? 0 : 1;
}

size_t ParseBytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end != nullptr ? *end : '\0') {
    case 'K': case 'k': v *= 1 << 10; break;
    case 'M': case 'm': v *= 1 << 20; break;
    case 'G': case 'g': v *= 1 << 30; break;
    default: break;
  }
  return static_cast<size_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "-n" && has_value) {
      o.ranks = std::atoi(argv[++i]);
    } else if (a == "-b" && has_value) {
      o.min_bytes = ParseBytes(argv[++i]);
    } else if (a == "-e" && has_value) {
      o.max_bytes = ParseBytes(argv[++i]);
    } else if (a == "--iters" && has_value) {
      o.iters = std::atoi(argv[++i]);
    } else if (a == "--register") {
      o.register_buffers = true;
    } else if (a == "--p2p-disable") {
      o.p2p_disable = true;
    } else if (a == "--quick") {
      o.min_bytes = 8;
      o.max_bytes = size_t{4} << 20;
      o.iters = 5;
    } else {
      std::fprintf(stderr,
                   "usage: %s [-n ranks] [-b min_bytes] [-e max_bytes] [--iters N] [--p2p-disable] "
                   "[--register] [--quick]\n",
                   argv[0]);
      return 2;
    }
  }
  if (o.ranks < 1 || o.min_bytes == 0 || o.min_bytes > o.max_bytes || o.iters < 1) {
    std::fprintf(stderr, "bad options: need -n >= 1, 0 < -b <= -e, --iters >= 1\n");
    return 2;
  }
  if (o.p2p_disable) setenv("NCCL_P2P_DISABLE", "1", 1);
  std::fflush(stdout);
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 0; r < o.ranks; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      close(fds[1]);
      const int rc = Rank(fds[0], r, o);
      std::fflush(stdout);
      std::_Exit(rc);
    }
    close(fds[0]);
    pids.push_back(pid);
    pipes.push_back(fds[1]);
  }
  auto id = loom::UniqueId::Create();  // after the forks: the store thread lives here only
  if (!id.ok()) {
    std::fprintf(stderr, "%s\n", id.status().ToString().c_str());
    return 1;
  }
  for (int fd : pipes) {
    if (write(fd, id->bytes.data(), id->bytes.size()) != static_cast<ssize_t>(id->bytes.size())) {
      return 1;
    }
    close(fd);
  }
  int rc = 0;
  for (pid_t pid : pids) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
      rc = 1;
      continue;
    }
    const int code = WEXITSTATUS(status);
    if (code == kSkip) {
      if (rc == 0) rc = kSkip;
    } else if (code != 0) {
      rc = 1;
    }
  }
  if (rc == kSkip) std::fprintf(stderr, "no CUDA device visible: skipped\n");
  return rc;
}
