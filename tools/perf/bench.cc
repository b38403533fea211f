// One rank's measurement loop of `loom perf` (nccl-tests' TimeTest/BenchTime).
#include "tools/perf/bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "tools/perf/check.h"

namespace loom::perf {
namespace {

constexpr size_t kPageBytes = 4096;
// Received bytes are poisoned before a checked call, so a call that writes
// nothing cannot pass on the results of the timed iterations: 0xFF.. is NaN
// in every float type and an unlikely reduction result in every integer one.
constexpr int kPoisonByte = 0xFF;

// The pattern a collective's inputs carry (reductions use their operator's).
PerfOp FillOp(Collective c, PerfOp op) {
  return UsesRedOp(c) ? op : PerfOp(RedOp::kSum);
}

// nccl-tests cannot check in-place alltoall and sendrecv (NCCL does not
// define them): they are timed, and their #wrong shows "N/A". gather,
// scatter and hypercube define in-place layouts and are checked.
bool ChecksInPlace(Collective c) {
  return c != Collective::kAllToAll && c != Collective::kSendRecv;
}

}  // namespace

void HostBuffer::Free::operator()(void* p) const {
  if (shared) {
    (void)FreeShared(p);
  } else {
    std::free(p);
  }
}

Result<HostBuffer> HostBuffer::Allocate(size_t bytes, bool shared) {
  const size_t rounded = std::max<size_t>((bytes + kPageBytes - 1) / kPageBytes, 1) * kPageBytes;
  if (shared) {
    // Zeroed and pre-faulted already.
    LOOM_ASSIGN_OR_RETURN(void* p, AllocShared(rounded));
    return HostBuffer(p, bytes, true);
  }
  void* p = std::aligned_alloc(kPageBytes, rounded);
  if (p == nullptr) {
    return SystemError("loom perf: cannot allocate " + std::to_string(rounded) +
                       " bytes of host buffer; lower -e");
  }
  std::memset(p, 0, rounded);  // touch every page now, not in a timed loop
  return HostBuffer(p, bytes, false);
}

// The arguments of one collective call.
struct Bench::Call {
  Collective collective;
  const void* send;
  void* recv;
  size_t count;
  DataType type;
  Reduction op;
  int root;
  size_t send_bytes;  // the input's extent (--rewrite-inputs)
};

Bench::Bench(Communicator& comm, const PerfOptions& options, HostBuffer& send, HostBuffer& recv,
             Watchdog& watchdog)
    : comm_(comm), options_(options), send_(send), recv_(recv), watchdog_(watchdog) {}

size_t Bench::BufferBytes(const PerfOptions& options) {
  return std::max<size_t>(options.max_bytes + 8 * static_cast<size_t>(options.unalign), 1);
}

char* Bench::SendBase(DataType type) const {
  return static_cast<char*>(send_.data()) + static_cast<size_t>(options_.unalign) * SizeOf(type);
}

char* Bench::RecvBase(DataType type) const {
  return static_cast<char*>(recv_.data()) + static_cast<size_t>(options_.unalign) * SizeOf(type);
}

// Like nccl-tests, successive iterations walk through the buffer so the
// timing does not live in one warm cache footprint; --fixed-buffers stays at
// the start, as the MPI and Gloo anchors do (their cache-resident figures are
// only comparable with that).
size_t Bench::BufferSteps(const Geometry& g, DataType type) const {
  const size_t footprint = std::max(g.send_count, g.recv_count) * SizeOf(type);
  if (footprint == 0 || options_.fixed_buffers) return 1;
  // -u's padding is not walked into: the last step still ends inside -e.
  return std::max<size_t>(std::max<size_t>(options_.max_bytes, 1) / footprint, 1);
}

Bench::Call Bench::MakeCall(Collective c, const Geometry& g, DataType type, PerfOp op,
                            bool in_place, int iter) const {
  const size_t size = SizeOf(type);
  const size_t footprint = std::max(g.send_count, g.recv_count) * size;
  const size_t shift = footprint * (static_cast<size_t>(iter) % BufferSteps(g, type));
  char* send = SendBase(type) + shift;
  char* recv = RecvBase(type) + shift;
  const auto rank = static_cast<size_t>(comm_.rank());
  Reduction red = op.op;
  if (op.mulsum && UsesRedOp(c)) {
    const uint64_t scalar = EncodeSmallValue(type, MulSumScalar(comm_.rank()));
    red = Reduction::PreMulSum(&scalar, type);  // the low bytes: little endian
  }
  Call call{c, send, recv, g.param_count, type, red, UsesRoot(c) ? root_ : -1, g.send_count * size};
  if (in_place) {
    call.send = recv + g.send_inplace_offset * rank * size;
    call.recv = recv + g.recv_inplace_offset * rank * size;
  }
  return call;
}

Status Bench::IssuePointToPoint(const Call& k) {
  const int n = comm_.size();
  const int rank = comm_.rank();
  const size_t block = k.count * SizeOf(k.type);
  const auto* send = static_cast<const char*>(k.send);
  auto* recv = static_cast<char*>(k.recv);
  // As nccl-tests: nothing to move, no call (every rank agrees on count).
  if (k.count == 0) return Status::Ok();
  // The first error of a group's members, then GroupEnd's.
  Status first;
  auto keep = [&first](Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  switch (k.collective) {
    case Collective::kGather:
      // Every rank sends its block to the root, which receives block r from
      // rank r. In place the root's own block is already where it belongs.
      LOOM_TRY(GroupStart());
      if (rank != k.root || send != recv + rank * block) {
        keep(comm_.Send(send, k.count, k.type, k.root));
        if (rank == k.root) keep(comm_.Recv(recv + rank * block, k.count, k.type, rank));
      }
      if (rank == k.root) {
        for (int r = 0; r < n; ++r) {
          if (r != rank) keep(comm_.Recv(recv + r * block, k.count, k.type, r));
        }
      }
      keep(GroupEnd());
      return first;
    case Collective::kScatter:
      // The root sends block r to rank r; every rank receives one block.
      LOOM_TRY(GroupStart());
      if (rank == k.root) {
        for (int r = 0; r < n; ++r) {
          if (r != rank) keep(comm_.Send(send + r * block, k.count, k.type, r));
        }
      }
      if (rank != k.root || recv != send + rank * block) {
        if (rank == k.root) keep(comm_.Send(send + rank * block, k.count, k.type, rank));
        keep(comm_.Recv(recv, k.count, k.type, k.root));
      }
      keep(GroupEnd());
      return first;
    case Collective::kHyperCube: {
      // An all-gather by recursive doubling: own block into its slot, then
      // at step `mask` swap everything gathered so far with rank ^ mask.
      char* own = recv + rank * block;
      if (send != own) std::memcpy(own, send, block);
      for (int mask = 1; mask < n; mask <<= 1) {
        const int have = rank & ~(mask - 1);  // first block this rank holds
        const int get = have ^ mask;          // first block the partner holds
        const size_t count = k.count * static_cast<size_t>(mask);
        LOOM_TRY(GroupStart());
        keep(comm_.Send(recv + have * block, count, k.type, rank ^ mask));
        keep(comm_.Recv(recv + get * block, count, k.type, rank ^ mask));
        keep(GroupEnd());
        LOOM_TRY(first);
      }
      return first;
    }
    default:
      return InternalError("loom perf: not a point-to-point test");
  }
}

Status Bench::Issue(const Call& k) {
  Watchdog::Scope watched(watchdog_);
  const int n = comm_.size();
  if (options_.rewrite_inputs) {
    // Each line written back as it is: dirty in this core's cache, the
    // values (and so the check) unchanged.
    volatile char* in = static_cast<char*>(const_cast<void*>(k.send));
    for (size_t i = 0; i < k.send_bytes; i += 64) in[i] = in[i];
  }
  if (k.collective == Collective::kSendRecv) {
    // A ring shift: every rank sends and receives at once, which only a
    // group can issue without deadlock.
    LOOM_TRY(GroupStart());
    Status send = comm_.Send(k.send, k.count, k.type, (comm_.rank() + 1) % n);
    Status recv = comm_.Recv(k.recv, k.count, k.type, (comm_.rank() + n - 1) % n);
    Status end = GroupEnd();
    LOOM_TRY(send);
    LOOM_TRY(recv);
    return end;
  }
  if (k.collective == Collective::kGather || k.collective == Collective::kScatter ||
      k.collective == Collective::kHyperCube) {
    return IssuePointToPoint(k);
  }
  // Blocking and back-to-back modes, and calls inside an -m group, use the
  // blocking forms (inside a group they only queue).
  if (options_.blocking != 0 || options_.back_to_back || options_.agg_iters > 1) {
    switch (k.collective) {
      case Collective::kAllReduce:
        return comm_.AllReduce(k.send, k.recv, k.count, k.type, k.op);
      case Collective::kReduceScatter:
        return comm_.ReduceScatter(k.send, k.recv, k.count, k.type, k.op);
      case Collective::kAllGather:
        return comm_.AllGather(k.send, k.recv, k.count, k.type);
      case Collective::kBroadcast:
        return comm_.Broadcast(k.send, k.recv, k.count, k.type, k.root);
      case Collective::kReduce:
        return comm_.Reduce(k.send, k.recv, k.count, k.type, k.op, k.root);
      case Collective::kAllToAll:
        return comm_.AllToAll(k.send, k.recv, k.count, k.type);
      case Collective::kSendRecv:
      case Collective::kGather:
      case Collective::kScatter:
      case Collective::kHyperCube:
        break;  // issued above
    }
    return InternalError("loom perf: unhandled collective");
  }
  switch (k.collective) {
    case Collective::kAllReduce:
      pending_.push_back(comm_.AllReduceAsync(k.send, k.recv, k.count, k.type, k.op));
      break;
    case Collective::kReduceScatter:
      pending_.push_back(comm_.ReduceScatterAsync(k.send, k.recv, k.count, k.type, k.op));
      break;
    case Collective::kAllGather:
      pending_.push_back(comm_.AllGatherAsync(k.send, k.recv, k.count, k.type));
      break;
    case Collective::kBroadcast:
      pending_.push_back(comm_.BroadcastAsync(k.send, k.recv, k.count, k.type, k.root));
      break;
    case Collective::kReduce:
      pending_.push_back(comm_.ReduceAsync(k.send, k.recv, k.count, k.type, k.op, k.root));
      break;
    case Collective::kAllToAll:
      pending_.push_back(comm_.AllToAllAsync(k.send, k.recv, k.count, k.type));
      break;
    case Collective::kSendRecv:
    case Collective::kGather:
    case Collective::kScatter:
    case Collective::kHyperCube:
      break;  // issued above
  }
  return Status::Ok();
}

Status Bench::WatchedBarrier() {
  Watchdog::Scope watched(watchdog_);
  return comm_.Barrier();
}

Status Bench::CompleteAll() {
  // One communicator runs its operations in issue order, so once the last
  // is done so are the others: waiting for it first sleeps once per batch
  // (like nccl-tests' one stream synchronisation) instead of once per
  // operation. Every Work is still waited for, even after a failure, so no
  // buffer is in use when the error propagates; the first error is reported.
  if (pending_.empty()) return Status::Ok();
  Watchdog::Scope watched(watchdog_);
  (void)pending_.back().Wait();
  Status first;
  for (const Work& w : pending_) {
    Status s = w.Wait();
    if (first.ok() && !s.ok()) first = s;
  }
  pending_.clear();
  return first;
}

Status Bench::RunWarmup(Collective c, DataType type, PerfOp op) {
  // nccl-tests warms up at the largest size, then at the smallest.
  for (const size_t bytes : {options_.max_bytes, options_.min_bytes}) {
    const Geometry g = ComputeGeometry(c, bytes, SizeOf(type), comm_.size());
    for (int iter = 0; iter < options_.warmup_iters; ++iter) {
      LOOM_TRY(Issue(MakeCall(c, g, type, op, /*in_place=*/false, iter)));
    }
    LOOM_TRY(CompleteAll());
  }
  return Status::Ok();
}

void Bench::FillInputs(Collective c, const Geometry& g, DataType type, PerfOp op, bool in_place) {
  const size_t size = SizeOf(type);
  const int rank = comm_.rank();
  const RedOp fill_op = FillOp(c, op).op;
  char* recv = RecvBase(type);
  // A scatter reads the root's input only: elsewhere the poison stays, so a
  // rank that received nothing cannot pass with its own pattern.
  const bool has_input = c != Collective::kScatter || rank == root_;
  if (!in_place) {
    if (has_input) FillPattern(SendBase(type), type, fill_op, rank, 0, g.send_count);
    std::memset(recv, kPoisonByte, g.recv_count * size);
    return;
  }
  // In place the input lives inside the receive buffer: all of it for most
  // collectives, this rank's slot for all_gather.
  std::memset(recv, kPoisonByte, std::max(g.send_count, g.recv_count) * size);
  const size_t input_offset = g.send_inplace_offset * static_cast<size_t>(rank) * size;
  if (has_input) FillPattern(recv + input_offset, type, fill_op, rank, 0, g.send_count);
}

Result<int64_t> Bench::CountWrongEverywhere(Collective c, const Geometry& g, DataType type,
                                            PerfOp op, bool in_place) {
  const int rank = comm_.rank();
  const Expectation e = ExpectationFor(c, g, rank, comm_.size(), root_);
  const size_t out_offset =
      in_place ? g.recv_inplace_offset * static_cast<size_t>(rank) * SizeOf(type) : 0;
  void* out = RecvBase(type) + out_offset;
  if (options_.corrupt_for_test && rank == 0 && e.count > 0) CorruptElement(out, type, 0);
  const auto local = static_cast<int64_t>(CountWrong(out, type, FillOp(c, op), comm_.size(), e));
  int64_t total = 0;
  Watchdog::Scope watched(watchdog_);
  LOOM_TRY(comm_.AllReduce(&local, &total, 1, DataType::kInt64, RedOp::kSum));
  return total;
}

Result<double> Bench::ReduceTime(double seconds) {
  double out = seconds;
  Watchdog::Scope watched(watchdog_);
  switch (options_.average) {
    case 0:
      LOOM_TRY(comm_.Broadcast(&seconds, &out, 1, DataType::kFloat64, 0));
      break;
    case 1:
      LOOM_TRY(comm_.AllReduce(&seconds, &out, 1, DataType::kFloat64, RedOp::kSum));
      out /= comm_.size();
      break;
    case 2:
      LOOM_TRY(comm_.AllReduce(&seconds, &out, 1, DataType::kFloat64, RedOp::kMin));
      break;
    case 3:
      LOOM_TRY(comm_.AllReduce(&seconds, &out, 1, DataType::kFloat64, RedOp::kMax));
      break;
    default:
      break;
  }
  return out;
}

Result<Measurement> Bench::Measure(Collective c, size_t bytes, DataType type, PerfOp op,
                                   bool in_place) {
  const Geometry g = ComputeGeometry(c, bytes, SizeOf(type), comm_.size());
  if (options_.check) FillInputs(c, g, type, op, in_place);
  // One untimed call (or, with --warmup-per-size, the -w warm-up calls) and
  // a barrier line the ranks up.
  const int untimed = options_.warmup_per_size ? std::max(1, options_.warmup_iters) : 1;
  for (int iter = 0; iter < untimed; ++iter) {
    LOOM_TRY(Issue(MakeCall(c, g, type, op, in_place, iter)));
  }
  LOOM_TRY(CompleteAll());
  LOOM_TRY(WatchedBarrier());
  // The timed loop keeps every Work until CompleteAll: room for all of them
  // now, so the loop never grows (and first-touches) the vector.
  pending_.reserve(static_cast<size_t>(options_.iters) * options_.agg_iters);

  // Where every iteration makes the same call it is made once, outside the
  // timed loop: the anchors' loops do nothing but call (at 8 B the walk's
  // arithmetic was a tenth of loom's instructions per call).
  const Call same = MakeCall(c, g, type, op, in_place, 0);
  const bool walks = BufferSteps(g, type) > 1;

  using Clock = std::chrono::steady_clock;
  // -z 3 times each iteration's calls and leaves its barrier out.
  Clock::duration calls_only{0};
  const auto start = Clock::now();
  for (int iter = 0; iter < options_.iters; ++iter) {
    const auto iter_start = options_.blocking == 3 ? Clock::now() : start;
    if (options_.agg_iters > 1) LOOM_TRY(GroupStart());
    Status issued;
    for (int a = 0; a < options_.agg_iters && issued.ok(); ++a) {
      issued = walks ? Issue(MakeCall(c, g, type, op, in_place, iter * options_.agg_iters + a))
                     : Issue(same);
    }
    if (options_.agg_iters > 1) {
      Status end = GroupEnd();
      if (issued.ok()) issued = end;
    }
    if (options_.blocking == 3) calls_only += Clock::now() - iter_start;
    if (issued.ok() && (options_.blocking == 1 || options_.blocking == 3)) {
      issued = WatchedBarrier();
    }
    if (!issued.ok()) {
      (void)CompleteAll();  // the issue error is the one to report
      return issued;
    }
  }
  // nccl-tests' -C time: how long this thread took to issue the loop,
  // before waiting for it (the same as the wall time for blocking calls).
  const auto issued_at = Clock::now();
  LOOM_TRY(CompleteAll());
  const auto end = Clock::now();
  const double calls = static_cast<double>(options_.iters) * options_.agg_iters;
  const auto per_call = [calls](Clock::duration d) {
    return std::chrono::duration<double>(d).count() / calls;
  };
  const double seconds = per_call(options_.blocking == 3 ? calls_only : end - start);
  LOOM_ASSIGN_OR_RETURN(const double reduced, ReduceTime(seconds));

  Measurement m;
  m.time_us = reduced * 1e6;
  m.cpu_us = per_call(options_.blocking == 3 ? calls_only : issued_at - start) * 1e6;
  const Bandwidth bw = ComputeBandwidth(c, g.param_count, SizeOf(type), reduced, comm_.size());
  m.algbw = bw.algbw;
  m.busbw = bw.busbw;
  if (options_.check && (!in_place || ChecksInPlace(c))) {
    // -c N checked calls, each on fresh inputs (the timed in-place calls
    // overwrote them); the first one with wrong elements ends the checks.
    m.wrong = 0;
    for (int round = 0; round < options_.check && m.wrong == 0; ++round) {
      FillInputs(c, g, type, op, in_place);
      LOOM_TRY(Issue(MakeCall(c, g, type, op, in_place, 0)));
      LOOM_TRY(CompleteAll());
      LOOM_ASSIGN_OR_RETURN(m.wrong, CountWrongEverywhere(c, g, type, op, in_place));
    }
  }
  return m;
}

Status Bench::Run(Collective c, const std::function<void(const Row&)>& on_row) {
  if (UsesRoot(c) && options_.root >= comm_.size()) {
    return InvalidArgument("loom perf: -r " + std::to_string(options_.root) +
                           " is not a rank (there are " + std::to_string(comm_.size()) + ")");
  }
  if (BufferBytes(options_) > send_.bytes() || BufferBytes(options_) > recv_.bytes()) {
    return InternalError("loom perf: buffers smaller than -e");
  }
  if (SkipReason(c, comm_.size())) return Status::Ok();
  // Collectives without an operator run once per type, like nccl-tests;
  // sendrecv loops over -o although the operator does nothing.
  const std::vector<PerfOp> no_op{RedOp::kSum};
  const std::vector<PerfOp>& ops = PrintsRedOp(c) ? options_.ops : no_op;
  // -r -1: every rank is the root in turn (nccl-tests' loop for rooted tests).
  std::vector<int> roots{UsesRoot(c) ? options_.root : -1};
  if (UsesRoot(c) && options_.root == -1) {
    roots.clear();
    for (int r = 0; r < comm_.size(); ++r) roots.push_back(r);
  }
  const std::vector<size_t> sizes = SizeSequence(options_);
  for (const DataType type : options_.types) {
    for (const PerfOp op : ops) {
      for (const int root : roots) {
        root_ = root;
        if (!options_.warmup_per_size) LOOM_TRY(RunWarmup(c, type, op));
        // -N 0 repeats until the process is stopped, as nccl-tests does.
        for (int cycle = 0; options_.run_cycles == 0 || cycle < options_.run_cycles; ++cycle) {
          for (const size_t bytes : sizes) {
            const Geometry g = ComputeGeometry(c, bytes, SizeOf(type), comm_.size());
            Row row;
            row.collective = c;
            row.bytes = g.Bytes(SizeOf(type));
            row.count = g.param_count;
            row.type = type;
            row.redop = PrintsRedOp(c) ? std::string(Name(op)) : "none";
            row.root = root;
            LOOM_ASSIGN_OR_RETURN(row.out_of_place, Measure(c, bytes, type, op, false));
            LOOM_ASSIGN_OR_RETURN(row.in_place, Measure(c, bytes, type, op, true));
            if (options_.report_timestamps) row.timestamp = FormatTimestamp(std::time(nullptr));
            on_row(row);
          }
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace loom::perf
