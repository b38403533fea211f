// Single-copy reads and the shared-memory FIFOs as setup finds them
// (shm_calibration.h): probe, timings, price, streaming choice.
#include "comm/shm_calibration.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>

#include "base/log.h"
#include "base/params.h"
#include "transports/shm/connection.h"

namespace loom {
namespace {

// A known value peers read from our address space to prove that single-copy
// reads (process_vm_readv) are permitted between us: the first word of the
// probe region, which they then also read whole to time such reads.
constexpr uint64_t kReadProbeValue = 0x6c6f6f6d70726f62ull;  // "loomprob"
constexpr size_t kReadProbeBytes = size_t{1} << 20;
constexpr size_t kReadProbeSmallBytes = size_t{64} << 10;
constexpr int kReadProbeReps = 8;  // the best of these counts

}  // namespace

const char* ReadProbeRegion() {
  static const char* const region = [] {
    char* p = new char[kReadProbeBytes];
    std::memset(p, 0x5a, kReadProbeBytes);
    std::memcpy(p, &kReadProbeValue, sizeof kReadProbeValue);
    return p;
  }();
  return region;
}

std::optional<HostRing> SameHostShmRing(int rank, const std::vector<std::string>& host_ids,
                                        const std::vector<TransportRecord>& transports) {
  std::vector<int> host;
  for (int r = 0; r < static_cast<int>(host_ids.size()); ++r) {
    if (host_ids[r] == host_ids[rank]) host.push_back(r);
  }
  if (host.size() < 2) return std::nullopt;
  for (size_t i = 0; i < host.size(); ++i) {
    for (size_t j = i + 1; j < host.size(); ++j) {
      auto link = PlanLink(transports, host[i], host[j]);
      if (!link.ok() || link->kind != TransportKind::kShm) return std::nullopt;
    }
  }
  const size_t me = static_cast<size_t>(std::find(host.begin(), host.end(), rank) - host.begin());
  return HostRing{host[(me + 1) % host.size()], host[(me + host.size() - 1) % host.size()]};
}

namespace {

// One step of a ring through the FIFOs: kReadProbeBytes to `ring.next` while
// the same arrives from `ring.prev`, every rank of the host at once, as a
// ring all-gather's step moves them. Progressed here (setup has no engine
// yet), yielding while nothing moves so that oversubscribed ranks advance.
Status FifoRingStep(Connection& next, Connection& prev, const HostRing& ring, char* dst,
                    Deadline deadline) {
  Transfer send, recv;
  send.dir = Transfer::Dir::kSend;
  send.peer = ring.next;
  send.src = ReadProbeRegion();
  send.bytes = kReadProbeBytes;
  recv.dir = Transfer::Dir::kRecv;
  recv.peer = ring.prev;
  recv.dst = dst;
  recv.bytes = kReadProbeBytes;
  next.PostSend(&send);
  prev.PostRecv(&recv);
  for (uint32_t idle = 0; !send.complete() || !recv.complete();) {
    LOOM_ASSIGN_OR_RETURN(const bool sent, next.Progress());
    bool received = false;
    if (&prev != &next) {
      LOOM_ASSIGN_OR_RETURN(received, prev.Progress());
    }
    if (sent || received) continue;
    if (++idle % 1024 == 0) {  // a dead neighbour is named, not waited for
      LOOM_TRY(next.CheckPeerAlive());
      LOOM_TRY(prev.CheckPeerAlive());
      if (deadline.expired()) {
        return TimeoutError("timing the shared-memory FIFOs with ranks " +
                            std::to_string(ring.next) + " and " + std::to_string(ring.prev) +
                            ": no progress before the deadline");
      }
    }
    sched_yield();
  }
  return Status::Ok();
}

// What setup times of this host's shared memory, the best of kReadProbeReps
// each: single-copy reads of a peer's probe region (64 KiB and 1 MiB), a
// local 1 MiB memcpy, and, when `ring` is set, a 1 MiB ring step through the
// FIFOs (FifoRingStep; every rank of the ring runs this at the same time).
struct ShmTimings {
  double small_read_us = std::numeric_limits<double>::infinity();
  double big_read_us = small_read_us;
  double copy_us = small_read_us;
  double fifo_us = small_read_us;         // infinite without a ring
  double fifo_stream_us = small_read_us;  // the same, every sender streaming
};

// Interleaved, so that all of them see the same phase of a noisy machine.
Result<ShmTimings> TimeShm(const ShmConnection& shm, uint64_t remote,
                           const std::optional<HostRing>& ring, ShmConnection* next,
                           Connection* prev, Deadline deadline) {
  thread_local std::vector<char> dst(kReadProbeBytes);
  ShmTimings t;
  auto time_us = [](auto&& once, double* best) -> Status {
    const auto t0 = std::chrono::steady_clock::now();
    LOOM_TRY(once());
    const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
    *best = std::min(*best, dt.count());
    return Status::Ok();
  };
  for (int i = 0; i < kReadProbeReps; ++i) {
    LOOM_TRY(time_us([&] { return shm.ProbePeerRead(dst.data(), remote, kReadProbeSmallBytes); },
                     &t.small_read_us));
    LOOM_TRY(time_us([&] { return shm.ProbePeerRead(dst.data(), remote, kReadProbeBytes); },
                     &t.big_read_us));
    LOOM_TRY(time_us(
        [&] {
          std::memcpy(dst.data(), ReadProbeRegion(), kReadProbeBytes);
          return Status::Ok();
        },
        &t.copy_us));
    if (ring) {
      // Each rank of the ring times the same two steps in the same order,
      // so in each all senders store alike.
      for (const bool stream : {false, true}) {
        next->set_streaming_sends(stream);
        LOOM_TRY(time_us([&] { return FifoRingStep(*next, *prev, *ring, dst.data(), deadline); },
                         stream ? &t.fifo_stream_us : &t.fifo_us));
      }
      next->set_streaming_sends(false);
    }
  }
  return t;
}

// LOOM_SHM_STREAM: "1" or "0" forces streaming sends on or off; "" (nullopt)
// leaves it to setup's timing. Anything else is kInvalidArgument naming it.
Result<std::optional<bool>> ParseShmStream(const std::string& text) {
  if (text.empty()) return std::optional<bool>();
  if (text == "0" || text == "1") return std::optional<bool>(text == "1");
  return InvalidArgument("LOOM_SHM_STREAM: expected 0, 1 or nothing (setup decides), got '" +
                         text + "'");
}

// The price of single-copy reads from a rank's timings: against its FIFOs as
// timed (streaming or not, as its sends will), or without a ring against
// kFifoShareOfMemcpy of its memcpy.
topology::PeerReadPrice PriceShmTimings(const ShmTimings& t, bool stream) {
  const bool timed_fifos = std::isfinite(t.fifo_us);
  const double fifo_us = !timed_fifos ? t.copy_us / topology::kFifoShareOfMemcpy
                         : stream     ? t.fifo_stream_us
                                      : t.fifo_us;
  const topology::PeerReadPrice c =
      topology::PricePeerReads(kReadProbeSmallBytes, t.small_read_us, kReadProbeBytes,
                               t.big_read_us, kReadProbeBytes, fifo_us, topology::kShmFifoGbs);
  LOOM_INFO(log::kInit | log::kShm,
            "single-copy reads: 64 KiB %.1f us, 1 MiB %.1f us; FIFOs 1 MiB %.1f us (%s), "
            "memcpy 1 MiB %.1f us: priced %.1f GB/s + %.1f us per call (FIFOs %.1f GB/s)",
            t.small_read_us, t.big_read_us, fifo_us,
            !timed_fifos ? "memcpy's share" : stream ? "a streamed ring step" : "a ring step",
            t.copy_us, c.gbs, c.setup_us,
            topology::kShmFifoGbs);
  return c;
}

// What a rank found at setup, kept once per process for each kind of peer (a
// thread of this process, read with memcpy, or another process, read with
// process_vm_readv) and reused by every later communicator (Split, a second
// init) whose ranks all have it: timing costs a few ms, and the host does
// not change. The price of single-copy reads, and whether sends stream.
struct ShmSetupFindings {
  topology::PeerReadPrice price;
  bool stream = false;
  bool stream_clear = false;  // one way was kClearStreamMargin faster
};
std::optional<ShmSetupFindings>& CachedShmFindings(bool same_process) {
  static std::optional<ShmSetupFindings> cache[2];
  return cache[same_process ? 1 : 0];
}
std::mutex& PeerReadPriceMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

Result<topology::PeerReadPrice> EnableSingleCopy(Exchange& exchange, int rank,
                                                 const std::vector<int>& shm_peers,
                                                 const std::vector<uint64_t>& read_probes,
                                                 const std::vector<int>& pids,
                                                 const std::optional<HostRing>& ring,
                                                 std::vector<std::unique_ptr<Connection>>& conns,
                                                 Deadline deadline, bool* stream_clear) {
  *stream_clear = false;
  LOOM_ASSIGN_OR_RETURN(const std::optional<topology::PeerReadPrice> fixed_price,
                        topology::ParsePeerReadPrice(params::kShmReadPrice.Get()));
  LOOM_ASSIGN_OR_RETURN(std::optional<bool> stream, ParseShmStream(params::kShmStream.Get()));
  auto stream_sends = [&](bool on) {
    for (int p : shm_peers) static_cast<ShmConnection*>(conns[p].get())->set_streaming_sends(on);
  };
  bool ok = params::kShmSingleCopy.Get();
  std::string why = ok ? "" : "LOOM_SHM_SINGLE_COPY=0";

  for (int p : shm_peers) {
    if (!ok) break;
    uint64_t v = 0;
    auto* shm = static_cast<ShmConnection*>(conns[p].get());
    Status s = shm->ProbePeerRead(&v, read_probes[p], sizeof(v));
    if (!s.ok() || v != kReadProbeValue) {
      ok = false;
      why = "rank " + std::to_string(p) + ": " + (s.ok() ? "probe read a wrong value" : s.message());
    }
  }
  // The peer whose memory this rank times reads of: its ring neighbour, or
  // its first shm peer when its host has no ring.
  const int read_peer = ring ? ring->next : (shm_peers.empty() ? -1 : shm_peers.front());
  const bool same_process = read_peer >= 0 && pids[read_peer] == getpid();
  std::optional<topology::PeerReadPrice> known = fixed_price;
  if (read_peer >= 0) {
    std::lock_guard<std::mutex> lock(PeerReadPriceMutex());
    if (const std::optional<ShmSetupFindings>& earlier = CachedShmFindings(same_process)) {
      if (!stream) {
        stream = earlier->stream;
        *stream_clear = earlier->stream_clear;
      }
      if (!known && ok) {
        LOOM_INFO(log::kInit | log::kShm,
                  "single-copy reads: priced %.1f GB/s + %.1f us per call, as measured earlier "
                  "in this process",
                  earlier->price.gbs, earlier->price.setup_us);
      }
      if (!known) known = earlier->price;
    }
  }
  if (!ring && !stream) stream = false;  // no ring step to time streaming with
  if (stream) stream_sends(*stream);
  // Round one: "0" (no single-copy reads), "1" (no shm peer), "1 t" (must
  // time), or "1 GBS US" (a price known without timing).
  auto price_text = [](const topology::PeerReadPrice& p) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "1 %.6g %.6g", p.gbs, p.setup_us);
    return std::string(buf);
  };
  std::string verdict = !ok                ? "0"
                        : read_peer < 0    ? "1"
                        : known && stream  ? price_text(*known)
                                           : "1 t";
  LOOM_ASSIGN_OR_RETURN(auto all, exchange.AllGather("single-copy", verdict, deadline));
  bool everyone = true, anyone_times = false;
  for (const std::string& v : all) {
    everyone = everyone && !v.empty() && v[0] == '1';
    anyone_times = anyone_times || v == "1 t";
  }
  if (!ok && !shm_peers.empty() && params::kShmSingleCopy.Get()) {
    LOOM_WARN(log::kInit | log::kShm, "rank %d: single-copy reads of same-host peers unavailable "
              "(%s): shareable buffers (loom::AllocShared) go through the shared-memory FIFOs "
              "instead of being read in place, and setup does not time the two ways of sending "
              "into the FIFOs (sends start through the cache, see LOOM_SHM_STREAM); "
              "check kernel.yama.ptrace_scope / container seccomp, or set "
              "LOOM_SHM_SINGLE_COPY=0 to silence this", rank, why.c_str());
  }
  if (!everyone) return topology::PeerReadPrice{};

  if (anyone_times) {
    // Every rank with a same-host peer times (those of a ring all together),
    // and takes what it timed for what it did not know.
    if (read_peer >= 0) {
      auto* shm = static_cast<ShmConnection*>(conns[read_peer].get());
      auto* next = ring ? static_cast<ShmConnection*>(conns[ring->next].get()) : nullptr;
      Connection* prev = ring ? conns[ring->prev].get() : nullptr;
      Result<ShmTimings> t = TimeShm(*shm, read_probes[read_peer], ring, next, prev, deadline);
      if (!t.ok()) return t.status().WithContext("rank " + std::to_string(rank));
      if (!stream) {
        stream = t->fifo_stream_us < t->fifo_us;
        *stream_clear = std::max(t->fifo_stream_us, t->fifo_us) >
                        kClearStreamMargin * std::min(t->fifo_stream_us, t->fifo_us);
        LOOM_INFO(log::kInit | log::kShm,
                  "shared-memory FIFOs: a 1 MiB ring step took %.1f us, %.1f us with streaming "
                  "stores: sends %s",
                  t->fifo_us, t->fifo_stream_us, *stream ? "stream" : "go through the cache");
      }
      if (!known) known = PriceShmTimings(*t, *stream);
      stream_sends(*stream);
      std::lock_guard<std::mutex> lock(PeerReadPriceMutex());
      CachedShmFindings(same_process) = ShmSetupFindings{*known, *stream, *stream_clear};
    }
    verdict = known ? price_text(*known) : "1";
    LOOM_ASSIGN_OR_RETURN(all, exchange.AllGather("single-copy-price", verdict, deadline));
  }
  topology::PeerReadPrice job{std::numeric_limits<double>::infinity(), 0};
  for (const std::string& v : all) {
    double gbs = 0, setup_us = 0;
    if (std::sscanf(v.c_str(), "1 %lf %lf", &gbs, &setup_us) == 2) {
      job.gbs = std::min(job.gbs, gbs);
      job.setup_us = std::max(job.setup_us, setup_us);
    }  // "1" alone: a rank without shm peers, nothing measured
  }
  for (int p : shm_peers) static_cast<ShmConnection*>(conns[p].get())->EnablePeerRead();
  if (!std::isfinite(job.gbs)) job = topology::PeerReadPrice{};  // nobody had a same-host peer
  return job;
}

}  // namespace loom
