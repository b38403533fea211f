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
// "In cache" rows time the 2-rank all-gather where the anchors time it at
// mid sizes: the same buffers over and over, so the peer's input waits in
// the other core's cache. Two persistent threads, each bound to a core of
// its own (as compare.sh --bind core binds the ranks), meet at a spin
// barrier before every call; us per call, median of the runs. Each rank
// copies its own block into out and gets the peer's block:
//   "by loads":           plain loads of the peer's input (only possible
//                         where the peer's buffer is mapped here: shareable
//                         buffers, loom perf -R 1);
//   "by process_vm_readv": the kernel's single copy between address spaces
//                         (CMA), the only single copy of a buffer that is
//                         not mapped here (Open MPI's all-gather, loom's
//                         Direct over plain buffers);
//   "through a FIFO":     loom's ring over plain buffers: the input is
//                         copied into a 1 MiB FIFO that the peer copies out
//                         of (a barrier between the halves), three copies;
//                         "streamed": written into the FIFO around the
//                         cache, as loom's sends stream when that is faster
//                         (comm/stream_chooser.h); "pipelined": the same
//                         copies 32 KiB at a time, the peer taking each
//                         slot as soon as it is published, as loom's
//                         engine overlaps them (without it, loom's own
//                         all-gather beat these rows on one VM).
// These rows copy with loom's CopyBytes (transports/copy.h), as loom's data
// path does. The least of the last four is the ceiling perf/compare.sh sets
// an all-gather of plain malloc'd buffers against, the first one of
// shareable buffers: the least copies, not a strict bound (how they
// overlap matters, as the pipelined row showed).
//
// "reduce-scatter out of place" is the same for loom's 2-rank ring
// reduce-scatter of `bytes` (each rank's input; its output is the half it
// owns): the first two lines above, per 1 MiB of output, the reduction
// landing through the cache or ("streamed") with streaming stores, as loom
// lands a final reduction of at least transports/streaming.h's size. (Its
// halves are the pieces' halves here, not the buffer's: the same bytes read
// and written.) GB/s is the input's bytes over the time, the
// reduce-scatter's algbw (busbw: half of it).
//
// "8 B exchange" is the least a 2-rank 8-byte all-reduce over shared memory
// can take: each thread writes its value and a serial into its own cache
// line (one of two, as loom's small-collective slots alternate), waits for
// the other thread's serial and adds the other's value, back to back; the
// time per round is one handover of a cache line between the cores, with no
// library around it. Printed in microseconds.
//
//   ring_memory_bench [--bytes N] [--reps R] [--threads T] [--rounds K]
//                     [--cached-sizes LIST]
//   (--rounds: of the 8-byte exchange per timed run, default 200000;
//   --cached-sizes: the in-cache all-gather's total sizes in bytes, comma
//   separated, default 262144,2097152,16777216; 0 for none)
#include <pthread.h>
#include <sched.h>
#include <sys/uio.h>

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
#include "tools/run/binding.h"
#include "transports/copy.h"
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
  kAllGatherFifo,
  kReduceScatter,
  kReduceScatterStreamed
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
  const bool reduce_scatter = p == Pattern::kReduceScatter || p == Pattern::kReduceScatterStreamed;
  for (size_t base = 0; base + kPiece <= bytes; base += kPiece) {
    std::memcpy(r.fifo_out.get(), in + base + kHalf, kHalf);
    if (p == Pattern::kReduceScatterStreamed) {
      loom::StreamingReduce(loom::ReduceInto, out + base, in + base, r.fifo_in.get(),
                            kHalf / sizeof(float), loom::DataType::kFloat32, loom::RedOp::kSum);
    } else {
      loom::ReduceInto(out + base, in + base, r.fifo_in.get(), kHalf / sizeof(float),
                       loom::DataType::kFloat32, loom::RedOp::kSum);
    }
    if (reduce_scatter) continue;  // its whole traffic: the ring's first two lines
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

// Two threads meeting between calls: a counter each, spun on (yielding
// now and then, as ExchangeRounds does, so that a shared core still ends).
class SpinBarrier {
 public:
  void Arrive(int me) {
    const uint64_t gen = ++arrived_[me].n;
    arrived_[me].v.store(gen, std::memory_order_release);
    for (unsigned polls = 1; arrived_[1 - me].v.load(std::memory_order_acquire) < gen; ++polls) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (polls % 256 == 0) sched_yield();
    }
  }

 private:
  struct alignas(64) Counter {
    std::atomic<uint64_t> v{0};
    uint64_t n = 0;  // owner's count
  };
  Counter arrived_[2];
};

enum class CachedPattern { kLoads, kProcessVmReadv, kFifo, kFifoStreamed, kFifoPipelined };

constexpr size_t kFifoBytes = size_t{1} << 20;  // loom's shared-memory FIFO
// The pipelined FIFO's unit: the writer publishes, and the peer takes, a
// slot at a time.
constexpr size_t kFifoSlotBytes = size_t{32} << 10;

struct CachedRank {
  Buffer in, out, fifo;
  // The pipelined FIFO's counts of slots, over all calls: written into this
  // rank's FIFO by it, and taken out of it by the peer.
  alignas(64) std::atomic<uint64_t> written{0};
  alignas(64) std::atomic<uint64_t> taken{0};
};

// The pipelined FIFO: each rank writes its block into its FIFO a slot at a
// time (and into its own place), and takes the peer's slots as they are
// published, in one loop, as loom's engine does: the peer's reads overlap
// the writes.
void PipelinedFifoCall(CachedRank& r, CachedRank& peer, char* own_out, char* peer_out,
                       size_t block) {
  const uint64_t slots = kFifoBytes / kFifoSlotBytes;
  const uint64_t units = (block + kFifoSlotBytes - 1) / kFifoSlotBytes;
  const uint64_t base = r.written.load(std::memory_order_relaxed);  // both ranks: the same
  uint64_t wrote = 0, took = 0;
  while (wrote < units || took < units) {
    bool moved = false;
    if (wrote < units && base + wrote - peer.taken.load(std::memory_order_acquire) < slots) {
      const size_t off = wrote * kFifoSlotBytes, n = std::min(kFifoSlotBytes, block - off);
      loom::CopyBytes(r.fifo.get() + ((base + wrote) % slots) * kFifoSlotBytes, r.in.get() + off,
                      n);
      loom::CopyBytes(own_out + off, r.in.get() + off, n);
      r.written.store(base + ++wrote, std::memory_order_release);
      moved = true;
    }
    if (took < units && peer.written.load(std::memory_order_acquire) > base + took) {
      const size_t off = took * kFifoSlotBytes, n = std::min(kFifoSlotBytes, block - off);
      loom::CopyBytes(peer_out + off, peer.fifo.get() + ((base + took) % slots) * kFifoSlotBytes,
                      n);
      peer.taken.store(base + ++took, std::memory_order_release);
      moved = true;
    }
#if defined(__x86_64__) || defined(__i386__)
    if (!moved) __builtin_ia32_pause();
#endif
  }
}

// One call of the 2-rank all-gather of `bytes` (out holds both blocks in
// rank order) on rank `me`.
void CachedCall(std::vector<CachedRank>& ranks, int me, size_t bytes, CachedPattern p,
                SpinBarrier& barrier) {
  const size_t block = bytes / 2;
  CachedRank& r = ranks[static_cast<size_t>(me)];
  CachedRank& peer = ranks[static_cast<size_t>(1 - me)];
  char* own_out = r.out.get() + static_cast<size_t>(me) * block;
  char* peer_out = r.out.get() + static_cast<size_t>(1 - me) * block;
  if (p == CachedPattern::kFifoPipelined) {
    PipelinedFifoCall(r, peer, own_out, peer_out, block);
    return;
  }
  if (p == CachedPattern::kFifo || p == CachedPattern::kFifoStreamed) {
    for (size_t off = 0; off < block; off += kFifoBytes) {
      const size_t n = std::min(kFifoBytes, block - off);
      if (p == CachedPattern::kFifoStreamed) {
        loom::StreamingCopy(r.fifo.get(), r.in.get() + off, n);
      } else {
        loom::CopyBytes(r.fifo.get(), r.in.get() + off, n);
      }
      loom::CopyBytes(own_out + off, r.in.get() + off, n);
      barrier.Arrive(me);
      loom::CopyBytes(peer_out + off, peer.fifo.get(), n);
      barrier.Arrive(me);
    }
    return;
  }
  loom::CopyBytes(own_out, r.in.get(), block);
  if (p == CachedPattern::kLoads) {
    loom::CopyBytes(peer_out, peer.in.get(), block);
    return;
  }
  iovec local{peer_out, block};
  iovec remote{peer.in.get(), block};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(block)) {
    std::perror("ring_memory_bench: process_vm_readv");
    std::exit(1);
  }
}

// The CPUs each rank's thread is bound to: a core each, as `loom run
// --bind-to core` (compare.sh --bind core) binds the ranks; none where this
// process may use fewer than 2 cores.
std::vector<std::vector<int>> RankCores() {
  using namespace loom::tools;
  const std::vector<int> allowed = AllowedCpus();
  auto placement = Bindings(BindTo::kCore, 2, GroupCpus(allowed, CoreCpusList),
                            GroupCpus(allowed, NumaNodeOf));
  return placement.ok() ? placement->cpus : std::vector<std::vector<int>>{};
}

void BindThread(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// Median us per call of `reps` timed runs of the in-cache all-gather, rank
// r's thread bound to cores[r] (when given).
double MeasureCached(size_t bytes, CachedPattern p, int reps,
                     const std::vector<std::vector<int>>& cores) {
  std::vector<CachedRank> ranks(2);
  for (CachedRank& r : ranks) {
    r.in = MakeTouched(bytes / 2);
    r.out = MakeTouched(bytes);
    r.fifo = MakeTouched(kFifoBytes);
  }
  // About 30 ms per timed run at a few GB/s, at least 10 calls.
  const int calls = static_cast<int>(std::clamp<size_t>((size_t{96} << 20) / bytes, 10, 2000));
  std::vector<double> us;
  SpinBarrier barrier;
  auto rank = [&](int me) {
    if (cores.size() == 2) BindThread(cores[static_cast<size_t>(me)]);
    for (int rep = 0; rep <= reps; ++rep) {  // the first run warms up
      barrier.Arrive(me);
      const auto t0 = std::chrono::steady_clock::now();
      for (int c = 0; c < calls; ++c) {
        barrier.Arrive(me);
        CachedCall(ranks, me, bytes, p, barrier);
      }
      barrier.Arrive(me);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (me == 0 && rep > 0) us.push_back(s * 1e6 / calls);
    }
  };
  std::thread first(rank, 0), second(rank, 1);
  first.join();
  second.join();
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "ring_memory_bench: %s\nusage: ring_memory_bench [--bytes N (a multiple of "
               "2 MiB)] [--reps R] [--threads T] [--rounds K] [--cached-sizes LIST]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{256} << 20;
  int reps = 7, threads = 2, rounds = 200000;
  std::vector<size_t> cached_sizes = {size_t{256} << 10, size_t{2} << 20, size_t{16} << 20};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) Usage(("missing value for " + arg).c_str());
    const long long v = std::atoll(argv[++i]);
    if (arg == "--cached-sizes") {
      cached_sizes.clear();
      for (const char* at = argv[i]; *at != '\0';) {
        char* end = nullptr;
        const unsigned long long n = std::strtoull(at, &end, 10);
        if (end == at || (*end != ',' && *end != '\0')) {
          Usage("--cached-sizes takes bytes, comma separated");
        }
        if (n > 0 && n % 128 != 0) Usage("--cached-sizes must be multiples of 128 bytes");
        if (n > 0) cached_sizes.push_back(static_cast<size_t>(n));
        at = *end == ',' ? end + 1 : end;
      }
    } else if (arg == "--bytes") {
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
      {"reduce-scatter out of place", Pattern::kReduceScatter, threads},
      {"reduce-scatter out of place, streamed", Pattern::kReduceScatterStreamed, threads},
  };
  std::printf("# %zu bytes, %d threads (ranks) at once, median of %d\n", bytes, threads, reps);
  std::printf("%-38s %8s %8s\n", "# pattern", "GB/s", "%memcpy");
  double memcpy_rate = 0;
  for (const Row& row : rows) {
    const double rate = Measure(ranks, row.threads, bytes, row.pattern, reps);
    if (memcpy_rate == 0) memcpy_rate = rate;
    std::printf("%-38s %8.2f %7.0f%%\n", row.name, rate, 100 * rate / memcpy_rate);
  }
  std::printf("%-30s %8s\n", "# pattern", "us");
  std::printf("%-30s %8.3f us\n", "8 B exchange", MeasureExchange(reps, rounds));
  if (!cached_sizes.empty()) {
    std::printf(
        "# in cache: the 2-rank all-gather of the same buffers over and over, a thread per\n"
        "# rank bound to a core of its own, us per call, median of %d\n",
        reps);
    std::printf("%-46s %10s %10s\n", "# pattern", "bytes", "us");
    const struct {
      const char* name;
      CachedPattern pattern;
    } cached_rows[] = {
        {"all-gather in cache, by loads", CachedPattern::kLoads},
        {"all-gather in cache, by process_vm_readv", CachedPattern::kProcessVmReadv},
        {"all-gather in cache, through a FIFO", CachedPattern::kFifo},
        {"all-gather in cache, through a FIFO, streamed", CachedPattern::kFifoStreamed},
        {"all-gather in cache, through a FIFO, pipelined", CachedPattern::kFifoPipelined},
    };
    const std::vector<std::vector<int>> cores = RankCores();
    for (size_t bytes : cached_sizes) {
      for (const auto& row : cached_rows) {
        std::printf("%-46s %10zu %10.2f us\n", row.name, bytes,
                    MeasureCached(bytes, row.pattern, reps, cores));
      }
    }
  }
  return 0;
}
