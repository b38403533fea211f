// Google Benchmark: one-way latency and bandwidth of Send/Recv ping-pong
// between two ranks of this process (threads), over shared memory and over
// TCP on loopback: the whole stack (issue, engine, transport) per message.
//   build/perf/pingpong_bench [--benchmark_filter=Shm]
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "loom/loom.hpp"

namespace {

// A connected pair: rank 1 echoes on its own thread until told to stop.
class Pair {
 public:
  explicit Pair(bool tcp) {
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    if (tcp) setenv("NCCL_SHM_DISABLE", "1", 1);
    auto id = loom::UniqueId::Create();
    if (!id.ok()) std::abort();
    std::thread t([&] { peer_ = std::move(loom::Communicator::Create(*id, 1, 2).value()); });
    me_ = std::move(loom::Communicator::Create(*id, 0, 2).value());
    t.join();
    unsetenv("NCCL_SHM_DISABLE");
    echo_ = std::thread([this] { Echo(); });
  }
  ~Pair() {
    int64_t stop[2] = {-1, 0};
    (void)me_->Send(stop, 2, loom::DataType::kInt64, 1);
    echo_.join();
  }

  // Round trips of `bytes`; returns false on error.
  bool RoundTrips(int64_t iters, size_t bytes) {
    int64_t cmd[2] = {iters, static_cast<int64_t>(bytes)};
    if (!me_->Send(cmd, 2, loom::DataType::kInt64, 1).ok()) return false;
    buf_.resize(bytes);
    for (int64_t i = 0; i < iters; ++i) {
      if (!me_->Send(buf_.data(), bytes, loom::DataType::kUint8, 1).ok()) return false;
      if (!me_->Recv(buf_.data(), bytes, loom::DataType::kUint8, 1).ok()) return false;
    }
    return true;
  }

 private:
  void Echo() {
    std::vector<char> b;
    for (;;) {
      int64_t cmd[2];
      if (!peer_->Recv(cmd, 2, loom::DataType::kInt64, 0).ok() || cmd[0] < 0) return;
      b.resize(static_cast<size_t>(cmd[1]));
      for (int64_t i = 0; i < cmd[0]; ++i) {
        if (!peer_->Recv(b.data(), b.size(), loom::DataType::kUint8, 0).ok()) return;
        if (!peer_->Send(b.data(), b.size(), loom::DataType::kUint8, 0).ok()) return;
      }
    }
  }

  std::unique_ptr<loom::Communicator> me_, peer_;
  std::thread echo_;
  std::vector<char> buf_;
};

Pair& GetPair(bool tcp) {
  static Pair shm(false);
  static Pair sock(true);
  return tcp ? sock : shm;
}

void PingPong(benchmark::State& state, bool tcp) {
  Pair& p = GetPair(tcp);
  const size_t bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    if (!p.RoundTrips(1, bytes)) state.SkipWithError("send/recv failed");
  }
  // One-way time is half a round trip; bytes cross twice per iteration.
  state.counters["one_way_us"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2, benchmark::Counter::kIsRate | benchmark::Counter::kInvert,
      benchmark::Counter::kIs1000);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * static_cast<int64_t>(bytes));
}

void Shm(benchmark::State& s) { PingPong(s, false); }
void Tcp(benchmark::State& s) { PingPong(s, true); }

BENCHMARK(Shm)->RangeMultiplier(16)->Range(8, 16 << 20)->UseRealTime();
BENCHMARK(Tcp)->RangeMultiplier(16)->Range(8, 16 << 20)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
