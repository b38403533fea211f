// gloo_coll_perf.cc - the Gloo anchor for perf/compare.sh: an nccl-tests-style table
// (op size count type time algbw busbw #wrong) for Gloo's collectives over its TCP transport.
//
// A corrected version of shared/anchors/gloo_coll_perf.cc (same ops, options and columns);
// README.md beside this file gives the evidence for each change:
//  * Bookkeeping (barriers, max/sum of times and error counts) runs on a second Gloo context
//    with its own sockets. The shared harness ran a 1-element legacy AllreduceRing<double> on
//    the measured context, and that 56-byte bound-buffer send made Gloo's tcp::Pair call
//    setsockopt(SO_SNDBUF, 56): the kernel rounds this up to 4608 B and stops autotuning, and
//    unbound-buffer sends (every new-API op) never resize it. Every later op then waited for
//    delayed ACKs.
//  * Before any timing, every data pair exchanges one bound buffer of min(wmem_max, 32 MiB)
//    bytes (-P; 0 = off). Gloo sizes SO_SNDBUF from the largest bound-buffer message it has
//    sent so far, and only upwards, so this puts every socket in the state a long-running job
//    reaches, whatever the sweep order. Without it, a legacy op's first small message locks the
//    buffer at 4608 B and the next sizes stall.
//  * -S 1 runs the legacy (bound-buffer) algorithms with Gloo's synchronous pairs (the calling
//    thread reads the socket: no hand-off to the device thread); -S 2 adds busy polling. Sizes
//    above the prime size are skipped there: both ranks would block in write(2) and deadlock.
//
// Ops (-o, comma list; default all):
//   allreduce              gloo::allreduce() (new API), default algorithm = ring, out-of-place
//   allreduce_bcube        gloo::allreduce() with Algorithm::BCUBE, out-of-place
//   allreduce_ring         gloo::AllreduceRing<float> (legacy, in-place)
//   allreduce_ring_chunked gloo::AllreduceRingChunked<float> (legacy, in-place)
//   allreduce_hd           gloo::AllreduceHalvingDoubling<float> (legacy, in-place)
//   reduce_scatter_hd      gloo::ReduceScatterHalvingDoubling<float> (legacy, in-place; rank r's
//                          block is left at the START of its buffer)
//   allgather              gloo::allgather() (new API)
//   allgather_ring         gloo::AllgatherRing<float> (legacy)
//   bcast                  gloo::broadcast() (new API), root 0
//   sendrecv               ring shift with unbound buffers (like nccl-tests sendrecv)
//   pingpong               rank 0 <-> 1 with unbound buffers, one-way time = RTT/2
//
// Timing: mean over -n iterations after -w warm-up iterations, max over ranks. Legacy objects
// are built once per size (their constructors register the buffers) and run() many times; the
// new API is called per operation, as its users do. Legacy in-place ops are timed on zeros and
// then run once more on a known pattern that is checked; out-of-place ops check the last timed
// result. Inputs are small integers, so every float sum is exact.
//
// Usage: gloo_coll_perf -r RANK -s NRANKS -p STORE_DIR [-H host_ip | -I iface] [-b 8] [-e 256M]
//          [-f 2] [-w 5] [-n 20] [-B 1G] [-o ops] [-t timeout_s] [-P prime_bytes] [-S 0|1|2]
#include <gloo/algorithm.h>
#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Runner = std::function<void()>;  // performs one collective

// Gloo's tcp::Pair asks for at most this much send buffer (kMaxSendBufferSize in pair.cc).
constexpr size_t kGlooMaxSendBuffer = 32u << 20;

const std::vector<std::string> kOps = {
    "allreduce",    "allreduce_bcube",   "allreduce_ring", "allreduce_ring_chunked",
    "allreduce_hd", "reduce_scatter_hd", "allgather",      "allgather_ring",
    "bcast",        "sendrecv",          "pingpong"};

enum class Kind { kAllreduce, kReduceScatter, kAllgather, kBcast, kP2P };

Kind kindOf(const std::string& op) {
  if (op.rfind("allreduce", 0) == 0) return Kind::kAllreduce;
  if (op.rfind("reduce_scatter", 0) == 0) return Kind::kReduceScatter;
  if (op.rfind("allgather", 0) == 0) return Kind::kAllgather;
  if (op == "bcast") return Kind::kBcast;
  return Kind::kP2P;
}

// In-place legacy classes: the result overwrites the input buffer.
bool inPlaceLegacy(const std::string& op) {
  return op == "allreduce_ring" || op == "allreduce_ring_chunked" || op == "allreduce_hd" ||
         op == "reduce_scatter_hd";
}

// Ops built on bound buffers only; the others use unbound buffers, which need the device
// thread and so cannot run on synchronous pairs.
bool boundBuffersOnly(const std::string& op) { return inPlaceLegacy(op) || op == "allgather_ring"; }

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = strtod(s, &end);
  if (end && *end) {
    if (*end == 'k' || *end == 'K') v *= 1024.0;
    if (*end == 'm' || *end == 'M') v *= 1048576.0;
    if (*end == 'g' || *end == 'G') v *= 1073741824.0;
  }
  return static_cast<size_t>(v);
}

// The largest SO_SNDBUF request that still changes anything: the kernel clamps requests to
// net.core.wmem_max, Gloo clamps them to kGlooMaxSendBuffer.
size_t defaultPrimeBytes() {
  size_t wmem = 4u << 20;
  std::ifstream f("/proc/sys/net/core/wmem_max");
  if (!(f >> wmem) || wmem == 0) wmem = 4u << 20;
  return std::min(wmem, kGlooMaxSendBuffer);
}

inline float pat(int r, size_t i) { return static_cast<float>((r + 1) * static_cast<int>(i % 13 + 1)); }
inline float tagval(int r, size_t i) { return static_cast<float>(r * 100 + static_cast<int>(i % 97)); }

void sumFn(void* c, const void* a, const void* b, size_t n) {
  float* cc = static_cast<float*>(c);
  const float* aa = static_cast<const float*>(a);
  const float* bb = static_cast<const float*>(b);
  for (size_t i = 0; i < n; i++) cc[i] = aa[i] + bb[i];
}

// Sends one bound-buffer message of `bytes` to every peer of `ctx` and receives one from each.
// Gloo's tcp::Pair::send(Op&) then calls setsockopt(SO_SNDBUF, bytes) once per pair; since it
// only ever grows the buffer, no later message can shrink it. Blocks until all transfers are
// done; call it on every rank, in the same order relative to other slot-taking calls.
void primeSendBuffers(gloo::Context& ctx, size_t bytes) {
  std::vector<char> out(bytes, 1), in(bytes, 0);
  const int slot = ctx.nextSlot();
  std::vector<std::unique_ptr<gloo::transport::Buffer>> sends, recvs;
  for (int p = 0; p < ctx.size; p++) {
    if (p == ctx.rank) continue;
    auto& pair = ctx.getPair(p);
    // Every peer writes into `in` from offset 0; the content is never read.
    recvs.push_back(pair->createRecvBuffer(slot, in.data(), bytes));
    sends.push_back(pair->createSendBuffer(slot, out.data(), bytes));
  }
  for (auto& s : sends) s->send();
  for (auto& r : recvs) r->waitRecv();
  for (auto& s : sends) s->waitSend();
}

// Bookkeeping collectives on their own context, so their small messages never touch (and
// never resize) the sockets under test. Blocking; call from the main thread on every rank.
class Control {
 public:
  explicit Control(std::shared_ptr<gloo::Context> ctx) : ctx_(std::move(ctx)) {}
  void barrier() {
    gloo::BarrierOptions opts(ctx_);
    gloo::barrier(opts);
  }
  double max(double v) { return reduce(v, gloo::ReductionFunction<double>::max); }
  double sum(double v) { return reduce(v, gloo::ReductionFunction<double>::sum); }

 private:
  double reduce(double v, const gloo::ReductionFunction<double>* fn) {
    gloo::AllreduceRing<double> ar(ctx_, {&v}, 1, fn);
    ar.run();
    return v;
  }
  std::shared_ptr<gloo::Context> ctx_;
};

// The measured side: one data context and two page-aligned, pre-touched buffers that every op
// and size reuses. Single-threaded; one instance per process.
struct Bench {
  std::shared_ptr<gloo::Context> ctx;
  int rank = 0;
  int n = 1;
  float* sbuf = nullptr;
  float* rbuf = nullptr;

  // count: per-rank element count (reduce_scatter: recv count; allgather: send count).
  Runner make(const std::string& op, size_t count) {
    const int ic = static_cast<int>(count);
    if (op == "allreduce" || op == "allreduce_bcube") {
      const bool bcube = op == "allreduce_bcube";
      return [this, count, bcube] {
        gloo::AllreduceOptions o(ctx);
        o.setInput(sbuf, count);
        o.setOutput(rbuf, count);
        o.setReduceFunction(sumFn);
        if (bcube) o.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
        o.setTag(1);
        gloo::allreduce(o);
      };
    }
    if (op == "allreduce_ring")
      return legacy(std::make_shared<gloo::AllreduceRing<float>>(ctx, std::vector<float*>{sbuf}, ic));
    if (op == "allreduce_ring_chunked")
      return legacy(
          std::make_shared<gloo::AllreduceRingChunked<float>>(ctx, std::vector<float*>{sbuf}, ic));
    if (op == "allreduce_hd")
      return legacy(
          std::make_shared<gloo::AllreduceHalvingDoubling<float>>(ctx, std::vector<float*>{sbuf}, ic));
    if (op == "reduce_scatter_hd")
      return legacy(std::make_shared<gloo::ReduceScatterHalvingDoubling<float>>(
          ctx, std::vector<float*>{sbuf}, ic * n, std::vector<int>(n, ic)));
    if (op == "allgather")
      return [this, count] {
        gloo::AllgatherOptions o(ctx);
        o.setInput(sbuf, count);
        o.setOutput(rbuf, count * n);
        o.setTag(2);
        gloo::allgather(o);
      };
    if (op == "allgather_ring")
      return legacy(std::make_shared<gloo::AllgatherRing<float>>(
          ctx, std::vector<const float*>{sbuf}, rbuf, ic));
    if (op == "bcast")
      return [this, count] {
        gloo::BroadcastOptions o(ctx);
        o.setOutput(sbuf, count);
        o.setRoot(0);
        o.setTag(3);
        gloo::broadcast(o);
      };
    std::shared_ptr<gloo::transport::UnboundBuffer> sb =
        ctx->createUnboundBuffer(sbuf, count * sizeof(float));
    std::shared_ptr<gloo::transport::UnboundBuffer> rb =
        ctx->createUnboundBuffer(rbuf, count * sizeof(float));
    if (op == "sendrecv")
      return [this, sb, rb] {
        const int next = (rank + 1) % n, prev = (rank - 1 + n) % n;
        rb->recv(prev, 7);
        sb->send(next, 7);
        sb->waitSend();
        rb->waitRecv();
      };
    // pingpong: rank 1 echoes what it received.
    return [this, sb, rb] {
      if (rank == 0) {
        rb->recv(1, 9);
        sb->send(1, 9);
        sb->waitSend();
        rb->waitRecv();
      } else if (rank == 1) {
        rb->recv(0, 9);
        rb->waitRecv();
        rb->send(0, 9);
        rb->waitSend();
      }
    };
  }

  // Fills the input (zeros for timing legacy in-place ops, else the pattern) and poisons the
  // output.
  void setup(const std::string& op, size_t count, bool zero) {
    const Kind k = kindOf(op);
    const size_t in = k == Kind::kReduceScatter ? count * n : count;
    const size_t out = k == Kind::kAllgather ? count * n : count;
    for (size_t i = 0; i < in; i++) {
      if (zero) {
        sbuf[i] = 0.f;
      } else if (k == Kind::kAllreduce || k == Kind::kReduceScatter) {
        sbuf[i] = pat(rank, i);
      } else if (k == Kind::kBcast) {
        sbuf[i] = rank == 0 ? tagval(0, i) : -1.f;
      } else {
        sbuf[i] = tagval(rank, i);
      }
    }
    for (size_t i = 0; i < out; i++) rbuf[i] = -1.f;
  }

  // Wrong elements of this rank's result, by each op's documented output layout.
  long long check(const std::string& op, size_t count) const {
    const Kind k = kindOf(op);
    const float tri = static_cast<float>(n * (n + 1) / 2);
    const float* res = inPlaceLegacy(op) ? sbuf : rbuf;
    long long wrong = 0;
    if (k == Kind::kAllreduce) {
      for (size_t i = 0; i < count; i++) wrong += res[i] != tri * static_cast<float>(i % 13 + 1);
    } else if (k == Kind::kReduceScatter) {
      // ReduceScatterHalvingDoubling's distribution step copies rank r's block to offset 0.
      const size_t off = static_cast<size_t>(rank) * count;
      for (size_t i = 0; i < count; i++)
        wrong += res[i] != tri * static_cast<float>((off + i) % 13 + 1);
    } else if (k == Kind::kAllgather) {
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++) wrong += rbuf[static_cast<size_t>(r) * count + i] != tagval(r, i);
    } else if (k == Kind::kBcast) {
      for (size_t i = 0; i < count; i++) wrong += sbuf[i] != tagval(0, i);
    } else if (op == "sendrecv") {
      const int prev = (rank - 1 + n) % n;
      for (size_t i = 0; i < count; i++) wrong += rbuf[i] != tagval(prev, i);
    } else if (op == "pingpong" && rank == 0) {
      for (size_t i = 0; i < count; i++) wrong += rbuf[i] != tagval(0, i);
    }
    return wrong;
  }

 private:
  template <typename A>
  static Runner legacy(std::shared_ptr<A> a) {
    return [a] { a->run(); };
  }
};

void usage() {
  fprintf(stderr,
          "usage: gloo_coll_perf -r RANK -s NRANKS -p STORE_DIR [-H host_ip | -I iface]\n"
          "         [-b 8] [-e 256M] [-f 2] [-w 5] [-n 20] [-B 1G] [-o op,...] [-t timeout_s]\n"
          "         [-P prime_bytes (default min(wmem_max, 32M); 0 = off)] [-S 0|1|2]\n"
          "  -S 1: synchronous pairs (legacy ops only), 2: synchronous + busy polling\n"
          "  ops: ");
  for (auto& o : kOps) fprintf(stderr, "%s ", o.c_str());
  fprintf(stderr, "\n");
}

}  // namespace

int main(int argc, char** argv) {
  int rank = -1, nranks = -1, factor = 2, warmup = 5, iters = 20, timeoutS = 300, sync = 0, opt;
  size_t minb = 8, maxb = 256u << 20, budget = 1u << 30, prime = defaultPrimeBytes();
  std::string store, host = "127.0.0.1", iface, opsArg;
  while ((opt = getopt(argc, argv, "r:s:p:H:I:b:e:f:w:n:B:o:t:P:S:h")) != -1) {
    switch (opt) {
      case 'r': rank = atoi(optarg); break;
      case 's': nranks = atoi(optarg); break;
      case 'p': store = optarg; break;
      case 'H': host = optarg; break;
      case 'I': iface = optarg; break;
      case 'b': minb = parseSize(optarg); break;
      case 'e': maxb = parseSize(optarg); break;
      case 'f': factor = atoi(optarg); break;
      case 'w': warmup = atoi(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'B': budget = parseSize(optarg); break;
      case 'o': opsArg = optarg; break;
      case 't': timeoutS = atoi(optarg); break;
      case 'P': prime = parseSize(optarg); break;
      case 'S': sync = atoi(optarg); break;
      default: usage(); return 2;
    }
  }
  if (rank < 0 || nranks < 1 || rank >= nranks || store.empty() || factor < 2 || minb < 4 ||
      maxb < minb || iters < 1 || warmup < 0 || sync < 0 || sync > 2) {
    usage();
    return 2;
  }
  std::vector<std::string> ops;
  std::stringstream ss(opsArg.empty() ? std::string() : opsArg);
  for (std::string tok; std::getline(ss, tok, ',');) {
    if (std::find(kOps.begin(), kOps.end(), tok) == kOps.end()) {
      usage();
      return 2;
    }
    ops.push_back(tok);
  }
  if (ops.empty()) ops = kOps;
  for (const auto& op : ops) {
    if (sync && !boundBuffersOnly(op)) {
      fprintf(stderr, "gloo_coll_perf: -S needs bound-buffer ops; %s uses unbound buffers\n", op.c_str());
      return 2;
    }
  }

  gloo::transport::tcp::attr attr;
  if (!iface.empty()) attr.iface = iface; else attr.hostname = host;
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore fs(store);
  // Two contexts over one device: "data" carries only the measured traffic (and the prime).
  gloo::rendezvous::PrefixStore dataStore("data", fs), ctlStore("ctl", fs);
  auto data = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
  auto ctlCtx = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
  for (auto* c : {data.get(), ctlCtx.get()}) c->setTimeout(std::chrono::seconds(timeoutS));
  data->connectFullMesh(dataStore, dev);
  ctlCtx->connectFullMesh(ctlStore, dev);
  Control ctl(ctlCtx);
  if (prime > 0 && nranks > 1) primeSendBuffers(*data, prime);
  // Synchronous sends block until the whole message is in the socket, and every legacy algorithm
  // sends before it receives, so a message must fit in the (primed) send buffer.
  const size_t syncMax = prime > 0 ? prime : defaultPrimeBytes();
  if (sync && nranks > 1) {
    for (int p = 0; p < nranks; p++)
      if (p != rank) data->getPair(p)->setSync(true, sync == 2);
  }

  Bench b;
  b.ctx = data;
  b.rank = rank;
  b.n = nranks;
  const size_t cap = (maxb / sizeof(float) + 1) * sizeof(float);
  if (posix_memalign(reinterpret_cast<void**>(&b.sbuf), 4096, cap) ||
      posix_memalign(reinterpret_cast<void**>(&b.rbuf), 4096, cap)) {
    fprintf(stderr, "alloc failed\n");
    return 3;
  }
  memset(b.sbuf, 0, cap);  // first touch outside timing
  memset(b.rbuf, 0, cap);

  if (rank == 0) {
    printf("# gloo_coll_perf (loom perf/anchors)  nranks %d  warmup %d  iters %d  budget %zu B  "
           "prime %zu B  pairs %s  transport %s  gloo %d\n",
           nranks, warmup, iters, budget, prime, sync == 0 ? "async" : sync == 1 ? "sync" : "sync+busypoll",
           dev->str().c_str(), GLOO_VERSION);
    printf("# %-22s %12s %11s %5s %11s %9s %9s %7s\n", "op", "size(B)", "count", "type", "time(us)",
           "algbw", "busbw", "#wrong");
    fflush(stdout);
  }

  long long totalWrong = 0;
  for (const auto& op : ops) {
    const Kind k = kindOf(op);
    if (op == "pingpong" && nranks < 2) continue;
    for (size_t size = minb; size <= maxb; size *= static_cast<size_t>(factor)) {
      const size_t elems = size / sizeof(float);
      const bool split = k == Kind::kReduceScatter || k == Kind::kAllgather;
      const size_t count = split ? elems / nranks : elems;
      const size_t bytes = count * (split ? nranks : 1) * sizeof(float);
      if (sync && bytes > syncMax) {
        if (rank == 0) printf("# %s: sizes above %zu B skipped: synchronous pairs deadlock once both "
                              "ranks block in write(2) with the socket buffers full\n", op.c_str(), syncMax);
        break;
      }
      // AllreduceHalvingDoubling splits the buffer into nranks chunks.
      const bool skip = count == 0 || (op == "allreduce_hd" && count < static_cast<size_t>(nranks));
      if (!skip) {
        int it = iters, wu = warmup;
        if (budget > 0 && static_cast<size_t>(it) * bytes > budget) {
          it = std::max(2, static_cast<int>(budget / bytes));
          wu = std::min(wu, it / 2 + 1);
        }
        const bool legacyInPlace = inPlaceLegacy(op);
        b.setup(op, count, legacyInPlace);
        Runner run = b.make(op, count);
        for (int i = 0; i < wu; i++) run();
        ctl.barrier();
        const auto t0 = Clock::now();
        for (int i = 0; i < it; i++) run();
        double t = std::chrono::duration<double>(Clock::now() - t0).count() / it;
        if (op == "pingpong") t /= 2.0;
        const double tmax = ctl.max(t);
        if (legacyInPlace) {  // one more, checked run on the known pattern
          b.setup(op, count, false);
          run();
        }
        const long long w = static_cast<long long>(ctl.sum(static_cast<double>(b.check(op, count))));
        totalWrong += w;
        run = nullptr;  // legacy objects release their slots before the next size
        ctl.barrier();
        if (rank == 0) {
          const double algbw = static_cast<double>(bytes) / tmax / 1e9;
          double busbw = algbw;
          if (k == Kind::kAllreduce) busbw = algbw * 2.0 * (nranks - 1) / nranks;
          if (split) busbw = algbw * (nranks - 1) / nranks;
          printf("  %-22s %12zu %11zu %5s %11.2f %9.3f %9.3f %7lld\n", op.c_str(), bytes, count,
                 "float", tmax * 1e6, algbw, busbw, w);
          fflush(stdout);
        }
      }
      if (size > maxb / static_cast<size_t>(factor)) break;
    }
  }
  if (rank == 0) printf("# total wrong elements: %lld  %s\n", totalWrong, totalWrong ? "FAILED" : "OK");
  free(b.sbuf);
  free(b.rbuf);
  return totalWrong ? 1 : 0;
}
