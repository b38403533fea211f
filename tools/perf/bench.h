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
  // comm, options, send and recv must outlive the Bench; send and recv hold
  // at least max(options.max_bytes, 1) bytes each.
  Bench(Communicator& comm, const PerfOptions& options, HostBuffer& send, HostBuffer& recv);

  // Measures every size x type x operator of `c`, calling on_row (on every
  // rank; the caller decides who prints) after each row. Fails with the
  // first collective's error, or kInvalidArgument for a root out of range.
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
  Status CompleteAll();
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
  std::vector<Work> pending_;
};

}  // namespace loom::perf
