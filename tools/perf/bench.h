// The measurement loop of `loom perf`, one rank's side: warm-up, timed
// iterations, the cross-rank time reduction and the data check, for every
// size, type and operator of one collective, the way nccl-tests runs them.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "loom/loom.hpp"
#include "tools/perf/options.h"
#include "tools/perf/report.h"
#include "tools/perf/watchdog.h"

namespace loom::perf {

// Page-aligned host buffer, allocated once at the largest size and touched
// page by page up front: a first-touch page fault costs more than a small
// collective, so it must never land inside a timed loop.
class HostBuffer {
 public:
  // bytes may be 0 (one page is still allocated so the pointer is valid).
  // shared: in shareable memory (AllocShared), as -R asks.
  static Result<HostBuffer> Allocate(size_t bytes, bool shared = false);
  void* data() const { return data_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  struct Free {
    bool shared = false;
    void operator()(void* p) const;
  };
  HostBuffer(void* data, size_t bytes, bool shared) : data_(data, Free{shared}), bytes_(bytes) {}
  std::unique_ptr<void, Free> data_;
  size_t bytes_ = 0;
};

// Runs the benchmark rows of one collective on one rank. Every rank of the
// communicator must call Run with the same options and collective, in the
// same order (it issues collectives, including small ones for the time and
// error reductions). Not thread-safe; blocks until the rows are done.
class Bench {
 public:
  // comm, options, send, recv and watchdog must outlive the Bench; send and
  // recv hold at least BufferBytes(options) bytes each. Every operation the
  // bench waits for is bracketed with the watchdog (-T).
  Bench(Communicator& comm, const PerfOptions& options, HostBuffer& send, HostBuffer& recv,
        Watchdog& watchdog);

  // What each of the two buffers must hold: -e, plus 8 bytes per element
  // of -u misalignment (the widest type), and never 0.
  static size_t BufferBytes(const PerfOptions& options);

  // Measures every size x type x operator (x root, for -r -1) of `c`, -N
  // times, calling on_row (on every rank; the caller decides who prints)
  // after each row. Fails with the first collective's error, or
  // kInvalidArgument for a root out of range. A collective that cannot run
  // on this many ranks (SkipReason) yields no rows.
  Status Run(Collective c, const std::function<void(const Row&)>& on_row);

 private:
  struct Call;
  Call MakeCall(Collective c, const Geometry& g, DataType type, PerfOp op, bool in_place,
                int iter) const;
  // How many places in the buffers successive iterations walk through (1:
  // every iteration makes the same call).
  size_t BufferSteps(const Geometry& g, DataType type) const;
  // Issues one call; non-blocking forms append their Work to pending_.
  Status Issue(const Call& call);
  // gather, scatter and hypercube: grouped Send/Recv, as nccl-tests builds them.
  Status IssuePointToPoint(const Call& call);
  Status CompleteAll();
  Status WatchedBarrier();
  // Where this type's calls start in each buffer (-u).
  char* SendBase(DataType type) const;
  char* RecvBase(DataType type) const;
  Status RunWarmup(Collective c, DataType type, PerfOp op);
  Result<Measurement> Measure(Collective c, size_t bytes, DataType type, PerfOp op, bool in_place);
  void FillInputs(Collective c, const Geometry& g, DataType type, PerfOp op, bool in_place);
  Result<int64_t> CountWrongEverywhere(Collective c, const Geometry& g, DataType type, PerfOp op,
                                       bool in_place);
  Result<double> ReduceTime(double seconds);

  Communicator& comm_;
  const PerfOptions& options_;
  HostBuffer& send_;
  HostBuffer& recv_;
  Watchdog& watchdog_;
  int root_ = 0;  // the root of the rows being measured (-r, or each rank for -r -1)
  std::vector<Work> pending_;
};

}  // namespace loom::perf
