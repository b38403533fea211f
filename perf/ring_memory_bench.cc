// The memory traffic of a 2-rank ring all-reduce over shared memory, without
// the communication: what one rank's core does to its own buffers, run on
// every core at once (each "rank" a thread with its own buffers), so the
// figure is a ceiling for loom's all-reduce busbw on this machine that no
// protocol change can beat. Per 2 MiB piece (collectives/algos: the ring in
// pieces), with B0 the rank's own half and B1 the peer's:
//
//   fifo_out <- in[B1]                    the reduce-scatter send
//   out[B0]   = in[B0] + fifo_in          the reduction (loom::ReduceInto)
//   fifo_out <- out[B0]                   the all-gather send
//   out[B1]  <- fifo_in                   the all-gather receive
//
// The two 1 MiB FIFOs are private and stay in cache (the real ones move
// between cores, which costs more). "out of place" has its own out buffer,
// "in place" uses in; "streamed" writes out[B1] with streaming stores
// (transports/streaming.h). GB/s is the buffer's bytes over the time, the
// busbw the 2-rank all-reduce would reach if communication were free; "%"
// relates it to a single-thread memcpy of the same size measured in the
// same run, as perf/compare.sh does.
//
// "all-gather, one copy" is the least any 2-rank all-gather of `bytes` can
// do: each rank copies its own half-size input into out and reads the
// other rank's input (another thread's buffer) into the other half, one
// copy per block and no FIFO (Open MPI's pattern, without the system call
// and page pinning of its process_vm_readv). GB/s is out's bytes over the
// time, the all-gather's algbw (busbw is half of it at 2 ranks). "all-gather,
// through a FIFO" is loom's: per 2 MiB of out, the rank's 1 MiB of input is
// copied into the FIFO and, from the cache, into out; the peer's 1 MiB is
// copied out of the FIFO.
//
//   ring_memory_bench [--bytes N] [--reps R] [--threads T]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/reduce/reduce.h"
#include "transports/streaming.h"

namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, FreeDeleter>;

Buffer MakeTouched(size_t bytes) {
  Buffer b(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
  if (!b) {
    std::fprintf(stderr, "ring_memory_bench: cannot allocate %zu bytes\n", bytes);
    std::exit(1);
  }
  std::memset(b.get(), 0, bytes);  // zeros: the sums stay finite and exact
  return b;
}

enum class Pattern {
  kMemcpy,
  kOutOfPlace,
  kOutOfPlaceStreamed,
  kInPlace,
  kAllGather,
  kAllGatherFifo
};

constexpr size_t kPiece = size_t{2} << 20;
constexpr size_t kHalf = kPiece / 2;

struct Rank {
  Buffer in, out, fifo_in, fifo_out;
};

void RunRank(Rank& r, const Rank& peer, size_t bytes, Pattern p) {
  char* in = r.in.get();
  char* out = p == Pattern::kInPlace ? in : r.out.get();
  if (p == Pattern::kMemcpy) {
    std::memcpy(out, in, bytes);
    return;
  }
  if (p == Pattern::kAllGather) {
    std::memcpy(out, in, bytes / 2);
    std::memcpy(out + bytes / 2, peer.in.get(), bytes / 2);
    return;
  }
  if (p == Pattern::kAllGatherFifo) {
    for (size_t base = 0; base + kPiece <= bytes; base += kPiece) {
      std::memcpy(r.fifo_out.get(), in + base / 2, kHalf);
      std::memcpy(out + base / 2, in + base / 2, kHalf);
      std::memcpy(out + bytes / 2 + base / 2, r.fifo_in.get(), kHalf);
    }
    return;
  }
  for (size_t base = 0; base + kPiece <= bytes; base += kPiece) {
    std::memcpy(r.fifo_out.get(), in + base + kHalf, kHalf);
    loom::ReduceInto(out + base, in + base, r.fifo_in.get(), kHalf / sizeof(float),
                     loom::DataType::kFloat32, loom::RedOp::kSum);
    std::memcpy(r.fifo_out.get(), out + base, kHalf);
    if (p == Pattern::kOutOfPlaceStreamed) {
      loom::StreamingCopy(out + base + kHalf, r.fifo_in.get(), kHalf);
    } else {
      std::memcpy(out + base + kHalf, r.fifo_in.get(), kHalf);
    }
  }
}

// Median GB/s of `reps` runs of `p` on `threads` threads at once.
double Measure(std::vector<Rank>& ranks, int threads, size_t bytes, Pattern p, int reps) {
  std::vector<double> rates;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      const size_t me = static_cast<size_t>(t), other = (me + 1) % ranks.size();
      pool.emplace_back([&, me, other] { RunRank(ranks[me], ranks[other], bytes, p); });
    }
    for (std::thread& t : pool) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "ring_memory_bench: %s\nusage: ring_memory_bench [--bytes N (a multiple of "
               "2 MiB)] [--reps R] [--threads T]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{256} << 20;
  int reps = 7, threads = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) Usage(("missing value for " + arg).c_str());
    const long long v = std::atoll(argv[++i]);
    if (arg == "--bytes") {
      bytes = static_cast<size_t>(v);
    } else if (arg == "--reps") {
      reps = static_cast<int>(v);
    } else if (arg == "--threads") {
      threads = static_cast<int>(v);
    } else {
      Usage(("unknown flag " + arg).c_str());
    }
  }
  if (bytes == 0 || bytes % kPiece != 0) Usage("--bytes must be a positive multiple of 2 MiB");
  if (reps < 1 || threads < 1) Usage("--reps and --threads must be at least 1");

  std::vector<Rank> ranks(static_cast<size_t>(threads));
  for (Rank& r : ranks) {
    r.in = MakeTouched(bytes);
    r.out = MakeTouched(bytes);
    r.fifo_in = MakeTouched(kHalf);
    r.fifo_out = MakeTouched(kHalf);
  }
  struct Row {
    const char* name;
    Pattern pattern;
    int threads;
  };
  const Row rows[] = {
      {"memcpy, 1 thread", Pattern::kMemcpy, 1},
      {"memcpy", Pattern::kMemcpy, threads},
      {"ring out of place", Pattern::kOutOfPlace, threads},
      {"ring out of place, streamed", Pattern::kOutOfPlaceStreamed, threads},
      {"ring in place", Pattern::kInPlace, threads},
      {"all-gather, one copy", Pattern::kAllGather, threads},
      {"all-gather, through a FIFO", Pattern::kAllGatherFifo, threads},
  };
  std::printf("# %zu bytes, %d threads (ranks) at once, median of %d\n", bytes, threads, reps);
  std::printf("%-30s %8s %8s\n", "# pattern", "GB/s", "%memcpy");
  double memcpy_rate = 0;
  for (const Row& row : rows) {
    const double rate = Measure(ranks, row.threads, bytes, row.pattern, reps);
    if (memcpy_rate == 0) memcpy_rate = rate;
    std::printf("%-30s %8.2f %7.0f%%\n", row.name, rate, 100 * rate / memcpy_rate);
  }
  return 0;
}
