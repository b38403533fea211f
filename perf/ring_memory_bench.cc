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
// "8 B exchange" is the least a 2-rank 8-byte all-reduce over shared memory
// can take: each thread writes its value and a serial into its own cache
// line (one of two, as loom's small-collective slots alternate), waits for
// the other thread's serial and adds the other's value, back to back; the
// time per round is one handover of a cache line between the cores, with no
// library around it. Printed in microseconds.
//
//   ring_memory_bench [--bytes N] [--reps R] [--threads T] [--rounds K]
//   (--rounds: of the 8-byte exchange per timed run, default 200000)
#include <sched.h>

#include <algorithm>
#include <atomic>
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

// One thread's slots for the 8-byte exchange: a cache line each.
struct alignas(64) ExchangeSlot {
  std::atomic<uint64_t> serial{0};
  float value[2] = {1.0f, 2.0f};
};
struct ExchangeMailbox {
  ExchangeSlot slot[2];
};

// Rounds of the 8-byte exchange between `own` and `peer`'s mailboxes; the
// sum keeps the reads. Spins with a pause, yielding after 256 polls (some
// microseconds, far more than a round takes on two free cores) so that two
// threads sharing a core still finish.
float ExchangeRounds(ExchangeMailbox& own, const ExchangeMailbox& peer, uint64_t first, int rounds) {
  float sum = 0;
  for (uint64_t k = first; k < first + static_cast<uint64_t>(rounds); ++k) {
    ExchangeSlot& mine = own.slot[k % 2];
    mine.value[0] = static_cast<float>(k);
    mine.serial.store(k + 1, std::memory_order_release);
    const ExchangeSlot& theirs = peer.slot[k % 2];
    for (unsigned polls = 1; theirs.serial.load(std::memory_order_acquire) != k + 1; ++polls) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (polls % 256 == 0) sched_yield();
    }
    sum += theirs.value[0] + theirs.value[1];
  }
  return sum;
}

// Median microseconds per round of the 8-byte exchange between 2 threads.
double MeasureExchange(int reps, int rounds) {
  ExchangeMailbox box[2];
  std::vector<double> us;
  uint64_t first = 0;
  for (int rep = 0; rep < reps + 1; ++rep) {  // the first run warms up
    const auto t0 = std::chrono::steady_clock::now();
    float sums[2] = {0, 0};
    std::thread other([&] { sums[1] = ExchangeRounds(box[1], box[0], first, rounds); });
    sums[0] = ExchangeRounds(box[0], box[1], first, rounds);
    other.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (sums[0] != sums[1]) {
      std::fprintf(stderr, "ring_memory_bench: the 8 B exchange read wrong values\n");
      std::exit(1);
    }
    if (rep > 0) us.push_back(s * 1e6 / rounds);
    first += static_cast<uint64_t>(rounds);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
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
               "2 MiB)] [--reps R] [--threads T] [--rounds K]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{256} << 20;
  int reps = 7, threads = 2, rounds = 200000;
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
    } else if (arg == "--rounds") {
      rounds = static_cast<int>(v);
    } else {
      Usage(("unknown flag " + arg).c_str());
    }
  }
  if (bytes == 0 || bytes % kPiece != 0) Usage("--bytes must be a positive multiple of 2 MiB");
  if (reps < 1 || threads < 1 || rounds < 1) {
    Usage("--reps, --threads and --rounds must be at least 1");
  }

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
  std::printf("%-30s %8s\n", "# pattern", "us");
  std::printf("%-30s %8.3f us\n", "8 B exchange", MeasureExchange(reps, rounds));
  return 0;
}
