// One rank's measurement loop of `loom perf` (nccl-tests' TimeTest/BenchTime).
#include "tools/perf/bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
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
// define them): they are timed, and their #wrong shows "N/A".
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

Bench::Bench(Communicator& comm, const PerfOptions& options, HostBuffer& send, HostBuffer& recv)
    : comm_(comm), options_(options), send_(send), recv_(recv) {}

// Like nccl-tests, successive iterations walk through the buffer so the
// timing does not live in one warm cache footprint; --fixed-buffers stays at
// the start, as the MPI and Gloo anchors do (their cache-resident figures are
// only comparable with that).
size_t Bench::BufferSteps(const Geometry& g, DataType type) const {
  const size_t footprint = std::max(g.send_count, g.recv_count) * SizeOf(type);
  if (footprint == 0 || options_.fixed_buffers) return 1;
  return std::max<size_t>(recv_.bytes() / footprint, 1);
}

Bench::Call Bench::MakeCall(Collective c, const Geometry& g, DataType type, PerfOp op,
                            bool in_place, int iter) const {
  const size_t size = SizeOf(type);
  const size_t footprint = std::max(g.send_count, g.recv_count) * size;
  const size_t shift = footprint * (static_cast<size_t>(iter) % BufferSteps(g, type));
  auto* send = static_cast<char*>(send_.data()) + shift;
  auto* recv = static_cast<char*>(recv_.data()) + shift;
  const auto rank = static_cast<size_t>(comm_.rank());
  Reduction red = op.op;
  if (op.mulsum && UsesRedOp(c)) {
    const uint64_t scalar = EncodeSmallValue(type, MulSumScalar(comm_.rank()));
    red = Reduction::PreMulSum(&scalar, type);  // the low bytes: little endian
  }
  Call call{c,   send, recv, g.param_count, type, red, UsesRoot(c) ? options_.root : -1,
            g.send_count * size};
  if (in_place) {
    call.send = recv + g.send_inplace_offset * rank * size;
    call.recv = recv + g.recv_inplace_offset * rank * size;
  }
  return call;
}

Status Bench::Issue(const Call& k) {
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
  // Blocking and back-to-back modes, and calls inside an -m group, use the
  // blocking forms (inside a group they only queue).
  if (options_.blocking || options_.back_to_back || options_.agg_iters > 1) {
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
        break;
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
      break;
  }
  return Status::Ok();
}

Status Bench::CompleteAll() {
  // One communicator runs its operations in issue order, so once the last
  // is done so are the others: waiting for it first sleeps once per batch
  // (like nccl-tests' one stream synchronisation) instead of once per
  // operation. Every Work is still waited for, even after a failure, so no
  // buffer is in use when the error propagates; the first error is reported.
  if (!pending_.empty()) (void)pending_.back().Wait();
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
  auto* recv = static_cast<char*>(recv_.data());
  if (!in_place) {
    FillPattern(send_.data(), type, fill_op, rank, 0, g.send_count);
    std::memset(recv, kPoisonByte, g.recv_count * size);
    return;
  }
  // In place the input lives inside the receive buffer: all of it for most
  // collectives, this rank's slot for all_gather.
  std::memset(recv, kPoisonByte, std::max(g.send_count, g.recv_count) * size);
  const size_t input_offset = g.send_inplace_offset * static_cast<size_t>(rank) * size;
  FillPattern(recv + input_offset, type, fill_op, rank, 0, g.send_count);
}

Result<int64_t> Bench::CountWrongEverywhere(Collective c, const Geometry& g, DataType type,
                                            PerfOp op, bool in_place) {
  const int rank = comm_.rank();
  const Expectation e = ExpectationFor(c, g, rank, comm_.size(), options_.root);
  const size_t out_offset =
      in_place ? g.recv_inplace_offset * static_cast<size_t>(rank) * SizeOf(type) : 0;
  void* out = static_cast<char*>(recv_.data()) + out_offset;
  if (options_.corrupt_for_test && rank == 0 && e.count > 0) CorruptElement(out, type, 0);
  const auto local = static_cast<int64_t>(CountWrong(out, type, FillOp(c, op), comm_.size(), e));
  int64_t total = 0;
  LOOM_TRY(comm_.AllReduce(&local, &total, 1, DataType::kInt64, RedOp::kSum));
  return total;
}

Result<double> Bench::ReduceTime(double seconds) {
  double out = seconds;
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
  LOOM_TRY(comm_.Barrier());
  // The timed loop keeps every Work until CompleteAll: room for all of them
  // now, so the loop never grows (and first-touches) the vector.
  pending_.reserve(static_cast<size_t>(options_.iters) * options_.agg_iters);

  // Where every iteration makes the same call it is made once, outside the
  // timed loop: the anchors' loops do nothing but call (at 8 B the walk's
  // arithmetic was a tenth of loom's instructions per call).
  const Call same = MakeCall(c, g, type, op, in_place, 0);
  const bool walks = BufferSteps(g, type) > 1;

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (int iter = 0; iter < options_.iters; ++iter) {
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
    if (issued.ok() && options_.blocking) issued = comm_.Barrier();
    if (!issued.ok()) {
      (void)CompleteAll();  // the issue error is the one to report
      return issued;
    }
  }
  LOOM_TRY(CompleteAll());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count() /
                         (static_cast<double>(options_.iters) * options_.agg_iters);
  LOOM_ASSIGN_OR_RETURN(const double reduced, ReduceTime(seconds));

  Measurement m;
  m.time_us = reduced * 1e6;
  const Bandwidth bw = ComputeBandwidth(c, g.param_count, SizeOf(type), reduced, comm_.size());
  m.algbw = bw.algbw;
  m.busbw = bw.busbw;
  if (options_.check && (!in_place || ChecksInPlace(c))) {
    // Fresh inputs (the timed in-place calls overwrote them), one call, compare.
    FillInputs(c, g, type, op, in_place);
    LOOM_TRY(Issue(MakeCall(c, g, type, op, in_place, 0)));
    LOOM_TRY(CompleteAll());
    LOOM_ASSIGN_OR_RETURN(m.wrong, CountWrongEverywhere(c, g, type, op, in_place));
  }
  return m;
}

Status Bench::Run(Collective c, const std::function<void(const Row&)>& on_row) {
  if (UsesRoot(c) && options_.root >= comm_.size()) {
    return InvalidArgument("loom perf: -r " + std::to_string(options_.root) +
                           " is not a rank (there are " + std::to_string(comm_.size()) + ")");
  }
  if (options_.max_bytes > send_.bytes() || options_.max_bytes > recv_.bytes()) {
    return InternalError("loom perf: buffers smaller than -e");
  }
  // Collectives without an operator run once per type, like nccl-tests;
  // sendrecv loops over -o although the operator does nothing.
  const std::vector<PerfOp> no_op{RedOp::kSum};
  const std::vector<PerfOp>& ops = PrintsRedOp(c) ? options_.ops : no_op;
  const std::vector<size_t> sizes = SizeSequence(options_);
  for (const DataType type : options_.types) {
    for (const PerfOp op : ops) {
      if (!options_.warmup_per_size) LOOM_TRY(RunWarmup(c, type, op));
      for (const size_t bytes : sizes) {
        const Geometry g = ComputeGeometry(c, bytes, SizeOf(type), comm_.size());
        Row row;
        row.collective = c;
        row.bytes = g.Bytes(SizeOf(type));
        row.count = g.param_count;
        row.type = type;
        row.redop = PrintsRedOp(c) ? std::string(Name(op)) : "none";
        row.root = UsesRoot(c) ? options_.root : -1;
        LOOM_ASSIGN_OR_RETURN(row.out_of_place, Measure(c, bytes, type, op, false));
        LOOM_ASSIGN_OR_RETURN(row.in_place, Measure(c, bytes, type, op, true));
        on_row(row);
      }
    }
  }
  return Status::Ok();
}

}  // namespace loom::perf
