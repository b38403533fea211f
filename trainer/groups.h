// The trainer's process groups: the world communicator split into TP, DP, PP
// and tied-embedding groups, each counted and timed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "loom/loom.hpp"

namespace loom::train {

// Seconds spent blocked in communication on this rank (summed over groups).
struct CommClock {
  double seconds = 0;
};

// Bytes this rank hands to loom, per kind of call: the call's input on this
// rank (all-reduce: the buffer; reduce-scatter: the whole send buffer,
// size() blocks; all-gather: this rank's block; send/recv: what it sends).
// A ring moves 2(n-1)/n, (n-1)/n, (n-1) and 1 times that on the wire.
struct GroupBytes {
  uint64_t allreduce = 0, reducescatter = 0, allgather = 0, send = 0;
  uint64_t total() const { return allreduce + reducescatter + allgather + send; }
  bool operator==(const GroupBytes&) const = default;
};

// One communicator of the grid, or a trivial group of one rank (no
// communicator; every collective is then a local copy or nothing). Counts
// the operations it issues, and their bytes, so tests can check when
// synchronisation happens and how much it hands to loom (a group of one
// counts nothing: no communicator, nothing sent).
// Calls follow the Communicator contract (same order on every member); not
// thread-safe.
class Group {
 public:
  // comm may be null: a group of one. clock must outlive the group.
  Group(std::string name, std::unique_ptr<Communicator> comm, CommClock* clock);

  const std::string& name() const { return name_; }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int size() const { return comm_ ? comm_->size() : 1; }
  uint64_t ops() const { return ops_; }
  const GroupBytes& bytes() const { return bytes_; }

  // Blocking, in place.
  Status AllReduce(float* buf, size_t n, RedOp op);
  // Non-blocking, in place; the buffer must stay untouched until Wait.
  Work AllReduceAsync(float* buf, size_t n, RedOp op);
  // send holds size() * recvcount; this rank's reduced block lands in recv.
  Work ReduceScatterAsync(const float* send, float* recv, size_t recvcount, RedOp op);
  // In place: this rank's block sits at buf + rank() * count.
  Work AllGatherAsync(float* buf, size_t count);
  // Waits for an issued operation; the time counts as communication.
  Status Wait(const Work& work);
  // One grouped exchange with up to two peers (-1 = none): the sends and
  // receives progress together, so neighbours may call it symmetrically.
  Status Exchange(const float* send_a, size_t n_send_a, int peer_send_a, float* recv_a,
                  size_t n_recv_a, int peer_recv_a, const float* send_b, size_t n_send_b,
                  int peer_send_b, float* recv_b, size_t n_recv_b, int peer_recv_b);

 private:
  std::string name_;
  std::unique_ptr<Communicator> comm_;
  CommClock* clock_;
  uint64_t ops_ = 0;
  GroupBytes bytes_;
};

// The rank grid: rank = tp + TP * (dp + DP * pp).
struct GridShape {
  int dp = 1, tp = 1, pp = 1;
  int world() const { return dp * tp * pp; }
};

struct Grid {
  GridShape shape;
  int rank = 0;  // world rank
  int tp_rank = 0, dp_rank = 0, pp_rank = 0;
  CommClock clock;
  std::unique_ptr<Group> world, tp, dp, pp;
  std::unique_ptr<Group> tie;  // {first, last} stage of one (tp, dp); null elsewhere or when PP == 1
};

// Builds the grid from `world` (null: a single process without launcher,
// which requires shape.world() == 1). Collective over the world: every rank
// calls the same splits in the same order.
Result<std::unique_ptr<Grid>> MakeGrid(std::unique_ptr<Communicator> world, const GridShape& shape);

}  // namespace loom::train
