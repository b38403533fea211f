// What each communicator is doing, for `loom doctor --attach`: per
// communicator an operation counter and the last started and completed
// operation, served as JSON (loom-status/1, docs/DOCTOR.md) on TCP port
// LOOM_STATUS_PORT + local rank by one thread per process.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "collectives/algos/algorithms.h"

namespace loom {

// Progress of one communicator. Written by whichever thread executes its
// operations (one at a time), read by the status thread. A sequence lock:
// the writer never waits (a mutex here cost two lock pairs per operation),
// a reader retries the rare copy that overlapped a write.
class OpTracker {
 public:
  struct Record {
    uint64_t seq = 0;  // 0: none yet
    OpKind kind = OpKind::kInternal;
    size_t count = 0;
    DataType type = DataType::kUint8;
    RedOp op = RedOp::kSum;
    int root = -1;
    int peer = -1;
    std::chrono::steady_clock::time_point at{};
  };

  // Returns the sequence number given to this operation; `now` is when it
  // started (the tick-resolution clock, CoarseNow).
  uint64_t Started(const CollArgs& args, std::chrono::steady_clock::time_point now);
  uint64_t Started(const CollArgs& args);
  void Completed(uint64_t seq, const CollArgs& args);
  void Snapshot(Record* started, Record* completed) const;

 private:
  // A record as words that the writer and a reader may touch at once.
  struct Packed {
    std::atomic<uint64_t> seq{0}, count{0}, kind_type_op{0}, root_peer{0}, at_ns{0};
  };
  void Publish(Packed& to, uint64_t seq, const CollArgs& args,
               std::chrono::steady_clock::time_point at);
  static Record Unpack(const Packed& from);
  uint64_t next_seq_ = 1;  // writer only
  std::atomic<uint64_t> version_{0};  // odd while a record is being written
  Packed started_, completed_;
};

// What the status thread reports about one communicator.
struct StatusSource {
  std::string id;  // equal on every rank of the communicator
  int rank = 0;
  int size = 0;
  const OpTracker* tracker = nullptr;
  // Returns the sticky asynchronous error's text ("" when none).
  std::string (*async_error)(const void* ctx) = nullptr;
  const void* ctx = nullptr;
};

// Registration by communicators; the status thread starts with the first
// registration when LOOM_STATUS_PORT is set. Returns a handle for Unregister.
uint64_t RegisterStatusSource(const StatusSource& source);
void UnregisterStatusSource(uint64_t handle);

// The JSON answer (exposed for tests).
std::string StatusJson();

}  // namespace loom
